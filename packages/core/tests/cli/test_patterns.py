"""``omnitensor patterns`` and the CLI skeleton; `docs/reference/ops.md` must be up to date."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

from omnitensor import dtypes as dt
from omnitensor.cli import main
from omnitensor.cli.patterns import render_rewrites
from omnitensor.ir.docs import (
    describe_attributes,
    describe_dtypes,
    describe_traits,
    render_ops_markdown,
    render_ops_table,
)
from omnitensor.ir.opdef import MISSING, Trait, all_ops, get_op

# `omnitensor.cli.main` the attribute is the console-script function; the module is this one.
main_module = importlib.import_module("omnitensor.cli.main")

OPS_MD = Path(__file__).resolve().parents[4] / "docs" / "reference" / "ops.md"
FIX = "omnitensor patterns --ops --markdown > docs/reference/ops.md"


def test_ops_md_is_up_to_date() -> None:
    if not OPS_MD.parent.is_dir():
        pytest.skip("not running from a source checkout")
    current = OPS_MD.read_text(encoding="utf-8") if OPS_MD.exists() else ""
    expected = render_ops_markdown()
    if current != expected:
        old, new = current.splitlines(), expected.splitlines()
        pairs = enumerate(zip(old, new, strict=False))
        line = next((i for i, (a, b) in pairs if a != b), min(len(old), len(new)))
        pytest.fail(
            f"docs/reference/ops.md is stale (first difference at line {line + 1}); regenerate it "
            f"from the repository root with: {FIX}",
            pytrace=False,
        )


def test_markdown_lists_every_op() -> None:
    text = render_ops_markdown()
    for name in all_ops():
        assert f"\n### {name}\n" in text
        assert f"[`{name}`](#{name})" in text
    assert text.endswith("\n") and not text.endswith("\n\n")


def test_table_lists_every_op_with_its_summary() -> None:
    lines = render_ops_table().splitlines()
    assert lines[0].split()[:3] == ["op", "operands", "attributes"]
    by_name = {line.split()[0]: line for line in lines[1:]}
    assert set(by_name) == set(all_ops())
    add = by_name["add"]
    assert "lhs, rhs" in add and "commutative" in add and "numeric" in add
    assert "AddView" in add and add.endswith(get_op("add").summary)


def test_descriptions() -> None:
    assert describe_dtypes(dt.ALL) == "all"
    assert describe_dtypes(dt.INTEGER + dt.BOOL) == "integer + bool"
    assert describe_dtypes((dt.float32, dt.float64)) == "f32 + f64"
    assert describe_dtypes(dt.FLOATING + (dt.uint32,)) == "floating + u32"
    assert describe_traits(Trait.ELEMENTWISE | Trait.BINARY) == "elementwise, binary"
    assert describe_traits(Trait.NONE) == "-"
    assert describe_attributes(get_op("convert")) == "dtype"
    for op in all_ops().values():
        text = describe_attributes(op)
        for spec in op.attributes:
            assert (f"{spec.name}=" in text) == (spec.default is not MISSING), (op.name, text)


def test_cli_ops(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["patterns", "--ops"]) == 0
    assert capsys.readouterr().out == render_ops_table()
    assert main(["patterns"]) == 0  # --ops is the default
    assert capsys.readouterr().out == render_ops_table()
    assert main(["--log-level", "error", "patterns", "--ops", "--markdown"]) == 0
    assert capsys.readouterr().out == render_ops_markdown()


def test_cli_rewrites_without_optimizer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "omnitensor.optimizer.registry", None)
    assert render_rewrites() == "no rewrite patterns registered\n"
    assert main(["patterns", "--rewrites"]) == 0
    assert capsys.readouterr().out == "no rewrite patterns registered\n"


def test_cli_rewrites_lists_patterns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = types.ModuleType("omnitensor.optimizer.registry")
    pattern = types.SimpleNamespace(name="add_zero", pass_name="canonicalize", doc="add(x, 0) -> x")
    fake.all_patterns = lambda: [pattern]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "omnitensor.optimizer.registry", fake)
    assert main(["patterns", "--ops", "--rewrites"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(render_ops_table())
    assert "canonicalize  add_zero  add(x, 0) -> x" in out


def test_verbs_and_missing_verb_modules(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert {"backends", "patterns", "conformance"} <= set(main_module.VERBS)
    monkeypatch.setattr(main_module, "VERBS", ("no_such_verb", "patterns"))
    parser = main_module.build_parser()
    assert main(["patterns", "--rewrites"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        parser.parse_args(["no_such_verb"])


def test_no_verb_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: omnitensor" in capsys.readouterr().out


def test_bad_log_level_is_rejected() -> None:
    with pytest.raises(SystemExit):
        main(["--log-level", "loud", "patterns"])
