"""Continuous batching: sequences join and leave a running batch between decode steps.

A `BatchEngine` owns one KV cache of ``max_batch`` rows by ``capacity`` slots and a slot clock
``now`` shared by every row: each decode step writes all rows at slot ``now`` (the model's step
takes one start slot, DESIGN §4). What belongs to whom is the per-row key mask:

- a *join* prefills the waiting prompts alone (left-padded to one length bucket ``W``, in a
  small cache of their own), then copies each one's keys and values into its free row at slots
  ``now-W .. now-1``, slots its row never used: joining costs no clock slots and no work for
  the rows already running;
- a *decode* step feeds every running row its last sampled token at slot ``now``;
- an idle row sees only the current slot, so its (discarded) values stay finite.

The cache has as many rows as the busiest row in use needs, rounded up to a power of two (at
most ``max_batch``): a lone request decodes one row, not ``max_batch``. Joiners take the lowest
free rows; when a join needs more rows the cache grows (the old rows copied in once), and it is
dropped when the batch drains. Decode steps run one shape per row bucket, ``(rows, 1)`` over the
cache, so a few compiled programs serve whatever joins or leaves; joins compile once per
(joiners bucket, length bucket). When the clock cannot fit a waiting request, it waits until the
batch drains and the clock restarts.

`BatchEngine.step` does one join or decode step in the caller's thread (the CLI drives it so);
`start` runs steps in a background thread (the server). Results come back as `Event`s on each
request's `Handle`.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import GenerationArgumentError, OmnitensorError, ShapeError
from ..models.compiled import bucket
from ..tensor.interop import from_numpy
from ..tensor.jit import compile as compile_fn
from ..tensor.tensor import Tensor
from .sampling import check_sampling, sample
from .textstream import TextStream

__all__ = ["BatchEngine", "Event", "Handle", "SamplingParams"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples and when it stops.

    Attributes:
        max_new_tokens: most tokens to generate (>= 1).
        temperature: 0 is greedy.
        top_k: sample among the k most likely tokens (None: all).
        top_p: sample among the most likely tokens covering this probability (None: all).
        seed: sampling seed (same seed, same text).
        stop: strings that end the answer; they are not part of it.
    """

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    stop: tuple[str, ...] = ()

    def check(self) -> None:
        """Raise `GenerationArgumentError` (a ValueError) naming the first bad field."""
        check_sampling("request", max_new_tokens=self.max_new_tokens,
                       temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                       seed=self.seed, stop=self.stop)


@dataclass
class Event:
    """What a request produced: text (``token`` set), or the end (``finish_reason`` set).

    Attributes:
        text: newly final text (may be empty while a stop string or a character is pending).
        token: the token id this event carries, or None on the final event.
        finish_reason: ``"stop"`` (EOS or a stop string), ``"length"``, ``"cancelled"`` or
            ``"error"``, on the final event only.
        error: the message when ``finish_reason == "error"``.
    """

    text: str = ""
    token: int | None = None
    finish_reason: str | None = None
    error: str | None = None


@dataclass
class Handle:
    """One request in the engine: iterate it for its events; `cancel` stops it.

    Attributes:
        prompt_tokens: how many tokens the prompt has.
        completion_tokens: how many tokens were generated so far.
        first_token_s: seconds from submission to the first token (None before).
    """

    prompt: list[int]
    params: SamplingParams
    prompt_tokens: int = 0
    completion_tokens: int = 0
    first_token_s: float | None = None
    submitted: float = field(default_factory=time.perf_counter)
    _events: queue.Queue[Event] = field(default_factory=queue.Queue)
    _cancelled: threading.Event = field(default_factory=threading.Event)
    on_event: Callable[[Event], None] | None = None

    def cancel(self) -> None:
        """Stop generating for this request (its row is freed at the next step)."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        """Whether `cancel` was called."""
        return self._cancelled.is_set()

    def put(self, event: Event) -> None:
        """Deliver `event` (engine side)."""
        if self.on_event is not None:
            self.on_event(event)
        else:
            self._events.put(event)

    def get(self, timeout: float | None = None) -> Event | None:
        """The next event, or None after `timeout` seconds without one."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None

    def __iter__(self) -> Iterator[Event]:
        """Events until the final one (blocks; needs a running engine or another driver)."""
        while True:
            event = self._events.get()
            yield event
            if event.finish_reason is not None:
                return


@dataclass
class _Row:
    handle: Handle
    stream: TextStream
    rng: np.random.Generator
    position: int = 0
    last_token: int = 0


class BatchEngine:
    """Continuous batching over one `CausalLM` (see the module docstring).

    Args:
        lm: a loaded causal LM.
        max_batch: rows decoded together (requests beyond it wait).
        capacity: cache slots (default: the context length); prompt bucket plus
            ``max_new_tokens`` of each request must fit.
        lock: held during each step (a server shares one between its models).
    """

    def __init__(self, lm: Any, *, max_batch: int = 8, capacity: int | None = None,
                 lock: threading.Lock | None = None) -> None:
        if max_batch < 1:
            raise GenerationArgumentError(f"max_batch must be >= 1 (got {max_batch})")
        self.lm = lm
        self.model = lm.model
        self.max_batch = max_batch
        self.capacity = int(capacity or self.model.context_length)
        if not 1 <= self.capacity <= self.model.context_length:
            raise GenerationArgumentError(f"capacity must be in 1..{self.model.context_length} "
                            f"(got {capacity})")
        self._eos = set(lm.tokenizer.eos_ids)
        self._rows: list[_Row | None] = [None] * max_batch
        self._mask = np.zeros((max_batch, self.capacity), np.bool_)
        self._waiting: list[Handle] = []
        self._cache: Any = None
        self._width = 0  # rows of the cache (a power of two <= max_batch; 0: no cache)
        self._grower: Any = None
        self._now = 0
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._inserter: Any = None
        self._compute = lock if lock is not None else contextlib.nullcontext()
        #: decode steps and join steps run, and tokens generated (for benchmarks and tests)
        self.counters = {"decode_steps": 0, "join_steps": 0, "tokens": 0}

    # --- requests -----------------------------------------------------------------------------

    def limit(self, prompt_tokens: int) -> int:
        """Most new tokens a prompt of this length can get (< 1: the prompt does not fit)."""
        return self.capacity - bucket(prompt_tokens) + 1

    def submit(self, prompt: Sequence[int], params: SamplingParams, *,
               on_event: Callable[[Event], None] | None = None) -> Handle:
        """Queue a tokenized prompt.

        Raises:
            ShapeError: the prompt and ``max_new_tokens`` do not fit the cache.
            OmnitensorError: a bad sampling parameter or an empty prompt.
        """
        params.check()
        ids = [int(t) for t in prompt]
        if not ids:
            raise GenerationArgumentError("the prompt encodes to no tokens")
        room = self.limit(len(ids))
        if len(ids) > self.capacity or params.max_new_tokens > room:
            raise ShapeError(
                f"the prompt ({len(ids)} tokens) and max_new_tokens ({params.max_new_tokens}) "
                f"do not fit the context of {self.capacity} tokens (at most "
                f"{max(room, 0)} new tokens after this prompt)")
        handle = Handle(ids, params, prompt_tokens=len(ids), on_event=on_event)
        with self._lock:
            if self._closing:
                raise OmnitensorError("the engine is shut down")
            self._waiting.append(handle)
            self._lock.notify_all()
        return handle

    def busy(self) -> bool:
        """Whether any request is waiting or running."""
        with self._lock:
            return bool(self._waiting) or any(r is not None for r in self._rows)

    def run(self, handle: Handle) -> Iterator[Event]:
        """Drive steps in this thread until `handle` ends, yielding its events."""
        if handle.on_event is not None:
            raise OmnitensorError("run: the handle delivers to a callback")
        while True:
            while not handle._events.empty():
                event = handle._events.get()
                yield event
                if event.finish_reason is not None:
                    return
            self.step()

    # --- the background loop ------------------------------------------------------------------

    def start(self) -> None:
        """Run steps in a background thread until `shutdown`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="omnitensor-batch",
                                            daemon=True)
            self._thread.start()

    def shutdown(self) -> None:
        """Stop the background thread; running requests end as cancelled."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._closing and not self._waiting and all(
                        r is None for r in self._rows):
                    self._lock.wait()
                if self._closing:
                    break
            try:
                self.step()
            except Exception as exc:  # a failed step must not leave clients waiting forever
                log.exception("batch step failed")
                self._fail_all(f"{type(exc).__name__}: {exc}")
        self._fail_all(None)

    def _fail_all(self, message: str | None) -> None:
        with self._lock:
            handles = [r.handle for r in self._rows if r is not None] + self._waiting
            self._rows = [None] * self.max_batch
            self._waiting = []
            self._cache, self._width = None, 0
        for h in handles:
            h.put(Event(finish_reason="error" if message else "cancelled", error=message))

    # --- steps --------------------------------------------------------------------------------

    def step(self) -> None:
        """One join (if a waiting request fits) or one decode step; nothing when idle."""
        self._drop_cancelled()
        joining = self._admit()
        with self._compute:
            if joining:
                self._join(joining)
            elif any(r is not None for r in self._rows):
                self._decode()

    def _drop_cancelled(self) -> None:
        with self._lock:
            for h in [h for h in self._waiting if h.cancelled]:
                self._waiting.remove(h)
                h.put(Event(finish_reason="cancelled"))
        for i, row in enumerate(self._rows):
            if row is not None and row.handle.cancelled:
                self._finish(i, "cancelled")

    def _admit(self) -> list[tuple[int, Handle]]:
        with self._lock:
            if not self._waiting:
                return []
            if all(r is None for r in self._rows):
                self._now = 0  # the batch drained: the clock restarts, the cache goes
                self._mask[:] = False
                self._cache, self._width = None, 0
            free = [i for i, r in enumerate(self._rows) if r is None]
            chosen: list[tuple[int, Handle]] = []
            width = 0
            for h in list(self._waiting):
                if len(chosen) == len(free):
                    break
                w = max(width, bucket(len(h.prompt)))
                if self._fits(max(self._now, w), [c for _, c in chosen] + [h]):
                    chosen.append((free[len(chosen)], h))
                    width = w
                    self._waiting.remove(h)
            return chosen

    def _fits(self, now: int, joining: list[Handle]) -> bool:
        """Whether every running row and every joiner finishes within the cache from `now`."""
        # a running row writes one slot per token it still owes; a joiner's first token comes
        # from its prefill, so it writes one slot fewer
        owed = [r.handle.params.max_new_tokens - r.handle.completion_tokens
                for r in self._rows if r is not None]
        owed += [h.params.max_new_tokens - 1 for h in joining]
        return now + max(owed) <= self.capacity

    def _ensure_cache(self, rows: int) -> Any:
        """The cache with at least `rows` rows (grown to the next power of two if needed)."""
        width = min(bucket(max(rows, 1)), self.max_batch)
        if self._cache is None:
            self._cache, self._width = self.model.new_cache(width, self.capacity), width
        elif width > self._width:
            if self._grower is None:
                self._grower = compile_fn(_copy_rows, donate=(0,))
            self._cache = self._grower(self.model.new_cache(width, self.capacity), self._cache)
            self._width = width
        return self._cache

    def _step_mask(self) -> np.ndarray[Any, Any]:
        mask = self._mask.copy()
        for i, row in enumerate(self._rows):
            if row is None:  # idle rows see only this step's slot: finite throwaway values
                mask[i, :] = False
                mask[i, self._now] = True
        return mask[: self._width].reshape(self._width, 1, 1, self.capacity)

    def _join(self, joining: list[tuple[int, Handle]]) -> None:
        width = max(bucket(len(h.prompt)) for _, h in joining)
        b = bucket(len(joining))  # few prefill shapes: joiners padded to a power of two
        tokens = np.zeros((b, width), np.int64)
        positions = np.zeros((b, width), np.int64)
        key_mask = np.zeros((b, 1, 1, width), np.bool_)
        key_mask[len(joining):, ..., -1] = True  # padding rows: finite, discarded
        for j, (_, h) in enumerate(joining):
            pad = width - len(h.prompt)
            tokens[j, pad:] = h.prompt
            positions[j] = np.maximum(np.arange(width) - pad, 0)
            key_mask[j, ..., pad:] = True
        logits, small = self.model.step(tokens, positions, key_mask, 0,
                                        self.model.new_cache(b, width), np.full(b, width - 1))
        self._now = max(self._now, width)
        cache = self._ensure_cache(max(i for i, _ in joining) + 1)
        for j, (i, h) in enumerate(joining):
            cache = self._insert(cache, small, j, i, self._now - width)
            pad = width - len(h.prompt)
            self._mask[i, :] = False
            self._mask[i, self._now - width + pad : self._now] = True
            self._rows[i] = _Row(h, TextStream(self.lm.tokenizer, h.params.stop),
                                 np.random.default_rng(h.params.seed), position=len(h.prompt))
        self._cache = cache
        self.counters["join_steps"] += 1
        self._emit(np.asarray(logits.numpy()), [(j, i) for j, (i, _) in enumerate(joining)])

    def _insert(self, cache: Any, small: Any, src: int, dst: int, slot: int) -> Any:
        if self._inserter is None:
            self._inserter = compile_fn(_insert_rows, donate=(0,))

        def index(v: int) -> Tensor:
            return from_numpy(np.asarray(v, np.int32)).to(self.model.backend)

        return self._inserter(cache, small, index(src), index(dst), index(slot))

    def _decode(self) -> None:
        b, now = self._width, self._now
        tokens = np.zeros((b, 1), np.int64)
        positions = np.zeros((b, 1), np.int64)
        active = []
        for i, row in enumerate(self._rows[:b]):
            if row is not None:
                tokens[i, 0], positions[i, 0] = row.last_token, row.position
                self._mask[i, now] = True
                row.position += 1
                active.append(i)
        logits, self._cache = self.model.step(tokens, positions, self._step_mask(), now,
                                              self._cache, np.zeros(b))
        self._now += 1
        self.counters["decode_steps"] += 1
        self._emit(np.asarray(logits.numpy()), [(i, i) for i in active])

    def _emit(self, values: np.ndarray[Any, Any], rows: list[tuple[int, int]]) -> None:
        """Sample each (logits row, batch row) pair and deliver the tokens."""
        for at, i in rows:
            row = self._rows[i]
            assert row is not None
            p = row.handle.params
            token = int(sample(values[at : at + 1], temperature=p.temperature, top_k=p.top_k,
                               top_p=p.top_p, rng=row.rng)[0])
            h = row.handle
            if h.first_token_s is None:
                h.first_token_s = time.perf_counter() - h.submitted
            if token in self._eos:
                self._finish(i, "stop")
                continue
            h.completion_tokens += 1
            self.counters["tokens"] += 1
            row.last_token = token
            h.put(Event(row.stream.push(token), token))
            if row.stream.stopped:
                self._finish(i, "stop")
            elif h.completion_tokens >= p.max_new_tokens:
                self._finish(i, "length")

    def _finish(self, i: int, reason: str) -> None:
        row = self._rows[i]
        assert row is not None
        self._rows[i] = None
        self._mask[i, :] = False
        row.handle.put(Event(row.stream.finish(), finish_reason=reason))


def _insert_rows(cache: list[Tensor], small: list[Tensor], src: Tensor, dst: Tensor,
                 slot: Tensor) -> list[Tensor]:
    """Copy row `src` of the `small` caches into row `dst` of `cache` from `slot` on.

    Each layer's cache holds its keys and values stacked, (2, B, H_kv, S, D).
    """
    zero = Tensor._apply("constant", value=np.asarray(0, np.int32))
    for big, part in zip(cache, small, strict=True):
        one = Tensor._apply("dynamic_slice", part, zero, src, zero, zero, zero,
                            sizes=(2, 1, *part.shape[2:]))
        big.assign(Tensor._apply("dynamic_update_slice", big, one, zero, dst, zero, slot, zero))
    return cache


def _copy_rows(new: list[Tensor], old: list[Tensor]) -> list[Tensor]:
    """`new` (a larger, zeroed cache) with `old`'s rows written at its first rows."""
    zero = Tensor._apply("constant", value=np.asarray(0, np.int32))
    for big, small in zip(new, old, strict=True):
        big.assign(Tensor._apply("dynamic_update_slice", big, small, zero, zero, zero, zero,
                                 zero))
    return new
