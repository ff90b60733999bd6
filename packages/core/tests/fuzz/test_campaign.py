"""A short seeded fuzz campaign per format: only project errors, no hang, no memory blow-up.

The long campaign is run by hand (``python benchmarks/fuzz.py --cases 3000``); its figures are
in docs/architecture.md. Every failure class it found has a test in `test_regressions`.
"""

from __future__ import annotations

import os
from types import ModuleType

import pytest

CASES = int(os.environ.get("OMNITENSOR_FUZZ_CASES", "300"))


@pytest.mark.parametrize("fmt", ["gguf", "gguf-bytes", "hf", "spec", "ptir"])
def test_short_campaign(fuzz: ModuleType, fmt: str) -> None:
    outcomes = fuzz.campaign(fmt, cases=CASES, seed=19, time_limit=10.0)
    failed = [o for o in outcomes if o.failed]
    report = "\n".join(f"#{o.index}: {o.kind} {o.name} {o.message[:200]} [{o.detail[:160]}] "
                       f"(reproduce: python benchmarks/fuzz.py --formats {fmt} --seed 19 "
                       f"--case {o.index})" for o in failed[:10])
    assert not failed, f"{fuzz.summarize(fmt, outcomes)}\n{report}"
    assert len(outcomes) == CASES
    assert sum(o.kind == "skip" for o in outcomes) < CASES // 5  # the cases really ran
