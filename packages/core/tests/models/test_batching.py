"""Continuous batching: requests that join a running batch answer as they would alone."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from omnitensor.errors import OmnitensorError, ShapeError
from omnitensor.models import ModelBuilder
from omnitensor.runtime import CausalLM
from omnitensor.runtime.batching import BatchEngine, Event, SamplingParams
from omnitensor.runtime.textstream import TextStream

PROMPTS = ["hello", "a b c", "the cat sat on", "z", "many words in a row", "ok"]


@pytest.fixture
def lm(make_llama: Any) -> CausalLM:
    # no EOS: every request runs its full length, so lengths and interleavings are predictable
    return CausalLM(ModelBuilder().with_spec("llama").with_checkpoint(make_llama(
        context=64, eos=False)).build("ref"))


def _drain(engine: BatchEngine) -> None:
    while engine.busy():
        engine.step()


def _events(handle: Any) -> list[Event]:
    return list(handle._events.queue)


def test_joining_mid_flight_gives_the_same_tokens_as_alone(lm: CausalLM) -> None:
    alone = [lm.generate(p, max_new_tokens=8).token_ids for p in PROMPTS]
    engine = BatchEngine(lm, max_batch=4, capacity=64)
    ids = [lm.tokenizer.encode(p) for p in PROMPTS]
    handles = [engine.submit(ids[0], SamplingParams(8)), engine.submit(ids[1], SamplingParams(8))]
    for _ in range(3):  # the first two decode a few steps alone
        engine.step()
    handles += [engine.submit(x, SamplingParams(8)) for x in ids[2:]]  # 4 more; 2 must wait
    _drain(engine)
    got = [[e.token for e in _events(h) if e.token is not None] for h in handles]
    assert got == alone
    assert all(_events(h)[-1].finish_reason == "length" for h in handles)
    # decode steps were shared: fewer than the tokens generated after each first one
    assert engine.counters["decode_steps"] < sum(len(g) - 1 for g in got)


def test_sampled_requests_do_not_depend_on_their_neighbours(lm: CausalLM) -> None:
    params = SamplingParams(6, temperature=1.0, top_k=5, seed=7)
    ids = lm.tokenizer.encode("hello")
    alone = BatchEngine(lm, max_batch=2, capacity=64)
    first = alone.submit(ids, params)
    _drain(alone)
    crowded = BatchEngine(lm, max_batch=3, capacity=64)
    others = [crowded.submit(lm.tokenizer.encode(p), SamplingParams(6, temperature=1.0, seed=i))
              for i, p in enumerate(PROMPTS[1:3])]
    again = crowded.submit(ids, params)
    _drain(crowded)
    assert [e.token for e in _events(first)] == [e.token for e in _events(again)]
    assert all(_events(h)[-1].finish_reason == "length" for h in others)


def test_cancel_frees_the_row_and_the_others_go_on(lm: CausalLM) -> None:
    engine = BatchEngine(lm, max_batch=2, capacity=64)
    a = engine.submit(lm.tokenizer.encode("hello"), SamplingParams(20))
    b = engine.submit(lm.tokenizer.encode("a b c"), SamplingParams(5))
    engine.step()
    engine.step()
    a.cancel()
    _drain(engine)
    assert _events(a)[-1].finish_reason == "cancelled" and a.completion_tokens < 20
    assert _events(b)[-1].finish_reason == "length" and b.completion_tokens == 5


def test_background_thread_serves_concurrent_submitters(lm: CausalLM) -> None:
    engine = BatchEngine(lm, max_batch=4, capacity=64)
    engine.start()
    results: dict[int, list[int]] = {}

    def client(k: int) -> None:
        handle = engine.submit(lm.tokenizer.encode(PROMPTS[k]), SamplingParams(6))
        results[k] = [e.token for e in handle if e.token is not None]

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    engine.shutdown()
    assert results == {k: lm.generate(p, max_new_tokens=6).token_ids
                       for k, p in enumerate(PROMPTS)}


def test_requests_that_cannot_fit_are_refused(lm: CausalLM) -> None:
    engine = BatchEngine(lm, max_batch=2, capacity=32)
    with pytest.raises(ShapeError, match="do not fit the context of 32"):
        engine.submit(lm.tokenizer.encode("hello"), SamplingParams(30))
    with pytest.raises(OmnitensorError, match="top_p"):
        engine.submit(lm.tokenizer.encode("hello"), SamplingParams(4, top_p=0))
    with pytest.raises(OmnitensorError, match="no tokens"):
        engine.submit([], SamplingParams(4))


def test_text_stream_holds_back_and_cuts_stop_strings(lm: CausalLM) -> None:
    tok = lm.tokenizer
    stream = TextStream(tok, stop=["cat"])
    pieces = [stream.push(t) for t in tok.encode("the ca", add_special_tokens=False)]
    assert "".join(pieces) == "the "  # "ca" may start "cat": held back
    assert stream.push(tok.encode("t", add_special_tokens=False)[0]) == ""
    assert stream.stopped and stream.text == "the "
    free = TextStream(tok, stop=["cat"])
    for t in tok.encode("the ca", add_special_tokens=False):
        free.push(t)
    assert free.finish() == "ca" and free.text == "the ca"


def test_the_cache_has_the_rows_in_use_not_max_batch(lm: CausalLM) -> None:
    engine = BatchEngine(lm, max_batch=8, capacity=64)
    ids = lm.tokenizer.encode("hello")
    first = engine.submit(ids, SamplingParams(6))
    engine.step()
    assert engine._width == 1  # a lone request decodes one row
    engine.step()
    later = [engine.submit(lm.tokenizer.encode(p), SamplingParams(4)) for p in PROMPTS[1:3]]
    engine.step()  # they join rows 1 and 2: the cache grows to 4 rows, row 0 copied over
    assert engine._width == 4
    _drain(engine)
    assert [e.token for e in _events(first) if e.token is not None] == lm.generate(
        "hello", max_new_tokens=6).token_ids
    assert all(h.completion_tokens == 4 for h in later)
    engine.submit(ids, SamplingParams(2))
    engine.step()
    assert engine._width == 1  # the batch drained: the next one starts small again
