"""Offline checks of generated CUDA C with the CUDA toolkit's nvcc (no GPU needed).

`compile_ptx` compiles a source exactly as the backend would load it on a GPU (to PTX for a
virtual architecture); `HostLibrary` compiles the same text with ``-DOT_HOST_HARNESS`` into a
shared library whose ``<kernel>_host`` entry points run the kernels' logic functions over the
whole grid on the CPU. Used by the tests; the backend itself compiles with CuPy/NVRTC.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

__all__ = ["HostLibrary", "check_ptx", "compile_checked", "compile_ptx", "nvcc_path", "run_on_host"]

#: The oldest architecture the kernels are checked for (the warp shuffles need sm_30+).
ARCH: Final = "sm_75"


def nvcc_path() -> str | None:
    """The nvcc on PATH (or under CUDA_HOME/CUDA_PATH), or None."""
    found = shutil.which("nvcc")
    if found:
        return found
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root and os.path.exists(os.path.join(root, "bin", "nvcc")):
            return os.path.join(root, "bin", "nvcc")
    return None


def _cache_dir() -> Path:
    path = Path(os.environ.get("OMNITENSOR_CUDA_CHECK_CACHE",
                               os.path.join(tempfile.gettempdir(), "omnitensor-cuda-check")))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _run(args: Sequence[str]) -> None:
    done = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"nvcc failed ({' '.join(args)}):\n{done.stderr[-4000:]}")


def compile_ptx(source: str, *, arch: str = ARCH) -> str:
    """PTX text of `source` (raises RuntimeError with nvcc's diagnostics on failure)."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise RuntimeError("nvcc is not on PATH")
    key = hashlib.sha256((arch + source).encode()).hexdigest()[:20]
    out = _cache_dir() / f"{key}.ptx"
    if not out.exists():
        src = _cache_dir() / f"{key}.cu"
        src.write_text(source)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        _run([nvcc, "-ptx", f"-arch={arch}", "-o", str(tmp), str(src)])
        tmp.replace(out)
    return out.read_text()


class HostLibrary:
    """`source` compiled for the host: call ``<kernel>_host`` on numpy buffers."""

    def __init__(self, source: str) -> None:
        nvcc = nvcc_path()
        if nvcc is None:
            raise RuntimeError("nvcc is not on PATH")
        self.source = source
        key = hashlib.sha256(("host" + source).encode()).hexdigest()[:20]
        lib = _cache_dir() / f"{key}.so"
        if not lib.exists():
            src = _cache_dir() / f"{key}.cu"
            src.write_text(source)
            tmp = lib.with_suffix(f".{os.getpid()}.tmp")
            _run([nvcc, "-x", "cu", "-O1", "-DOT_HOST_HARNESS", "-Xcompiler", "-fPIC",
                  "-shared", f"-arch={ARCH}", "-o", str(tmp), str(src)])
            tmp.replace(lib)
        self._lib = ctypes.CDLL(str(lib))

    def launch(self, kernel: str, n: int, params: Sequence[int],
               buffers: Sequence[np.ndarray[Any, Any]]) -> None:
        """Run kernel `kernel` over `n` threads (thread kernels) or rows (warp kernels).

        `buffers` are passed by their data pointers (base of each array; writable ones are
        written in place), exactly as CuPy passes device arrays.
        """
        fn = getattr(self._lib, f"{kernel}_host")
        p = np.ascontiguousarray(np.asarray(list(params) or [0], dtype=np.int64))
        ptrs = (ctypes.c_void_p * max(len(buffers), 1))(*[b.ctypes.data for b in buffers])
        fn(ctypes.c_longlong(n), p.ctypes.data_as(ctypes.c_void_p), ptrs)


def check_ptx(sources: dict[str, str], *, chunks: int = 2) -> None:
    """Compile kernels `sources` (name -> text) to PTX in `chunks` concurrent nvcc runs.

    Raises RuntimeError when nvcc fails or a kernel's entry is missing from the PTX.
    """
    from concurrent.futures import ThreadPoolExecutor

    names = list(sources)
    parts = [names[k::chunks] for k in range(chunks) if names[k::chunks]]
    with ThreadPoolExecutor(max_workers=max(len(parts), 1)) as pool:
        done = [(part, pool.submit(compile_ptx, "".join(sources[n] for n in part)))
                for part in parts]
        for part, text in done:
            missing = [n for n in part if f".entry {n}(" not in text.result()]
            if missing:
                raise RuntimeError(f"nvcc: kernels missing from the PTX: {missing[:5]}")


def compile_checked(sources: dict[str, str], *, chunks: int = 2) -> HostLibrary:
    """`check_ptx` of `sources` and, concurrently, their host library (nvcc is single-threaded)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        host = pool.submit(HostLibrary, "".join(sources.values()))
        check_ptx(sources, chunks=chunks)
        return host.result()


def run_on_host(lowered: Any, inputs: Sequence[np.ndarray[Any, Any]], *,
                donated: frozenset[int] = frozenset(),
                library: HostLibrary | None = None) -> list[np.ndarray[Any, Any]]:
    """Run a `lower.Lowered` launch list on the CPU: kernels through their host harness.

    ``matmul`` steps (cuBLAS on a GPU) run with numpy on the same strided views: the one part
    of a launch list this cannot check. All kernels of the list are compiled in one library
    (or come from `library`). Inputs must be dense; bfloat16/float16 travel as their 16-bit
    words, as on the GPU. Inputs in `donated` may be written in place (as on the GPU).
    """
    steps, bound = lowered.plan(donated)
    if library is None:
        sources: dict[str, str] = {}
        for step in steps:
            if step.kind != "matmul":
                sources.setdefault(step.name, step.source)
        library = HostLibrary("".join(sources.values())) if sources else None
    slots: list[np.ndarray[Any, Any]] = []
    for k, (shape, dtype) in enumerate(lowered.slot_shapes):
        if k < lowered.n_inputs:
            slots.append(np.ascontiguousarray(inputs[k]))
        elif k in bound:
            slots.append(slots[bound[k]])
        elif k in lowered.constants:
            slots.append(np.ascontiguousarray(lowered.constants[k]))
        else:
            slots.append(np.zeros(max(int(np.prod(shape)), 1), dtype.np))
    for step in steps:
        if step.kind == "matmul":
            _host_matmul(step, slots)
        else:
            assert library is not None
            library.launch(step.name, step.n, step.params, [slots[s] for s in step.slots])
    outs = []
    for view in lowered.outputs:
        base = slots[view.slot].reshape(-1)
        item = base.itemsize
        outs.append(np.lib.stride_tricks.as_strided(
            base[view.offset:], view.shape, [s * item for s in view.strides]).copy())
    return outs


def _host_matmul(step: Any, slots: list[np.ndarray[Any, Any]]) -> None:
    bs, m, n, k, loff, lsb, lsm, lsk, roff, rsb, rsk, rsn = step.params[:12]
    a_flat, b_flat = slots[step.slots[0]].reshape(-1), slots[step.slots[1]].reshape(-1)
    item = a_flat.itemsize
    a = np.lib.stride_tricks.as_strided(a_flat[loff:], (bs, m, k),
                                        [s * item for s in (lsb, lsm, lsk)])
    b = np.lib.stride_tricks.as_strided(b_flat[roff:], (bs, k, n),
                                        [s * item for s in (rsb, rsk, rsn)])
    slots[step.slots[2]].reshape(-1)[: bs * m * n] = np.matmul(a, b).reshape(-1)
