"""`MPICommunicator`: omnitensor's collectives over mpi4py, with fault and mismatch detection.

Every collective runs in two phases on two duplicates of ``COMM_WORLD``:

1. *check* (``OMNITENSOR_MPI_CHECK=0`` skips it): each rank sends every other rank a short
   descriptor (sequence number, op, dtype, shape, attributes) point to point, so ranks that
   disagree raise `CollectiveMismatchError` showing each rank's call, and ranks that never
   arrive are named when the timeout expires;
2. *data*: the nonblocking MPI collective (``Iallreduce`` ...) on the numpy buffers themselves
   (no copy for contiguous arrays of MPI-native dtypes). Results of 256 KiB or more go into
   buffers recycled from a small pool once nothing references them any more (CPython's
   reference count says so), which saves the page faults of a fresh allocation per call
   (``OMNITENSOR_MPI_POOL``: how many, default 4; 0 disables).

Both phases are waited for by polling (``Testall``), which also watches the control channel for
a failure notice: a rank whose Python raises (`sys.excepthook`) prints its traceback and tells
every other rank; they stop with `RankFailedError` naming it, print it and acknowledge; once all
have (or the timeout passed) it aborts the job. Never a silent hang.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Final

import numpy as np
from mpi4py import MPI

from omnitensor.backend.communicators import Communicator
from omnitensor.errors import (
    ArgumentTypeError,
    CollectiveMismatchError,
    DistributedError,
    DistributedTimeoutError,
    RankFailedError,
)

__all__ = ["MPICommunicator"]

logger = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]

_TAG_CHECK: Final = 11
_TAG_FAULT: Final = 12
_TAG_ACK: Final = 13
_DESCRIPTOR_BYTES: Final = 256
_POLL_SECONDS: Final = 0.005  # how often a waiting rank looks for failure notices
_OPS: Final = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
# dtypes MPI has no type for: reduced in float32 (and rounded once).
_WIDEN: Final = frozenset({"float16", "bfloat16"})
_POOL_MIN_BYTES: Final = 256 * 1024
_SPIN_SECONDS: Final = 0.0002
_ABORT_GRACE_SECONDS: Final = 1.0


class MPICommunicator(Communicator):
    """Collectives among the ranks of ``MPI.COMM_WORLD`` (see the module docstring).

    Args:
        timeout: seconds a collective waits for the other ranks before raising
            `DistributedTimeoutError` (positive).

    Attributes:
        checks: run the descriptor check before each collective (default: True, or
            ``OMNITENSOR_MPI_CHECK=0``). Without it a mismatch is undefined behaviour of MPI
            (wrong results, a crash or a timeout) and a timeout cannot name the missing ranks;
            every rank must set the same value.

    Raises:
        ArgumentTypeError: `timeout` is not a positive number.
    """

    name = "mpi"

    def __init__(self, timeout: float = 300.0) -> None:
        self._timeout = _positive(timeout)
        world = MPI.COMM_WORLD
        self._data = world.Dup()
        self._ctrl = world.Dup()
        self._rank = int(world.Get_rank())
        self._size = int(world.Get_size())
        self._seq = 0
        self._notified = False
        self._failed_peer: int | None = None
        self._pool: list[Array] = []
        self._pool_size = _pool_size()
        self.checks = _checks_enabled()
        self._previous_hook: Callable[..., Any] | None = None
        if self._size > 1:
            self._previous_hook = sys.excepthook
            sys.excepthook = self._excepthook

    # --- the contract ---------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """This process's rank in ``COMM_WORLD``."""
        return self._rank

    @property
    def world_size(self) -> int:
        """The size of ``COMM_WORLD``."""
        return self._size

    @property
    def timeout(self) -> float:
        """Seconds a collective waits for the other ranks."""
        return self._timeout

    def set_timeout(self, seconds: float) -> None:
        """Change the timeout (positive seconds)."""
        self._timeout = _positive(seconds)

    def all_reduce(self, x: Array, *, reduction: str) -> Array:
        """Elementwise `reduction` over the ranks (``Iallreduce`` on the array's buffer)."""
        self._check("all_reduce", x, f"reduction={reduction}")
        send, restore = _reducible(x)
        out = self._output(send.shape, send.dtype)
        self._wait([self._data.Iallreduce(send, out, op=_OPS[reduction])], "all_reduce")
        if reduction == "mean":
            out /= self._size
        return restore(out)

    def all_gather(self, x: Array, *, axis: int) -> Array:
        """Every rank's `x` along `axis`, in rank order (``Iallgather``)."""
        self._check("all_gather", x, f"axis={axis}")
        send = _contiguous(x)
        out = self._output((self._size, *send.shape), send.dtype)
        self._wait([self._data.Iallgather(_bytes(send), _bytes(out))], "all_gather")
        if axis == 0:
            return out.reshape((self._size * send.shape[0], *send.shape[1:]))
        return np.concatenate(list(out), axis=axis)

    def reduce_scatter(self, x: Array, *, reduction: str, axis: int) -> Array:
        """Block `rank` of the reduction along `axis` (``Ireduce_scatter_block``)."""
        self._check("reduce_scatter", x, f"reduction={reduction} axis={axis}")
        front = np.moveaxis(x, axis, 0)  # (n, ...) with the scattered axis first
        send, restore = _reducible(front)
        out = self._output((send.shape[0] // self._size, *send.shape[1:]), send.dtype)
        self._wait([self._data.Ireduce_scatter_block(send, out, op=_OPS[reduction])],
                   "reduce_scatter")
        if reduction == "mean":
            out /= self._size
        return np.ascontiguousarray(np.moveaxis(restore(out), 0, axis))

    def broadcast(self, x: Array, *, root: int) -> Array:
        """Rank `root`'s `x` (``Ibcast``)."""
        self._check("collective_broadcast", x, f"root={root}")
        if self._rank == root:
            out = self._output(x.shape, x.dtype)
            out[...] = x
        else:
            out = self._output(x.shape, x.dtype)
        self._wait([self._data.Ibcast(_bytes(out), root=root)], "collective_broadcast")
        return out

    def barrier(self) -> None:
        """Wait for every rank (``Ibarrier``), with the timeout and failure checks."""
        self._check("barrier", None, "")
        self._wait([self._data.Ibarrier()], "barrier")

    def all_gather_bytes(self, data: bytes) -> list[bytes]:
        """Every rank's `data` in rank order (lengths first, then ``Iallgatherv``)."""
        self._check("all_gather_bytes", None, "")
        lengths = np.empty(self._size, np.int64)
        mine = np.asarray([len(data)], np.int64)
        self._wait([self._data.Iallgather(mine, lengths)], "all_gather_bytes")
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        out = np.empty(int(lengths.sum()), np.uint8)
        send = np.frombuffer(data, np.uint8) if data else np.empty(0, np.uint8)
        self._wait([self._data.Iallgatherv(
            [send, MPI.BYTE], [out, (lengths.tolist(), offsets.tolist()), MPI.BYTE])],
            "all_gather_bytes")
        return [out[o:o + n].tobytes() for o, n in zip(offsets, lengths, strict=True)]

    def close(self) -> None:
        """Free the duplicated communicators and restore `sys.excepthook`."""
        if self._previous_hook is not None and sys.excepthook == self._excepthook:
            sys.excepthook = self._previous_hook
        for comm in (self._data, self._ctrl):
            if comm != MPI.COMM_NULL:
                comm.Free()

    # --- result buffers -------------------------------------------------------------------

    def _output(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
        """A C-contiguous result buffer: a free pooled one of this shape and dtype, or new."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if self._pool_size == 0 or nbytes < _POOL_MIN_BYTES:
            return np.empty(shape, dtype)
        for i in range(len(self._pool)):
            # NOTE: 2 references (the pool's slot and getrefcount's argument) mean that no
            # result, view or backend buffer holds it any more, so nothing can read it again.
            if sys.getrefcount(self._pool[i]) == 2 and self._pool[i].shape == shape and (
                    self._pool[i].dtype == dtype):
                buf = self._pool[i]
                buf.flags.writeable = True  # the tensor layer froze it while it was a result
                return buf
        fresh = np.empty(shape, dtype)
        if len(self._pool) >= self._pool_size:
            free = [i for i in range(len(self._pool)) if sys.getrefcount(self._pool[i]) == 2]
            if not free:
                return fresh
            del self._pool[free[0]]
        self._pool.append(fresh)
        return fresh

    # --- check phase ----------------------------------------------------------------------

    def _check(self, op: str, x: Array | None, attrs: str) -> None:
        """Exchange descriptors with every rank; raise when they differ or ranks are missing."""
        self._seq += 1
        if self._size == 1 or not self.checks:
            return
        what = "" if x is None else f" {x.dtype}{list(x.shape)}"
        text = f"#{self._seq} {op}{what} {attrs}".strip()
        mine = np.zeros(_DESCRIPTOR_BYTES, np.uint8)
        encoded = text.encode()[:_DESCRIPTOR_BYTES]
        mine[:len(encoded)] = np.frombuffer(encoded, np.uint8)
        peers = [r for r in range(self._size) if r != self._rank]
        boxes = {r: np.zeros(_DESCRIPTOR_BYTES, np.uint8) for r in peers}
        receives = [self._ctrl.Irecv(boxes[r], source=r, tag=_TAG_CHECK) for r in peers]
        sends = [self._ctrl.Isend(mine, dest=r, tag=_TAG_CHECK) for r in peers]
        self._wait(receives + sends, f"{op} (call #{self._seq})", receive_from=peers)
        seen = {self._rank: text}
        seen.update({r: bytes(boxes[r]).rstrip(b"\0").decode(errors="replace") for r in peers})
        if len(set(seen.values())) > 1:
            calls = "; ".join(f"rank {r}: {seen[r]}" for r in sorted(seen))
            odd = sorted(r for r, t in seen.items() if t != text)
            raise CollectiveMismatchError(
                f"{op}: ranks called different collectives or with different shapes, dtypes or "
                f"attributes ({calls}); every rank must make the same calls in the same order",
                ranks=odd, op=op)

    # --- waiting --------------------------------------------------------------------------

    def _wait(self, requests: Sequence[MPI.Request], what: str, *,
              receive_from: Sequence[int] = ()) -> None:
        """Poll `requests` to completion; raise on a failure notice, an MPI error or timeout."""
        deadline = time.monotonic() + self._timeout
        next_poll = time.monotonic() + _POLL_SECONDS
        pending = list(requests)
        spin_until = time.monotonic() + _SPIN_SECONDS
        try:
            # NOTE: spin first, as MPI's blocking calls do (the peer is usually there within
            # microseconds), then yield the core between tests: on a machine with more busy
            # processes than cores the peer must get scheduled. Notices and the deadline are
            # checked every 5 ms.
            while not MPI.Request.Testall(pending):
                now = time.monotonic()
                if now < next_poll:
                    if now > spin_until:
                        os.sched_yield()
                    continue
                next_poll = now + _POLL_SECONDS
                self._raise_on_notice(what)
                if now > deadline:
                    self._timed_out(requests, what, receive_from)
        except MPI.Exception as exc:
            raise DistributedError(
                f"{what}: MPI failed on rank {self._rank} ({exc.Get_error_string()}); another "
                "rank probably died", ranks=()) from exc

    def _timed_out(self, requests: Sequence[MPI.Request], what: str,
                   receive_from: Sequence[int]) -> None:
        # NOTE: requests are left pending (MPI forbids cancelling collective ones); the error
        # ends this rank's use of the job.
        missing = [r for r, req in zip(receive_from, requests, strict=False) if not req.Test()]
        who = (f"rank(s) {', '.join(map(str, missing))} did not arrive" if missing
               else "some rank did not complete it")
        raise DistributedTimeoutError(
            f"{what}: timed out after {self._timeout:g} s on rank {self._rank}: {who} (it may "
            "have died, be stuck, or have skipped this collective); set the timeout with "
            "omnitensor.distributed.init(timeout=...) or OMNITENSOR_DIST_TIMEOUT",
            ranks=missing or [r for r in range(self._size) if r != self._rank])

    def _raise_on_notice(self, what: str) -> None:
        status = MPI.Status()
        if not self._ctrl.Iprobe(source=MPI.ANY_SOURCE, tag=_TAG_FAULT, status=status):
            return
        source = status.Get_source()
        size = status.Get_count(MPI.BYTE)
        box = np.empty(size, np.uint8)
        self._ctrl.Recv(box, source=source, tag=_TAG_FAULT)
        message = box.tobytes().decode(errors="replace")
        self._failed_peer = source
        self._notified = True  # the failure is known everywhere: do not notify again
        raise RankFailedError(
            f"{what}: rank {source} failed, so rank {self._rank} stops: {message}",
            ranks=[source])

    # --- failure notices ------------------------------------------------------------------

    def _excepthook(self, kind: type[BaseException], exc: BaseException,
                    tb: TracebackType | None) -> None:
        """Print the error, tell every other rank, wait for their acknowledgements, abort."""
        previous = self._previous_hook or sys.__excepthook__
        previous(kind, exc, tb)
        sys.stdout.flush()
        sys.stderr.flush()
        if self._failed_peer is not None:
            # Printed: tell the failed rank, which aborts the job once every rank has said so
            # (so no rank is killed while it prints); abort ourselves if it never does.
            self._ctrl.Isend(np.zeros(1, np.uint8), dest=self._failed_peer, tag=_TAG_ACK)
            time.sleep(self._timeout)
        elif not self._notified and not isinstance(exc, KeyboardInterrupt):
            self.notify_failure(f"{kind.__name__}: {exc}")
            # NOTE: the launcher forwards the ranks' output asynchronously; an abort right
            # after the acknowledgements can lose what the others just printed.
            time.sleep(_ABORT_GRACE_SECONDS)
        MPI.COMM_WORLD.Abort(1)

    def notify_failure(self, message: str) -> None:
        """Tell every other rank that this one failed; wait (at most the timeout) for acks.

        Each rank acknowledges once it has printed its `RankFailedError`.

        Called by the except hook; callers that catch an error themselves may call it too.
        """
        self._notified = True
        peers = [r for r in range(self._size) if r != self._rank]
        payload = np.frombuffer(message.encode()[:4000] or b"?", np.uint8).copy()
        sends = [self._ctrl.Isend(payload, dest=r, tag=_TAG_FAULT) for r in peers]
        acks = {r: np.zeros(1, np.uint8) for r in peers}
        receives = {r: self._ctrl.Irecv(acks[r], source=r, tag=_TAG_ACK) for r in peers}
        also_failed: set[int] = set()  # ranks that failed too: they will not acknowledge
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            status = MPI.Status()
            while self._ctrl.Iprobe(source=MPI.ANY_SOURCE, tag=_TAG_FAULT, status=status):
                box = np.empty(status.Get_count(MPI.BYTE), np.uint8)
                self._ctrl.Recv(box, source=status.Get_source(), tag=_TAG_FAULT)
                also_failed.add(status.Get_source())
            if all(r in also_failed or receives[r].Test() for r in peers):
                break
            time.sleep(_POLL_SECONDS)
        else:
            late = [r for r in peers if r not in also_failed and not receives[r].Test()]
            logger.error("rank %d: rank(s) %s did not acknowledge the failure notice within "
                         "%g s; aborting the job", self._rank, late, self._timeout)
        for send in sends:
            send.Test()


def _checks_enabled() -> bool:
    raw = os.environ.get("OMNITENSOR_MPI_CHECK", "1").strip()
    if raw not in ("0", "1"):
        raise ArgumentTypeError(f"OMNITENSOR_MPI_CHECK must be 0 or 1 (got {raw!r})")
    return raw == "1"


def _pool_size() -> int:
    raw = os.environ.get("OMNITENSOR_MPI_POOL", "4").strip()
    if not raw.isdigit():
        raise ArgumentTypeError(f"OMNITENSOR_MPI_POOL must be a non-negative int (got {raw!r})")
    return int(raw)


def _positive(seconds: Any) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ArgumentTypeError(
            f"MPICommunicator: timeout must be a positive number of seconds (got {seconds!r})")
    return float(seconds)


def _bytes(array: Array) -> list[Any]:
    """A contiguous array's buffer as MPI bytes (any dtype, including bool and bfloat16)."""
    return [array.reshape(-1).view(np.uint8), MPI.BYTE]


def _contiguous(x: Array) -> Array:
    """`x` itself when C-contiguous (no copy), else a C-ordered copy (0-d stays 0-d)."""
    return x if x.flags.c_contiguous else np.array(x, order="C")


def _reducible(x: Array) -> tuple[Array, Callable[[Array], Array]]:
    """`x` as a contiguous array of an MPI-native dtype, and the way back to x's dtype."""
    if x.dtype.name in _WIDEN:
        dtype = x.dtype
        return x.astype(np.float32, order="C"), lambda out: out.astype(dtype)
    return _contiguous(x), lambda out: out
