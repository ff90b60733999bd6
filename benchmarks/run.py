"""Every figure of the speed table for one backend: the kernel table, then LLM decode.

Each part runs in its own process (so one part's threads and caches do not disturb the next),
with its competitors measured in the same run, interleaved; see `cpu_kernels.py` and
`decode.py` for what is measured.

    python benchmarks/run.py --backend cpu [--small] [--rounds 15] [--decode-rounds 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    """Run the kernel table and the decode benchmark; return the first failing exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--small", action="store_true", help="a tiny decode model, few rounds")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--decode-rounds", type=int, default=3)
    args = parser.parse_args()
    if args.backend != "cpu":
        print(f"run.py: only the cpu backend has a kernel table yet (got {args.backend!r})")
        return 2
    commands = [
        [sys.executable, str(HERE / "cpu_kernels.py"), "--rounds",
         str(5 if args.small else args.rounds)],
        [sys.executable, str(HERE / "decode.py"), "--backend", args.backend, "--rounds",
         str(1 if args.small else args.decode_rounds)] + (["--small"] if args.small else []),
    ]
    status = 0
    for command in commands:
        print(f"\n$ {' '.join(command[1:])}", flush=True)
        code = subprocess.call(command)
        status = status or code
    return status


if __name__ == "__main__":
    sys.exit(main())
