"""`omnitensor serve`'s app through the official `openai` client on 127.0.0.1.

Tiny random models on the reference backend: answers are checked against the same model run
alone (`CausalLM.generate`, `Encoder.embed`), so batching can change nothing. Needs the
``serve`` extra and ``openai``; skips without them.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from omnitensor.models import ModelBuilder  # noqa: E402
from omnitensor.runtime import CausalLM, Encoder  # noqa: E402
from omnitensor.serve import create_app  # noqa: E402

TEMPLATE = ("{% for m in messages %}{{ m['role'] }} {{ m['content'] }}. {% endfor %}"
            "{% if add_generation_prompt %}assistant {% endif %}")


@pytest.fixture(scope="module")
def server() -> Iterator[dict[str, Any]]:
    import importlib.util
    import pathlib

    spec = importlib.util.spec_from_file_location(
        "_models_conftest", pathlib.Path(__file__).with_name("conftest.py"))
    assert spec is not None and spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    lm = CausalLM(ModelBuilder().with_spec("llama").with_checkpoint(
        conftest.llama_checkpoint(context=128, eos=False)).build("ref"))
    lm.tokenizer.chat_template = TEMPLATE
    enc = Encoder(ModelBuilder().with_spec("bert").with_checkpoint(
        conftest.bert_checkpoint()).build("ref"))
    app = create_app({"tiny": lm, "bert": enc}, max_batch=4, context=128)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}/v1"
    yield {"base": base, "lm": lm, "enc": enc, "app": app,
           "client": openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=120)}
    srv.should_exit = True
    thread.join(timeout=30)


def _alone(lm: CausalLM, prompt: Any, n: int, stop: tuple[str, ...] = ()) -> str:
    return str(lm.generate(prompt, max_new_tokens=n, stop=stop).text)


def test_models(server: dict[str, Any]) -> None:
    ids = sorted(m.id for m in server["client"].models.list())
    assert ids == ["bert", "tiny"]


def test_chat_and_its_stream_match_the_model_alone(server: dict[str, Any]) -> None:
    client, lm = server["client"], server["lm"]
    messages = [{"role": "user", "content": "hello there"}]
    reply = client.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                           max_tokens=10)
    assert reply.choices[0].message.content == _alone(lm, messages, 10)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 10
    assert reply.usage.prompt_tokens == len(lm.tokenizer.encode(lm.apply_chat_template(
        messages)))
    chunks = list(client.chat.completions.create(model="tiny", messages=messages,
                                                 temperature=0, max_tokens=10, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reply.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_completion_with_stop_excludes_the_stop(server: dict[str, Any]) -> None:
    client, lm = server["client"], server["lm"]
    full = _alone(lm, "the cat", 12)
    stop = full[4:6]
    got = client.completions.create(model="tiny", prompt="the cat", max_tokens=12,
                                    temperature=0, stop=[stop])
    assert got.choices[0].text == full[: full.index(stop)]
    assert got.choices[0].finish_reason == "stop"


def test_embeddings_match_the_encoder(server: dict[str, Any]) -> None:
    got = server["client"].embeddings.create(model="bert", input=["hello", "a b c"])
    vectors = np.asarray([d.embedding for d in got.data])
    np.testing.assert_allclose(vectors, server["enc"].embed(["hello", "a b c"]), rtol=1e-5,
                               atol=1e-6)


def test_errors_have_openai_bodies(server: dict[str, Any]) -> None:
    client = server["client"]
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nope", messages=[{"role": "user",
                                                               "content": "x"}])
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=[{"role": "user",
                                                               "content": "x"}],
                                       temperature=-1)
    with pytest.raises(openai.BadRequestError) as long:
        client.completions.create(model="tiny", prompt="a " * 200, max_tokens=4)
    assert long.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as encoder:
        client.completions.create(model="bert", prompt="a", max_tokens=4)
    assert encoder.value.code == "unsupported_model"
    raw = httpx.post(server["base"] + "/chat/completions", content=b"{not json",
                     headers={"content-type": "application/json"})
    assert raw.status_code == 400 and raw.json()["error"]["type"] == "invalid_request_error"


def test_eight_concurrent_clients_share_decode_steps(server: dict[str, Any]) -> None:
    client, lm = server["client"], server["lm"]
    engine = server["app"].state.served.engines["tiny"]
    prompts = ["hello", "a b c", "the cat", "z", "on a mat", "ok", "sat", "dog runs"]
    before = dict(engine.counters)
    answers: dict[int, str] = {}

    def ask(k: int) -> None:
        r = client.completions.create(model="tiny", prompt=prompts[k], max_tokens=12,
                                      temperature=0)
        answers[k] = r.choices[0].text

    threads = [threading.Thread(target=ask, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert answers == {k: _alone(lm, p, 12) for k, p in enumerate(prompts)}
    steps = engine.counters["decode_steps"] - before["decode_steps"]
    assert steps < 8 * 11  # one request at a time would take 88 decode steps


def test_a_client_that_disconnects_mid_stream_frees_its_row(server: dict[str, Any]) -> None:
    engine = server["app"].state.served.engines["tiny"]
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 100, "stream": True,
            "temperature": 0}
    before = engine.counters["tokens"]
    with httpx.stream("POST", server["base"] + "/completions", json=body, timeout=60) as r:
        lines = (line for line in r.iter_lines() if line)
        got = [json.loads(next(lines)[len("data: "):]) for _ in range(2)]
        assert got[0]["object"] == "text_completion"
    deadline = time.time() + 30
    while engine.busy() and time.time() < deadline:
        time.sleep(0.05)
    assert not engine.busy()
    generated = engine.counters["tokens"] - before
    print("tokens generated before the disconnect was noticed:", generated)
    assert 2 <= generated < 100
    again = server["client"].completions.create(model="tiny", prompt="hello", max_tokens=3,
                                                temperature=0)
    assert again.choices[0].text == _alone(server["lm"], "hello", 3)
