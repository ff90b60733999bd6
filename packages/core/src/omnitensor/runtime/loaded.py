"""`LoadedModel` and its capabilities: `CausalLM` (generate, stream) and `Encoder` (embed)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import FormatError, GenerationArgumentError, OmnitensorError, ShapeError
from ..models.compiled import CompiledModel, bucket
from .sampling import check_sampling, sample

__all__ = ["CausalLM", "Encoder", "Generation", "LoadedModel", "kv_capacity"]


def kv_capacity(width: int, max_new_tokens: int, context_length: int) -> int:
    """KV-cache slots for a prompt padded to `width` and `max_new_tokens` new tokens.

    The capacity is part of the compiled programs' shapes, so it takes few values: a power of
    two up to the context length, and past it (left padding takes slots too) one value per
    width bucket: fewer than ``width // 2`` slots are padding, since a prompt fills more than
    half its bucket.
    """
    needed = width + max(max_new_tokens - 1, 0)  # the last sampled token is never fed
    if needed <= context_length:
        return min(bucket(width + max_new_tokens), context_length)
    return max(needed, context_length + width // 2)


@dataclass
class Generation:
    """The result of `CausalLM.generate` for one prompt.

    Attributes:
        text: the generated text (prompt excluded).
        token_ids: the generated ids.
        prompt_tokens: how many tokens the prompt had.
        prefill_s: seconds spent on the prompt.
        decode_s: seconds spent generating after the first token.
        stop_reason: ``"length"``, ``"eos"`` or ``"stop"``.
    """

    text: str
    token_ids: list[int]
    prompt_tokens: int
    prefill_s: float
    decode_s: float
    stop_reason: str = "length"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def decode_tokens_per_s(self) -> float:
        """Generated tokens after the first, per second of decoding."""
        n = max(len(self.token_ids) - 1, 0)
        return n / self.decode_s if self.decode_s > 0 else 0.0


class LoadedModel:
    """A `CompiledModel` with its tokenizer; `CausalLM` and `Encoder` add what each can do."""

    def __init__(self, model: CompiledModel) -> None:
        self.model = model
        self.tokenizer = model.tokenizer
        if self.tokenizer is None:
            raise OmnitensorError(f"{model.spec.name}: the checkpoint has no tokenizer "
                                  "(tokenizer.json or tokenizer.ggml.* metadata)")

    def _check_ids(self, op: str, ids: Sequence[int]) -> None:
        """Refuse token ids past the embedding's rows (a gather would clamp them silently)."""
        rows = int(self.model.hparams.get("vocab_size") or 0)
        top = max(ids, default=-1)
        if rows and top >= rows:
            raise FormatError(f"{op}: the tokenizer gave token id {top} for this text but the "
                              f"model has {rows} rows of embeddings; the tokenizer does not "
                              "belong to these weights")

    @property
    def capabilities(self) -> tuple[str, ...]:
        """What this model can do: ``("generate",)`` or ``("embed",)``."""
        return ("generate",) if isinstance(self, CausalLM) else ("embed",)

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.model.arch} "
                f"layers={self.model.hparams.get('block_count')} on {self.model.backend.name!r}>")


class CausalLM(LoadedModel):
    """A model that continues text."""

    def apply_chat_template(self, messages: Sequence[dict[str, str]]) -> str:
        """The prompt for chat `messages` through the model's chat template.

        Raises:
            OmnitensorError: when the model has no template.
        """
        template = self.tokenizer.chat_template
        if not template:
            raise OmnitensorError("chat: this model has no chat template; pass a plain prompt")
        import jinja2  # tokenizers' ecosystem standard; only needed for chat

        env = jinja2.Environment(autoescape=False)
        bos = self.tokenizer.id_to_token(self.tokenizer.bos_id) if (
            self.tokenizer.bos_id is not None) else ""
        eos = self.tokenizer.id_to_token(self.tokenizer.eos_id) if (
            self.tokenizer.eos_id is not None) else ""
        return env.from_string(template).render(messages=list(messages), bos_token=bos,
                                                eos_token=eos, add_generation_prompt=True)

    def stream(self, prompt: str | Sequence[dict[str, str]], max_new_tokens: int = 64, *,
               temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
               seed: int = 0, stop: Sequence[str] = ()) -> Iterator[str]:
        """Yield the text of each new token as it is generated (one prompt).

        The arguments are checked at the call, not at the first ``next``. A consumer may stop
        early (break, an exception, KeyboardInterrupt): each call owns its cache, so the model
        stays usable and the next call gives the same text as a fresh model.

        Raises:
            GenerationArgumentError: a bad argument (see `generate`).
        """
        check_sampling("stream", max_new_tokens=max_new_tokens, temperature=temperature,
                       top_k=top_k, top_p=top_p, seed=seed, stop=stop)
        self._check_prompt(prompt)
        pieces = self._generate([prompt], max_new_tokens, temperature, top_k, top_p, seed, stop,
                                stream=True)
        return (piece for piece, _ in pieces)

    def generate(self, prompt: str | Sequence[dict[str, str]] | Sequence[str],
                 max_new_tokens: int = 64, *, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, seed: int = 0,
                 stop: Sequence[str] = ()) -> Any:
        """Continue `prompt` (or a list of prompts, batched with padding).

        Args:
            prompt: a string, chat messages (``[{"role": ..., "content": ...}]``) or a list of
                strings (returns a list of `Generation`).
            max_new_tokens: most tokens to generate.
            temperature: 0 is greedy.
            top_k: sample among the k most likely tokens.
            top_p: sample among the most likely tokens covering this probability.
            seed: sampling seed.
            stop: strings that end generation when produced.

        Raises:
            GenerationArgumentError: `max_new_tokens` not an integer >= 1, `temperature` not a
                finite number >= 0, `top_k`/`top_p`/`seed`/`stop`/`prompt` of the wrong kind
                or out of range (a ValueError).
            ShapeError: when prompt plus `max_new_tokens` exceeds the context length.
        """
        batched = isinstance(prompt, (list, tuple)) and prompt and isinstance(prompt[0], str)
        prompts = list(prompt) if batched else [prompt]
        results = list(self._generate(prompts, max_new_tokens, temperature, top_k, top_p, seed,
                                      stop, stream=False))
        gens = [g for _, g in results]
        return gens if batched else gens[0]

    @staticmethod
    def _check_prompt(prompt: Any) -> None:
        chat = isinstance(prompt, Sequence) and not isinstance(prompt, str) and bool(prompt) \
            and all(isinstance(m, dict) for m in prompt)
        if not isinstance(prompt, str) and not chat:
            raise GenerationArgumentError(
                f"generate: prompt must be a string, a list of strings or chat messages "
                f"([{{'role': ..., 'content': ...}}]) (got {prompt!r:.80})", argument="prompt")

    def _ids(self, prompt: Any) -> list[int]:
        self._check_prompt(prompt)
        text = prompt if isinstance(prompt, str) else self.apply_chat_template(prompt)
        ids: list[int] = list(self.tokenizer.encode(text))
        if not ids:
            raise OmnitensorError("generate: the prompt encodes to no tokens")
        self._check_ids("generate", ids)
        return ids

    def _generate(self, prompts: list[Any], max_new_tokens: int, temperature: float,
                  top_k: int | None, top_p: float | None, seed: int, stop: Sequence[str], *,
                  stream: bool) -> Iterator[tuple[str, Generation]]:
        model = self.model
        check_sampling("generate", max_new_tokens=max_new_tokens, temperature=temperature,
                       top_k=top_k, top_p=top_p, seed=seed, stop=stop)
        ids = [self._ids(p) for p in prompts]
        b, longest = len(ids), max(len(x) for x in ids)
        need = longest + max_new_tokens
        if need > model.context_length:
            raise ShapeError(
                f"generate: prompt ({longest} tokens) + max_new_tokens ({max_new_tokens}) = "
                f"{need} exceeds the context length {model.context_length}; shorten the prompt "
                "or ask for fewer tokens")
        width = bucket(longest)
        # Slots, not positions, fill the cache: left padding to the bucket takes slots too, so
        # a prompt that fits the context may need more slots than context_length.
        capacity = kv_capacity(width, max_new_tokens, model.context_length)
        pads = [width - len(x) for x in ids]  # left padding: every row ends at slot width-1
        tokens = np.zeros((b, width), np.int64)
        for row, x in enumerate(ids):
            tokens[row, pads[row]:] = x
        slot = np.arange(capacity)
        key_mask = (slot[None, :] >= np.array(pads)[:, None]).reshape(b, 1, 1, capacity)
        positions = np.maximum(np.arange(width)[None, :] - np.array(pads)[:, None], 0)
        rng = np.random.default_rng(seed)
        cache = model.new_cache(b, capacity)
        t0 = time.perf_counter()
        logits, cache = model.step(tokens, positions, key_mask, 0, cache,
                                   np.full(b, width - 1))
        out: list[list[int]] = [[] for _ in range(b)]
        done = [False] * b
        reasons = ["length"] * b
        prefill_s = decode_start = 0.0
        eos = set(self.tokenizer.eos_ids)
        for i in range(max_new_tokens):
            next_ids = sample(logits.numpy(), temperature=temperature, top_k=top_k, top_p=top_p,
                              rng=rng)
            if i == 0:
                prefill_s = time.perf_counter() - t0
                decode_start = time.perf_counter()
            for row in range(b):
                if done[row]:
                    continue
                token = int(next_ids[row])
                if token in eos:
                    done[row], reasons[row] = True, "eos"
                    continue
                out[row].append(token)
                if stream:
                    yield self.tokenizer.decode([token]), None  # type: ignore[misc]
                # (decoding the whole continuation each token is only needed for stop strings)
                if stop and any(s in self.tokenizer.decode(out[row]) for s in stop):
                    done[row], reasons[row] = True, "stop"
            if all(done) or i == max_new_tokens - 1:
                break
            slot_now = width + i
            step_tokens = np.where(done, 0, next_ids).reshape(b, 1)
            step_pos = (slot_now - np.array(pads)).reshape(b, 1)
            logits, cache = model.step(step_tokens, step_pos, key_mask, slot_now, cache,
                                       np.zeros(b))
        decode_s = time.perf_counter() - decode_start if decode_start else 0.0
        for row in range(b):
            text = self.tokenizer.decode(out[row])
            for s in stop:
                if s in text:
                    text = text[: text.index(s)]
            yield "", Generation(text, out[row], len(ids[row]), prefill_s, decode_s,
                                 reasons[row])


class Encoder(LoadedModel):
    """A model that embeds text.

    Runtime settings (from a sentence-transformers directory, GGUF metadata or the spec):
    ``pooling``, ``normalize``, ``max_seq_length``, ``do_lower_case``, ``prompts``,
    ``default_prompt_name`` and ``include_prompt``.
    """

    @property
    def max_seq_length(self) -> int:
        """Most tokens per text (special tokens included); longer texts are truncated."""
        limit = self.model.runtime.get("max_seq_length")
        context = self.model.context_length
        return min(int(limit), context) if isinstance(limit, int) and limit > 0 else context

    def _prompt(self, prompt_name: str | None, prompt: str | None) -> str:
        if prompt is not None:
            return prompt
        prompts: dict[str, str] = dict(self.model.runtime.get("prompts") or {})
        name = prompt_name if prompt_name is not None else self.model.runtime.get(
            "default_prompt_name")
        if name is None:
            return ""
        if name not in prompts:
            raise OmnitensorError(f"embed: prompt {name!r} is not one of the model's prompts "
                                  f"{sorted(prompts)}")
        return prompts[name]

    def embed(self, texts: str | Sequence[str], *, batch_size: int = 32,
              prompt_name: str | None = None, prompt: str | None = None
              ) -> np.ndarray[Any, Any]:
        """Pooled (and, per the model, normalized) embeddings, (N, C) float32.

        Each batch is padded to its longest text (the tokenizer's own padding settings are
        ignored) and pooling reads only real tokens, so a text's embedding does not depend on
        its batch. Texts longer than `max_seq_length` are truncated, with a warning.

        Args:
            texts: a text or a list of texts.
            batch_size: texts per forward pass.
            prompt_name: a key of the model's ``prompts`` (default: ``default_prompt_name``).
            prompt: a prompt string put before every text (overrides `prompt_name`).

        Raises:
            OmnitensorError: an unknown prompt name or a bad batch size.
        """
        if batch_size < 1:
            raise OmnitensorError(f"embed: batch_size must be >= 1 (got {batch_size})")
        items = [texts] if isinstance(texts, str) else list(texts)
        if not items:
            return np.zeros((0, int(self.model.hparams.get("embedding_length", 0))), np.float32)
        runtime = self.model.runtime
        prefix = self._prompt(prompt_name, prompt)
        items = [prefix + t for t in items]
        if runtime.get("do_lower_case"):
            items = [t.lower() for t in items]
        limit = self.max_seq_length
        ids = self.tokenizer.encode_batch(items, max_length=limit)
        self._check_ids("embed", [max(row, default=-1) for row in ids])
        # sentence-transformers leaves the prompt out of pooling with include_prompt: false
        skip = 0
        if prefix and not runtime.get("include_prompt", True):
            skip = len(self.tokenizer.encode_batch([prefix], max_length=limit)[0]) - 1
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))  # less padding per batch
        out: list[np.ndarray[Any, Any]] = [np.empty(0)] * len(ids)
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            longest = max(len(ids[i]) for i in rows)
            tokens = np.zeros((len(rows), longest), np.int64)
            mask = np.zeros((len(rows), longest), np.bool_)
            for row, i in enumerate(rows):
                tokens[row, : len(ids[i])], mask[row, : len(ids[i])] = ids[i], True
            pool_mask = mask.copy()
            pool_mask[:, :skip] = False
            pooled = self.model.encode(tokens, mask, pool_mask if skip else None)
            for row, i in enumerate(rows):
                out[i] = pooled[row]
        return np.stack(out).astype(np.float32)
