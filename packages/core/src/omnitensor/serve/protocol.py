"""The OpenAI API's request bodies (the fields omnitensor honours) and its error bodies."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ChatMessage", "ChatRequest", "CompletionRequest", "EmbeddingRequest", "error_body"]


class _Request(BaseModel):
    # Fields omnitensor does not use (user, logit_bias, ...) are accepted and ignored, as
    # servers compatible with the API do; the ones it cannot honour are refused explicitly.
    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    stop: str | list[str] | None = None
    stream: bool = False
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=1, description="one choice per request")

    def stops(self) -> tuple[str, ...]:
        """The stop strings as a tuple."""
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatMessage(BaseModel):
    """One chat message; content parts of type text are joined."""

    model_config = ConfigDict(extra="ignore")

    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The message's text."""
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content
                           if p.get("type") == "text")
        return self.content or ""


class ChatRequest(_Request):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


class CompletionRequest(_Request):
    """``POST /v1/completions`` (one prompt string per request)."""

    prompt: str | list[str]
    max_tokens: int | None = Field(default=16, ge=1)
    echo: bool = False


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings``."""

    model_config = ConfigDict(extra="ignore")

    model: str
    input: str | list[str] = Field(min_length=1)
    encoding_format: str = Field(default="float", pattern="^(float|base64)$")


def error_body(message: str, *, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}
