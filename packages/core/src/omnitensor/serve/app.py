"""The OpenAI-compatible HTTP app: routes over `BatchEngine`s (causal LMs) and encoders.

Every causal LM gets a `BatchEngine` running in its own thread: concurrent requests join the
running batch and share its decode steps. Handlers never block the event loop: engine events
come back through ``loop.call_soon_threadsafe`` into an `asyncio.Queue`, and embeddings run in a
worker thread. A client that disconnects cancels its request, which frees its batch row.

All compute goes through one lock (omnitensor's plan caches are not meant for concurrent
realizations); the engine holds it per step, so requests interleave at step granularity.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import OmnitensorError, ShapeError
from ..runtime.batching import BatchEngine, Event, SamplingParams
from ..runtime.loaded import CausalLM, Encoder, LoadedModel
from .protocol import ChatRequest, CompletionRequest, EmbeddingRequest, error_body

__all__ = ["ApiError", "create_app"]


class ApiError(Exception):
    """An error answered with an OpenAI-style body."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.param, self.code, self.type = status, param, code, type


class _Served:
    """The models of one app and their engines."""

    def __init__(self, models: Mapping[str, LoadedModel], max_batch: int,
                 context: int | None) -> None:
        self.models = dict(models)
        self.lock = threading.Lock()
        self.created = int(time.time())
        self.engines: dict[str, BatchEngine] = {}
        for name, model in self.models.items():
            if isinstance(model, CausalLM):
                capacity = min(context or model.model.context_length,
                               model.model.context_length)
                self.engines[name] = BatchEngine(model, max_batch=max_batch, capacity=capacity,
                                                 lock=self.lock)

    def model(self, name: str) -> LoadedModel:
        if name not in self.models:
            raise ApiError(404, f"The model '{name}' does not exist; this server has: "
                           f"{', '.join(self.models)}", param="model", code="model_not_found")
        return self.models[name]

    def engine(self, name: str, what: str) -> BatchEngine:
        self.model(name)
        if name not in self.engines:
            raise ApiError(400, f"The model '{name}' is an encoder: it has no {what}; use "
                           "/v1/embeddings", param="model", code="unsupported_model")
        return self.engines[name]


def create_app(models: Mapping[str, LoadedModel], *, max_batch: int = 8,
               context: int | None = None) -> FastAPI:
    """The app serving `models` by name.

    Args:
        models: name -> loaded `CausalLM` or `Encoder`.
        max_batch: sequences decoded together per causal LM.
        context: cache slots per causal LM (default: its context length).
    """
    served = _Served(models, max_batch, context)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for engine in served.engines.values():
            engine.start()
        try:
            yield
        finally:
            for engine in served.engines.values():
                engine.shutdown()

    app = FastAPI(title="omnitensor", lifespan=lifespan)
    app.state.served = served

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(str(exc), type=exc.type, param=exc.param, code=exc.code),
                            status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = [str(p) for p in first.get("loc", ()) if p != "body"]
        if first.get("type") == "json_invalid":
            message = f"We could not parse the JSON body of your request: {first.get('msg')}"
            where = []  # the location is a character offset, not a field
        else:
            message = f"{'.'.join(where) or 'body'}: {first.get('msg', 'invalid request')}"
        return JSONResponse(error_body(message, param=".".join(where) or None,
                                       code=str(first.get("type")) or None), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(error_body(str(exc.detail), code=str(exc.status_code)),
                            status_code=exc.status_code)

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(n, served.created) for n in
                                          served.models]}

    @app.get("/v1/models/{name}")
    async def get_model(name: str) -> dict[str, Any]:
        served.model(name)
        return _model_card(name, served.created)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest) -> Any:
        engine = served.engine(body.model, "chat completions")
        lm = engine.lm
        if not lm.tokenizer.chat_template:
            raise ApiError(400, f"The model '{body.model}' has no chat template; use "
                           "/v1/completions", param="model", code="no_chat_template")
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        try:
            ids = list(lm.tokenizer.encode(lm.apply_chat_template(messages)))
        except Exception as exc:  # templates raise their own errors (a role they reject)
            raise ApiError(400, f"messages: {exc}", param="messages") from exc
        limit = body.max_completion_tokens or body.max_tokens
        return await _respond(engine, body, ids, limit, chat=True)

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest) -> Any:
        engine = served.engine(body.model, "completions")
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        if len(prompts) != 1:
            raise ApiError(400, "prompt: one prompt string per request", param="prompt")
        ids = list(engine.lm.tokenizer.encode(prompts[0]))
        return await _respond(engine, body, ids, body.max_tokens, chat=False,
                              echo=prompts[0] if body.echo else "")

    @app.post("/v1/embeddings")
    async def embeddings(body: EmbeddingRequest) -> dict[str, Any]:
        model = served.model(body.model)
        if not isinstance(model, Encoder):
            raise ApiError(400, f"The model '{body.model}' is a causal LM: it makes no "
                           "embeddings", param="model", code="unsupported_model")
        texts = [body.input] if isinstance(body.input, str) else body.input

        def run() -> Any:
            with served.lock:
                return model.embed(texts)

        try:
            vectors = await asyncio.to_thread(run)
        except ShapeError as exc:
            raise ApiError(400, str(exc), param="input", code="context_length_exceeded") from exc
        tokens = sum(len(x) for x in model.tokenizer.encode_batch(texts))

        def encode(v: Any) -> Any:  # base64: little-endian float32 bytes (what the client asks)
            if body.encoding_format == "base64":
                return base64.b64encode(np.asarray(v, "<f4").tobytes()).decode("ascii")
            return v.tolist()

        return {"object": "list", "model": body.model,
                "data": [{"object": "embedding", "index": i, "embedding": encode(v)}
                         for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    return app


def _model_card(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "omnitensor"}


def _submit(engine: BatchEngine, body: Any, ids: list[int], limit: int | None
            ) -> tuple[Any, asyncio.Queue[Event]]:
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Event] = asyncio.Queue()
    room = engine.limit(len(ids))
    if room < 1:
        raise ApiError(400, f"This model's maximum context length is {engine.capacity} tokens; "
                       f"your prompt has {len(ids)} tokens", param="messages",
                       code="context_length_exceeded")
    params = SamplingParams(limit or room, body.temperature, None,
                            body.top_p if body.top_p < 1 else None,
                            body.seed if body.seed is not None else 0, body.stops())

    def deliver(event: Event) -> None:  # called on the engine's thread
        loop.call_soon_threadsafe(events.put_nowait, event)

    try:
        handle = engine.submit(ids, params, on_event=deliver)
    except ShapeError as exc:
        raise ApiError(400, f"{exc} (this server's context: {engine.capacity} tokens)",
                       param="max_tokens", code="context_length_exceeded") from exc
    except OmnitensorError as exc:
        raise ApiError(400, str(exc)) from exc
    return handle, events


async def _respond(engine: BatchEngine, body: Any, ids: list[int], limit: int | None, *,
                   chat: bool, echo: str = "") -> Any:
    handle, events = _submit(engine, body, ids, limit)
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    if body.stream:
        return StreamingResponse(_stream(handle, events, rid, created, body.model, chat, echo),
                                 media_type="text/event-stream")
    parts, reason = [echo], "stop"
    try:
        while True:
            event = await events.get()
            parts.append(event.text)
            if event.finish_reason is not None:
                reason = event.finish_reason
                break
    finally:
        handle.cancel()  # no-op when finished; frees the row if this handler was cancelled
    if reason in ("error", "cancelled"):
        raise ApiError(500, event.error or "generation was cancelled", type="server_error")
    text = "".join(parts)
    choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": text},
                               "finish_reason": reason, "logprobs": None} if chat else
                              {"index": 0, "text": text, "finish_reason": reason,
                               "logprobs": None})
    return {"id": rid, "object": "chat.completion" if chat else "text_completion",
            "created": created, "model": body.model, "choices": [choice],
            "usage": _usage(handle)}


def _usage(handle: Any) -> dict[str, int]:
    return {"prompt_tokens": handle.prompt_tokens, "completion_tokens": handle.completion_tokens,
            "total_tokens": handle.prompt_tokens + handle.completion_tokens}


async def _stream(handle: Any, events: asyncio.Queue[Event], rid: str, created: int,
                  model: str, chat: bool, echo: str) -> AsyncIterator[str]:
    kind = "chat.completion.chunk" if chat else "text_completion"

    def chunk(text: str | None, reason: str | None, first: bool = False) -> str:
        if chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else (
                {"content": text} if text is not None else {})
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": reason,
                                      "logprobs": None}
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": reason,
                      "logprobs": None}
        return "data: " + json.dumps({"id": rid, "object": kind, "created": created,
                                      "model": model, "choices": [choice]}) + "\n\n"

    try:
        if chat:
            yield chunk(None, None, first=True)
        if echo:
            yield chunk(echo, None)
        while True:
            event = await events.get()
            if event.text:
                yield chunk(event.text, None)
            if event.finish_reason is not None:
                if event.finish_reason == "error":
                    yield "data: " + json.dumps(error_body(event.error or "generation failed",
                                                           type="server_error")) + "\n\n"
                else:
                    yield chunk(None, event.finish_reason)
                break
        yield "data: [DONE]\n\n"
    finally:
        handle.cancel()  # the client went away (or we are done): free the batch row
