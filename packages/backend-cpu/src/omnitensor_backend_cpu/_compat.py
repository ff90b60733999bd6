"""The one adapter around numba (untyped): jit decorators, threads, and a bit-cast intrinsic.

Every other module of this package, and every generated kernel file, reaches numba through the
typed names here, so ``mypy --strict`` needs ``ignore_missing_imports`` for numba/llvmlite only.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, Final

import numba
from llvmlite import ir as _llvm_ir
from numba import types as _types
from numba.core import event as _numba_event
from numba.core.errors import NumbaPerformanceWarning
from numba.extending import intrinsic as _intrinsic

__all__ = [
    "FASTMATH",
    "NUMBA_VERSION",
    "compile_seconds",
    "f32_from_bits",
    "f64_from_bits",
    "get_num_threads",
    "jit",
    "max_threads",
    "prange",
    "set_num_threads",
]

# NOTE: numba's event module is untyped; used through Any like the rest of numba here.
_event: Any = _numba_event


def _wide_vectors() -> None:
    """Let LLVM vectorize numba's loops 512 bits wide on x86 CPUs with AVX-512.

    LLVM's tuning for Intel's AVX-512 cores prefers 256-bit vectors in loops it vectorizes
    (``prefer-256-bit``: wide instructions once lowered the clock), so the fused elementwise
    and row kernels ran 8 floats a vector where 16 fit: F.gelu(tanh) of 16M floats took 11.5
    ms on a 2-core Xeon (AVX-512), 8.1 ms without the preference. The kernels written in LLVM
    IR (`gemm`, `intdot`) name their vector widths and are unaffected. Only the feature string
    of numba's code generator changes, before it exists (it is made for the first compiled
    function); a user's ``NUMBA_CPU_NAME`` or ``NUMBA_CPU_FEATURES`` is left alone, and
    numba's on-disk cache keys on the features, so kernels cached before are compiled again.
    """
    config: Any = numba.config
    if config.CPU_NAME is not None or config.CPU_FEATURES is not None:
        return
    from llvmlite import binding

    features: Any = binding.get_host_cpu_features()
    if features.get("avx512f", False):
        config.CPU_FEATURES = f"{features.flatten()},-prefer-256-bit"


_wide_vectors()


class _CompileClock(_event.Listener):  # type: ignore[misc]
    """Seconds numba held (or waited for) its global compiler lock: compiles and cache loads.

    numba takes the lock to compile a kernel and to load one from its on-disk cache, and fires
    ``numba:compiler_lock`` around each hold (``numba:compile`` only around real compiles).
    Loading a cached kernel costs tens to hundreds of milliseconds on first use in a process
    (five kernels 0.9 s in the quick start's first prompt, cached): counted here, it is
    reported as compile time instead of slowing the prompt's figure. The lock is re-entrant and
    fires once per acquisition, so only the outermost window counts; a thread waiting for it
    opens the window too (its kernel's run is blocked by a compile), so one depth counter
    serves every thread. A warm kernel's call takes no lock.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._depth = 0
        self._start = 0.0
        self._guard = threading.Lock()

    def on_start(self, event: Any) -> None:
        with self._guard:
            if self._depth == 0:
                self._start = time.perf_counter()
            self._depth += 1

    def on_end(self, event: Any) -> None:
        with self._guard:
            self._depth -= 1
            if self._depth == 0:
                self.seconds += time.perf_counter() - self._start


_CLOCK: Final = _CompileClock()
_event.register("numba:compiler_lock", _CLOCK)


def compile_seconds() -> float:
    """Seconds numba has spent compiling kernels, or loading them from its cache, here."""
    return _CLOCK.seconds


#: The only fastmath flags omnitensor uses: never ``nnan``/``ninf`` (NaN and inf stay right).
FASTMATH: Final = frozenset({"contract", "reassoc", "arcp"})

NUMBA_VERSION: Final[str] = str(numba.__version__)

#: ``numba.prange`` (a plain range outside compiled code).
prange: Any = numba.prange

# NOTE: "parallel=True had no effect" is advice, not an error; it must not fail a test run.
warnings.filterwarnings("ignore", category=NumbaPerformanceWarning)


def jit(*, parallel: bool = False, fastmath: bool | frozenset[str] = FASTMATH,
        cache: bool = True, inline: bool = False) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit`` with omnitensor's defaults (cached, numpy error model, limited fastmath).

    Args:
        parallel: compile ``prange`` loops for numba's thread pool.
        fastmath: flags (a subset of `FASTMATH`), or False for strict IEEE arithmetic.
        cache: cache machine code on disk (``NUMBA_CACHE_DIR`` or next to the source).
        inline: inline at the numba IR level (for tiny helpers; LLVM inlines the rest anyway).
    """
    flags: Any = set(fastmath) if isinstance(fastmath, frozenset) else fastmath
    njit: Any = numba.njit
    decorator: Callable[[Callable[..., Any]], Any] = njit(
        parallel=parallel,
        fastmath=flags,
        cache=cache,
        error_model="numpy",
        nogil=True,
        inline="always" if inline else "never",
    )
    return decorator


def set_num_threads(n: int) -> None:
    """Threads numba's parallel loops use (at most `max_threads`)."""
    numba.set_num_threads(n)


def get_num_threads() -> int:
    """Threads numba's parallel loops use now."""
    return int(numba.get_num_threads())


def max_threads() -> int:
    """The size of numba's thread pool (``NUMBA_NUM_THREADS``, fixed at first use)."""
    config: Any = numba.config
    return int(config.NUMBA_NUM_THREADS)


@_intrinsic
def _bitcast_i64_f64(typingctx: Any, value: Any) -> Any:
    # NOTE: numba has no scalar bit-cast; this one lowers to a single LLVM `bitcast`, which
    # vectorizes (a 1-element array view would not).
    sig = _types.float64(_types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], _llvm_ir.DoubleType())

    return sig, codegen


#: ``f64_from_bits(i)``: the float64 whose IEEE bits are the int64 `i` (compiled code only).
f64_from_bits: Any = _bitcast_i64_f64


@_intrinsic
def _bitcast_i32_f32(typingctx: Any, value: Any) -> Any:
    sig = _types.float32(_types.int32)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], _llvm_ir.FloatType())

    return sig, codegen


#: ``f32_from_bits(i)``: the float32 whose IEEE bits are the int32 `i` (compiled code only).
f32_from_bits: Any = _bitcast_i32_f32


@_intrinsic
def _half_to_f32(typingctx: Any, value: Any) -> Any:
    # NOTE: LLVM's `fpext half -> float`: the hardware conversion (x86 F16C vcvtph2ps, which
    # vectorizes; AArch64 fcvt), exact for every bit pattern. Only used where `HALF_CONVERSION`.
    if value != _types.uint16:
        return None
    sig = _types.float32(_types.uint16)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        half = builder.bitcast(args[0], _llvm_ir.HalfType())
        return builder.fpext(half, _llvm_ir.FloatType())

    return sig, codegen


#: ``f32_from_half(h)``: the float32 value of the IEEE half whose bits are the uint16 `h`
#: (compiled code only; see `HALF_CONVERSION`).
f32_from_half: Any = _half_to_f32


def _half_conversion() -> bool:
    import platform

    from llvmlite import binding

    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return True
    if machine not in ("x86_64", "amd64"):
        return False
    features: Any = binding.get_host_cpu_features()
    return bool(features.get("f16c", False))


#: Whether the CPU converts halves in hardware (x86 F16C, AArch64): else LLVM would call a
#: runtime library function that numba may not link, and `half` uses integer arithmetic.
HALF_CONVERSION: Final[bool] = _half_conversion()


def _apply_pending_threads() -> None:
    from . import threads

    threads.numba_loaded(set_num_threads)


_apply_pending_threads()
