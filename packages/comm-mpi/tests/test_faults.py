"""Faults and world-size changes, each in its own ``mpiexec -n 2`` job started from this process.

A rank that raises makes the other stop with `RankFailedError` naming it (well inside the
timeout); a rank that dies or skips a collective makes the other raise
`DistributedTimeoutError` naming it once the (settable) timeout expires; checkpoints cross world
sizes both ways. Run this module in a plain process (not under mpiexec).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from omnitensor import distributed as dist

pytestmark = pytest.mark.skipif(dist.detect_launch().multi_process,
                                reason="starts its own mpiexec jobs; run it in a plain process")

PRELUDE = """
import os, sys, time
import numpy as np
import omnitensor as ot
from omnitensor import distributed as dist
dist.init(timeout=float(os.environ.get("TEST_TIMEOUT", "60")))
r = dist.rank()
"""


def _mpiexec() -> str:
    local = Path(sys.executable).with_name("mpiexec")
    found = str(local) if local.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.skip("no mpiexec (pip install mpich)")
    return found


def _run(tmp_path: Path, body: str, *, timeout: float = 60.0, flags: tuple[str, ...] = (),
         n: int = 2) -> tuple[subprocess.CompletedProcess[str], float]:
    script = tmp_path / "job.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "MPI_", "OMPI_", "SLURM_"))}
    env.update(TEST_TIMEOUT=str(timeout), OMNITENSOR_BACKEND="ref")
    start = time.monotonic()
    done = subprocess.run([_mpiexec(), *flags, "-n", str(n), sys.executable, str(script)],
                          capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path)
    return done, time.monotonic() - start


def test_a_rank_that_raises_stops_the_others_naming_it(tmp_path: Path) -> None:
    done, _ = _run(tmp_path, """
        dist.barrier()
        if r == 1:
            raise ValueError("boom on purpose")
        start = time.monotonic()
        try:
            dist.all_reduce(ot.from_numpy(np.ones(3)), "sum").numpy()
        finally:  # how long rank 0 waited before it learned (the timeout is 120 s)
            open("waited.txt", "w").write(f"{time.monotonic() - start:.3f}")
        print("UNREACHABLE")
    """, timeout=120.0)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "ValueError: boom on purpose" in out
    assert "RankFailedError" in out and "rank 1 failed, so rank 0 stops" in out, out
    assert "UNREACHABLE" not in out
    waited = float((tmp_path / "waited.txt").read_text())
    assert waited < 30, f"rank 0 waited {waited:.1f} s: the notice, not the timeout, must stop it"


def test_a_rank_that_dies_is_named_after_the_timeout(tmp_path: Path) -> None:
    # -disable-auto-cleanup: hydra leaves rank 0 running, so omnitensor's own detection shows
    done, seconds = _run(tmp_path, """
        if r == 1:
            os._exit(3)
        dist.all_reduce(ot.from_numpy(np.ones(3)), "sum").numpy()
        print("UNREACHABLE")
    """, timeout=3.0, flags=("-disable-auto-cleanup",))
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "DistributedTimeoutError" in out and "rank(s) 1 did not arrive" in out, out
    assert "timed out after 3 s" in out
    assert seconds < 100


def test_the_launcher_reports_a_killed_rank_by_default(tmp_path: Path) -> None:
    # hydra's default cleanup kills the survivors at once and reports the dead process (by PID
    # and signal, not by rank: OMNITENSOR_LOG=info logs each rank's PID at init)
    done, seconds = _run(tmp_path, """
        if r == 1:
            import signal
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(ot.from_numpy(np.ones(3)), "sum").numpy()
    """, timeout=30.0)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "BAD TERMINATION" in out and "EXIT CODE: 9" in out, out
    assert seconds < 100


def test_a_rank_that_skips_a_collective_is_named(tmp_path: Path) -> None:
    done, _ = _run(tmp_path, """
        dist.set_timeout(2.0)
        if r == 0:
            dist.barrier()
        print(f"rank {r} done", flush=True)
    """)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "barrier (call #1): timed out after 2 s on rank 0: rank(s) 1 did not arrive" in out, out


def test_checkpoints_cross_world_sizes(tmp_path: Path) -> None:
    import omnitensor as ot
    from omnitensor import nn

    train = """
        from omnitensor import nn
        ot.manual_seed(r)
        model = nn.Linear(4, 3)
        opt = nn.SGD(model.parameters(), lr=0.1)
        @dist.data_parallel(opt)
        def step(x):
            loss = (model(x) ** 2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
            return loss
        step(ot.from_numpy(np.arange(16, dtype=np.float32).reshape(4, 4) / 16))
        dist.save_checkpoint("two.safetensors", model)
        if os.path.exists("one.safetensors"):
            other = nn.Linear(4, 3)
            dist.load_checkpoint("one.safetensors", other)
            open(f"loaded{r}.txt", "w").write(f"{float(other.weight.numpy().sum()):.6f}")
    """
    ot.manual_seed(5)
    one = nn.Linear(4, 3)
    dist.save_checkpoint(tmp_path / "one.safetensors", one)  # world size 1
    done, _ = _run(tmp_path, train)
    assert done.returncode == 0, done.stdout + done.stderr
    expected = f"{float(one.weight.numpy().sum()):.6f}"
    loaded = [(tmp_path / f"loaded{r}.txt").read_text() for r in range(2)]
    assert loaded == [expected, expected]
    # the 2-rank checkpoint loads here (world size 1) and equals rank 0's start after one step
    back = nn.Linear(4, 3)
    dist.load_checkpoint(tmp_path / "two.safetensors", back)
    ot.manual_seed(0)
    ref = nn.Linear(4, 3)
    opt = nn.SGD(ref.parameters(), lr=0.1)
    x = ot.from_numpy(np.arange(16, dtype=np.float32).reshape(4, 4) / 16)
    (ref(x) ** 2).mean().backward()
    opt.step()
    np.testing.assert_allclose(back.weight.numpy(), ref.weight.numpy(), rtol=1e-6, atol=1e-7)


def test_without_the_check_a_missing_rank_still_times_out(tmp_path: Path) -> None:
    done, _ = _run(tmp_path, """
        dist.communicator().checks = False  # OMNITENSOR_MPI_CHECK=0: no descriptor exchange
        dist.set_timeout(2.0)
        if r == 0:
            dist.all_reduce(ot.from_numpy(np.ones(4)), "sum").numpy()
        else:
            time.sleep(8)
    """)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "all_reduce: timed out after 2 s on rank 0: some rank did not complete it" in out, out
