"""`CompiledModel`: a spec's forward plan bound to uploaded weights on one backend.

Causal LMs run through two compiled programs per shape bucket, prefill and decode, over a KV
cache preallocated at a fixed capacity and updated with `dynamic_update_slice` (DESIGN §4):
positions, lengths and the last-token index are tensor inputs, so 256 decode steps reuse one
plan. Encoders run one program per (batch, padded length) bucket.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

from ..backend.contract import Backend
from ..backend.host_memory import prefetch
from ..backend.registry import prepare_weight, use_backend
from ..dtypes import as_dtype, float32, int32
from ..errors import ShapeError
from ..functional import overrides
from ..io.weights import QuantizedArray
from ..ir import quant_blocks
from ..ir.types import HALF_FORMATS, QTensorType, TensorType
from ..tensor.creation import arange
from ..tensor.graph import Node
from ..tensor.interop import from_numpy
from ..tensor.jit import compile as compile_fn
from ..tensor.tensor import Tensor
from .checkpoint import Checkpoint
from .consistency import check_hparams
from .fusion import fuse_projections
from .spec import ModelSpec
from .steps import StepContext, run_steps

__all__ = ["CompiledModel", "bucket", "encoder_bucket"]

Cache = list[Tensor]


def _half(value: Any) -> str | None:
    """``"f16"``/``"bf16"`` for a 2-D float16/bfloat16 array kept 16-bit (`HALF_FORMATS`)."""
    if not isinstance(value, np.ndarray) or value.ndim != 2 or not value.flags.c_contiguous:
        return None
    if value.dtype == np.float16:
        return "f16"
    return "bf16" if value.dtype == ml_dtypes.bfloat16 else None


def bucket(n: int) -> int:
    """The power-of-two length bucket holding `n` tokens (prefill pads to it)."""
    return 1 << max(0, (n - 1).bit_length())


def encoder_bucket(n: int) -> int:
    """The length an encoder batch of `n` tokens is padded to: 8, 9, ..., 16, 18, ..., 32, 36...

    An encoder's whole cost scales with the padded length, and each bucket is one more plan to
    build (~50 ms with the kernels compiled) that keeps its buffers while cached (a batch of 32
    at MiniLM's shape: ~1 MB a token of length, 255 MB more at 512 than at 256). Short texts,
    whose plans are small, get tight buckets: every length to 16, then eight per octave up to
    `_FINE_BUCKETS_UP_TO` (under an eighth of the work is padding: sorted batches of 21-25
    tokens run as 22, 24 or 26, 5 % fewer rows than as 24 or 28); longer ones four per octave
    (under a quarter), so a corpus of long documents keeps half as many large plans.
    """
    if n <= 16:
        return max(8, n)
    per_octave = 8 if n <= _FINE_BUCKETS_UP_TO else 4
    # (the octave (2**k, 2**(k+1)] holding n is 2**k wide)
    step = max(1, (1 << (n - 1).bit_length()) // (2 * per_octave))
    return -(-n // step) * step


#: Longest padded length of `encoder_bucket`'s eight buckets per octave.
_FINE_BUCKETS_UP_TO = 64


class CompiledModel:
    """A model ready to run: spec, weights on a backend, tokenizer and compiled programs.

    Attributes:
        spec: the architecture.
        hparams: the spec's defaults overridden by the checkpoint's hyper-parameters.
        weights: parameters by canonical name, on `backend`.
        tokenizer: the checkpoint's tokenizer (or None).
        backend: where everything runs.
    """

    def __init__(self, spec: ModelSpec, checkpoint: Checkpoint, backend: Backend, *,
                 quant_policy: str = "auto") -> None:
        self.spec = spec
        self.arch = checkpoint.arch
        self.hparams: dict[str, Any] = {**spec.hparams, **checkpoint.hparams}
        # the spec's defaults and an in-memory checkpoint meet the same rules as files
        source = f"{checkpoint.path or 'checkpoint'} with spec {spec.source}"
        check_hparams(self.hparams, source)
        spec.expanded_steps(self.hparams)
        self.tokenizer = checkpoint.tokenizer
        self.backend = backend
        self.runtime: dict[str, Any] = {**spec.runtime, **checkpoint.runtime}
        keep_quantized = quant_policy == "auto" and backend.capabilities().supports(
            "qmatmul", float32)
        self._quantized_formats: dict[str, bool] = {}
        # quantized tables read by Embedding steps: host blocks, gathered row by row per call
        self._tables: dict[str, tuple[Any, str]] = {}
        # (a step without its weight is refused, naming the field, when the forward is recorded)
        embedded = {step.get("weight") for _, step in spec.walk() if step.get("op") == "Embedding"}
        # an LM head tied to the embedding table reads the table as a matrix too
        tied = {step["fallback"] for _, step in spec.walk() if step.get("op") == "LMHead"
                and "fallback" in step and step.get("weight") not in checkpoint.weights}
        # q/k/v and gate/up stacked into one product each where their formats allow; not
        # quantized ones the backend repacks (the stacked bytes would be held twice). Causal
        # LMs only: what joining saves is per product, which counts where products run on a
        # row or a few (decode); an encoder's batch is hundreds of rows, where the joined
        # result's column blocks cost copies instead (MiniLM shape, cpu, in one process:
        # 139.8 against 145.8 sentences/s joined)
        joined = fuse_projections(
            checkpoint.weights, spec, self.hparams,
            quantized=lambda v: not (keep_quantized and self._runs_quantized(v)
                                     and backend.repacks(v.type))
        ) if spec.kind == "causal_lm" else dict(checkpoint.weights)
        self.weights = {name: self._upload(name, value, keep_quantized, table=name in embedded,
                                           matrix=name not in embedded or name in tied)
                        for name, value in joined.items()}
        if not self.hparams.get("vocab_size") and "token_embd.weight" in self.weights:
            self.hparams["vocab_size"] = self.weights["token_embd.weight"].shape[0]
        self._prefill = compile_fn(self._forward_cached, donate=(4,))
        self._encode = compile_fn(self._forward_encoder)
        self.check()

    # --- loading -------------------------------------------------------------------------------

    def _runs_quantized(self, value: QuantizedArray) -> bool:
        """Whether the backend runs `qmatmul` on this weight's format.

        A backend may implement only some formats; the others are dequantized at load rather
        than failing later.
        """
        if value.format not in self._quantized_formats:
            from ..ir.builder import Builder

            b = Builder()
            x = b.input(TensorType((1, value.shape[-1]), float32))
            w = b.input(QTensorType(value.format, (1, value.shape[-1])))
            fn = b.build([b.emit("qmatmul", x, w, format=value.format)])
            reason = self.backend.supports(fn.body[-1])
            if reason is not None:
                # 16-bit weights widened at load is the long-standing default: no warning
                level = logging.INFO if value.format in HALF_FORMATS else logging.WARNING
                logging.getLogger(__name__).log(
                    level, "%s: %s weights are dequantized to float32 at load (%s)",
                    self.backend.name, value.format, reason)
            self._quantized_formats[value.format] = reason is None
        return self._quantized_formats[value.format]

    def _upload(self, name: str, value: Any, keep_quantized: bool, *,
                table: bool = False, matrix: bool = True) -> Tensor:
        """Weight `name` on the backend, each weight held once.

        Weights viewed in a mapped file (or sealed by the checkpoint reader) are immutable, so
        a host backend keeps them without a copy (`HostArrayBackend.upload`).

        Args:
            name: the weight's canonical name.
            value: its array or quantized blocks, from the checkpoint.
            keep_quantized: whether the backend may run quantized weights as they are.
            table: an Embedding step reads it (quantized tables are gathered on the host).
            matrix: a product reads it (for a table, only when the LM head is tied to it).
        """
        if isinstance(value, QuantizedArray):
            if keep_quantized and self._runs_quantized(value):
                buffer = self.backend.upload(value.blocks)
                if table:
                    # NOTE: a lookup dequantizes only the rows it reads, on the host (the whole
                    # table dequantized in the graph would be hoisted and cached as float32).
                    host = buffer if isinstance(buffer, np.ndarray) else value.blocks
                    self._tables[name] = (host, value.format)
                if matrix:
                    # a backend may repack the blocks once, here, into a layout its kernels
                    # stream (an untied table is never a matrix: repacking it would hold it twice)
                    prepared = prepare_weight(self.backend, name, buffer, value.type)
                    buffer = buffer if prepared is None else prepared
                node = Node.from_buffer(buffer, value.type, self.backend)
                return Tensor(node).mark_parameter(name)
            value = value.dequantize()
        elif _half(value) is not None:
            # NOTE: a 16-bit float matrix stays 16-bit: `qmatmul` widens it on the fly where
            # the backend runs the format (float32 everywhere else, as before).
            fmt = _half(value)
            assert fmt is not None
            blocks = np.asarray(value).view(np.uint8).reshape(value.shape[0], -1)
            return self._upload(name, QuantizedArray(blocks, fmt, tuple(value.shape)),
                                keep_quantized, table=table, matrix=matrix)
        array = np.asarray(value)
        if array.dtype.kind in "fV" and array.dtype != np.float32:
            array = array.astype(np.float32)  # compute in float32; see the note in the README
        prefetch(array)  # a mapped weight is read from disk now, not at the first token
        dtype = as_dtype(array.dtype)
        node = Node.from_buffer(self.backend.upload(array), TensorType(array.shape, dtype),
                                self.backend)
        return Tensor(node).mark_parameter(name)

    def check(self) -> None:
        """Record (not run) a one-token forward: missing weights and shape mismatches fail now.

        Raises:
            FormatError: a missing weight or hyper-parameter, naming the step.
            ShapeError: a weight whose shape does not fit, naming the op and shapes.
        """
        # constants recorded here bind to the model's backend, not to the caller's scope
        with use_backend(self.backend):
            tokens = Tensor._apply("constant", value=np.zeros((1, 1), np.int32))
            ctx = self._context(tokens, arange(1, dtype=int32).reshape(1, 1),
                                arange(1, dtype=int32), None, None, None, None)
            run_steps(ctx, self.spec.forward)  # errors name the spec, the step and the layer
        unused = set(self.weights) - ctx.uses
        if unused - {"pooler.dense.weight", "pooler.dense.bias"}:
            import logging

            logging.getLogger(__name__).info("weights not used by the %s spec: %s",
                                             self.spec.name, sorted(unused)[:8])

    # --- forward -------------------------------------------------------------------------------

    def _context(self, tokens: Tensor, positions: Tensor, slots: Tensor,
                 key_mask: Tensor | None, cache: Cache | None, start: Tensor | None,
                 last: Tensor | None, rows: list[Tensor] | None = None) -> StepContext:
        values = {"tokens": tokens}
        for name, gathered in zip(sorted(self._tables), rows or [], strict=False):
            values[f"rows:{name}"] = gathered  # read by the Embedding step
        return StepContext(self.hparams, self.weights, values, positions, slots,
                           key_mask, cache, start, last, spec_source=self.spec.source,
                           runtime=self.runtime)

    def _rows(self, tokens: np.ndarray[Any, Any]) -> list[Tensor]:
        """The dequantized rows of each quantized lookup table at `tokens` (B, T) -> (B, T, C)."""
        out = []
        for name in sorted(self._tables):
            blocks, fmt = self._tables[name]
            rows = quant_blocks.take_rows(blocks, tokens, fmt)
            # a fresh array: the step uploads it with the other inputs (compile's leaves)
            out.append(from_numpy(rows, copy=False))
        return out

    def _run(self, ctx: StepContext) -> StepContext:
        with overrides(dict(self.runtime.get("functional_overrides", {}))):
            run_steps(ctx, self.spec.forward)
        return ctx

    def _forward_cached(self, tokens: Tensor, positions: Tensor, key_mask: Tensor,
                        start: Tensor, cache: Cache, last: Tensor,
                        rows: list[Tensor]) -> tuple[Tensor, Cache]:
        with use_backend(self.backend):  # constants (iota, literals) on the model's backend
            t = tokens.shape[1]
            slots = arange(t, dtype=int32) + start
            ctx = self._run(self._context(tokens, positions, slots, key_mask, cache, start,
                                          last, rows))
        return ctx.values["logits"], cache

    def _forward_encoder(self, tokens: Tensor, mask: Tensor, pool_mask: Tensor,
                         rows: list[Tensor]) -> Tensor:
        with use_backend(self.backend):  # constants (iota, literals) on the model's backend
            b, t = tokens.shape
            positions = arange(t, dtype=int32).reshape(1, t).expand(b, t)
            key_mask = mask.reshape(b, 1, 1, t)
            ctx = self._context(tokens, positions, arange(t, dtype=int32), key_mask, None,
                                None, None, rows)
            ctx.values["pool_mask"] = pool_mask
            ctx = self._run(ctx)
        return ctx.values[self.spec.forward[-1]["output"]]

    # --- causal LM -----------------------------------------------------------------------------

    @property
    def context_length(self) -> int:
        """Most positions the model was trained for."""
        return int(self.hparams.get("context_length") or 2048)

    def new_cache(self, batch: int, capacity: int) -> Cache:
        """Zeroed caches on the backend, one per layer: (2, B, H_kv, capacity, head_dim)."""
        # NOTE: keys and values stacked, not a [k, v] pair: each cache tensor is an argument
        # and a result of every decode step, and the tensor layer's work per call grows with
        # their number (a 0.5B step: ~0.2 ms less outside the plan with 24 than with 48)
        heads, kv = int(self.hparams["head_count"]), int(self.hparams["head_count_kv"])
        head_dim = int(self.hparams.get("head_dim") or self.hparams["embedding_length"] // heads)
        shape = (2, batch, kv, capacity, head_dim)
        return [from_numpy(np.zeros(shape, np.float32), copy=False).to(self.backend)
                for _ in range(int(self.hparams["block_count"]))]

    def step(self, tokens: np.ndarray[Any, Any], positions: np.ndarray[Any, Any],
             key_mask: np.ndarray[Any, Any], start: int, cache: Cache,
             last: np.ndarray[Any, Any]) -> tuple[Tensor, Cache]:
        """One compiled forward over `tokens` (B, T) written at cache slot `start`.

        Returns the logits (B, vocab) of token ``last[b]`` of each row and the updated caches
        (the old ones are donated).
        """
        capacity = cache[0].shape[3]
        if start + tokens.shape[1] > capacity:
            raise ShapeError(f"step: {start} + {tokens.shape[1]} tokens exceed the cache "
                             f"capacity {capacity}")
        # NOTE: fresh arrays (astype copies) need no second copy; the cache on the backend
        # makes the compiled call run there
        logits, new_cache = self._prefill(from_numpy(tokens.astype(np.int32), copy=False),
                                          from_numpy(positions.astype(np.int32), copy=False),
                                          from_numpy(key_mask.astype(np.bool_), copy=False),
                                          from_numpy(np.array(start, np.int32), copy=False),
                                          cache, from_numpy(last.astype(np.int32), copy=False),
                                          self._rows(tokens))
        return logits, new_cache

    # --- encoder -------------------------------------------------------------------------------

    def encode(self, tokens: np.ndarray[Any, Any], mask: np.ndarray[Any, Any],
               pool_mask: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
        """Pooled embeddings (B, C) of padded `tokens` (B, T) with `mask` true on real tokens.

        Args:
            tokens: ids, padded on the right.
            mask: true on real tokens (attended and pooled).
            pool_mask: true on the tokens pooling reads (default `mask`; sentence-transformers
                models with ``include_prompt: false`` leave the prompt out).

        Raises:
            ShapeError: more tokens than the model's positions.
        """
        b, t = tokens.shape
        if t > self.context_length:
            raise ShapeError(f"encode: {t} tokens exceed the context length "
                             f"{self.context_length}")
        # the bucket never runs past the position table (a 514-position model pads to 514)
        padded = min(encoder_bucket(t), max(t, self.context_length))
        tok = np.zeros((b, padded), np.int32)
        msk = np.zeros((b, padded), np.bool_)
        pmsk = np.zeros((b, padded), np.bool_)
        tok[:, :t], msk[:, :t] = tokens, mask
        pmsk[:, :t] = mask if pool_mask is None else pool_mask
        # NOTE: bind the inputs to the model's backend: `compile` picks the backend from its
        # arguments, and host arrays alone would send the trace to the selected default.
        out = self._encode(from_numpy(tok).to(self.backend), from_numpy(msk).to(self.backend),
                           from_numpy(pmsk).to(self.backend), self._rows(tok))
        return np.asarray(out.numpy())

    def parameters(self) -> Mapping[str, Tensor]:
        """The weights by name."""
        return self.weights


