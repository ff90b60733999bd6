"""`Tokenizer`: one wrapper over the `tokenizers` library for every source omnitensor reads.

Sources: a Hugging Face ``tokenizer.json`` (+ ``tokenizer_config.json``), GGUF metadata
(``tokenizer.ggml.*``: byte-level BPE "gpt2", SentencePiece-style "llama" with byte fallback,
WordPiece "bert"), and `char_tokenizer` for omnitensor's own character-level models. Chat
templates are carried as strings; rendering them belongs to the runtime.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, cast, final

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as _Backend

from ..errors import FormatError

log = logging.getLogger(__name__)

__all__ = ["Tokenizer", "char_tokenizer"]

#: Ids of a tokenizer.json may leave holes, but at most this many past its entry count: the
#: library fills every hole when it writes the vocabulary back (ids shifted by 2**31 = 8 GB).
MAX_ID_SLACK: Final = 1 << 16


@contextlib.contextmanager
def _library(source: str, what: str) -> Iterator[None]:
    """Errors of the `tokenizers` library, its Rust panics included, as `FormatError`.

    The library raises bare `Exception` for bad input and pyo3's ``PanicException`` (a
    `BaseException`) when its Rust code panics; both mean the tokenizer data is unusable.
    """
    try:
        yield
    except FormatError:
        raise
    except Exception as exc:  # noqa: BLE001 - tokenizers raises bare Exception
        raise FormatError(f"{source}: {what} ({exc})", path=source) from None
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":
            raise
        raise FormatError(f"{source}: {what}: the tokenizers library panicked ({exc})",
                          path=source) from None


def _check_tokenizer_json(text: str, source: str) -> None:
    """Refuse a tokenizer.json whose ids the library would turn into a huge allocation."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise FormatError(f"{source}: not a valid tokenizer.json ({exc})", path=source) from None
    if not isinstance(data, dict):
        raise FormatError(f"{source}: a tokenizer.json holds a JSON object", path=source)
    model = data.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    added = data.get("added_tokens") or []
    ids: list[Any] = []
    if isinstance(vocab, dict):
        ids.extend(vocab.values())
    if isinstance(added, list):
        ids.extend(t.get("id") for t in added if isinstance(t, dict))
    entries = (len(vocab) if isinstance(vocab, dict | list) else 0) + (
        len(added) if isinstance(added, list) else 0)
    bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int)
           or not 0 <= i < entries + MAX_ID_SLACK]
    if bad:
        raise FormatError(f"{source}: token id {bad[0]!r} is out of range (expected 0.."
                          f"{entries + MAX_ID_SLACK - 1} for {entries} entries); the vocabulary "
                          "or added_tokens ids are corrupt", path=source, key="model.vocab")


def _strings(source: str, key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FormatError(f"{source}: {key} must be an array of strings", path=source, key=key)
    return value


def _numbers(source: str, key: str, value: Any, count: int, *, integers: bool
             ) -> Sequence[Any]:
    kinds = (int,) if integers else (int, float)
    # GGUF's numeric arrays arrive packed (io.gguf.NumberArray), JSON's as lists
    packed = isinstance(value, Sequence) and not isinstance(value, str | bytes)
    if not packed or len(value) != count or not all(
            isinstance(v, kinds) and not isinstance(v, bool) for v in value):
        what = "integers" if integers else "numbers"
        raise FormatError(f"{source}: {key} must be an array of {count} {what} (one per token)",
                          path=source, key=key)
    return cast(Sequence[Any], value)


# llama.cpp's token types (tokenizer.ggml.token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Pre-tokenizer regexes of llama.cpp's byte-level BPE vocabularies (tokenizer.ggml.pre), as
# llama-vocab.cpp lists them: each regex splits the pieces of the one before (isolated matches).
_LLAMA3_SPLIT: Final = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                        r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT: Final = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                       r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT2_SPLIT: Final = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CJK: Final = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DEEPSEEK_LLM_LETTERS: Final = (
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
    "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a"
    "\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556"
    "\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b"
    "\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d"
    "\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4"
    "\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128"
    "\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184"
    "\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b"
    "\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17"
    "\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    "\U0001e900-\U0001e943]+")
_PRE_SPLITS: Final[dict[str, tuple[str, ...]]] = {
    **dict.fromkeys(("llama-bpe", "llama3", "smaug-bpe", "dbrx"), (_LLAMA3_SPLIT,)),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan"), (_QWEN2_SPLIT,)),
    **dict.fromkeys(("gpt-2", "mpt", "olmo", "jais", "trillion"), (_GPT2_SPLIT,)),
    **dict.fromkeys(("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                     "minerva-7b"), ("\\p{N}", _GPT2_SPLIT)),
    "deepseek-llm": ("[\r\n]", _DEEPSEEK_LLM_LETTERS,
                     "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
                     "\\s+$", _CJK, "\\p{N}+"),
    "deepseek-coder": ("[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", _CJK, "\\p{N}"),
    "falcon": ("[\\p{P}\\$\\+<=>\\^~\\|`]+", _GPT2_SPLIT, "[0-9][0-9][0-9]"),
}
#: the pre-tokenizer names omnitensor reproduces (llama.cpp's ``tokenizer.ggml.pre``).
PRE_TOKENIZERS: Final = tuple(sorted(_PRE_SPLITS))
_SPIECE: Final = "\u2581"  # SentencePiece's visible space


@final
class Tokenizer:
    """Text <-> token ids, with the model's special tokens and chat template.

    Args:
        backend: the `tokenizers.Tokenizer` doing the work (its post-processor adds BOS/EOS or
            CLS/SEP when ``add_special_tokens=True``).
        bos_id: beginning-of-sequence id (CLS for BERT), or None.
        eos_id: end-of-sequence id (SEP for BERT), or None.
        eos_ids: every id that ends generation (EOS, EOT...); defaults to ``(eos_id,)``.
        pad_id: padding id, or None.
        add_bos: whether `encode` prepends `bos_id` (informational: the post-processor does it).
        chat_template: a Jinja chat template string, or None.
    """

    def __init__(self, backend: _Backend, *, bos_id: int | None = None,
                 eos_id: int | None = None, eos_ids: Sequence[int] = (),
                 pad_id: int | None = None, add_bos: bool = False,
                 chat_template: str | None = None) -> None:
        self.backend = backend
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.eos_ids: tuple[int, ...] = tuple(dict.fromkeys(
            [*([eos_id] if eos_id is not None else []), *eos_ids]))
        self.pad_id = pad_id
        self.add_bos = add_bos
        self.chat_template = chat_template

    # --- use ---------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included."""
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    @property
    def max_id(self) -> int:
        """The largest id any token maps to (added tokens included); -1 when empty."""
        return max(self.backend.get_vocab(with_added_tokens=True).values(), default=-1)

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text` (with BOS etc. when `add_special_tokens`).

        Raises:
            FormatError: when the vocabulary cannot represent `text` (no unknown token).
        """
        with _library("tokenizer", f"cannot encode {text[:40]!r}"):
            return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def encode_batch(self, texts: Sequence[str], *, add_special_tokens: bool = True,
                     max_length: int | None = None) -> list[list[int]]:
        """`encode` over several texts (in parallel inside `tokenizers`).

        Args:
            texts: the texts.
            add_special_tokens: add BOS/EOS or CLS/SEP as the post-processor says.
            max_length: cut each text's tokens so that, special tokens included, it has at most
                this many (the specials are kept, as transformers' ``truncation=True`` does);
                a warning is logged when any text is cut.

        Raises:
            FormatError: a text the vocabulary cannot represent, or a `max_length` too small
                for the special tokens.
        """
        try:
            encodings = self.backend.encode_batch(list(texts), add_special_tokens=False)
            if max_length is not None:
                room = max_length - (self.backend.num_special_tokens_to_add(False)
                                     if add_special_tokens else 0)
                if room < 1:
                    raise FormatError(f"tokenizer: max_length {max_length} leaves no room for "
                                      "text after the special tokens")
                cut = [i for i, e in enumerate(encodings) if len(e.ids) > room]
                for i in cut:
                    encodings[i].truncate(room)
                if cut:
                    log.warning("%d of %d texts were longer than %d tokens and were truncated",
                                len(cut), len(encodings), max_length)
            if add_special_tokens:
                encodings = [self.backend.post_process(e, add_special_tokens=True)
                             for e in encodings]
        except FormatError:
            raise
        except Exception as exc:  # tokenizers raises bare Exception
            raise FormatError(f"tokenizer: cannot encode batch ({exc})") from None
        return [list(e.ids) for e in encodings]

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """Text of `ids`."""
        return str(self.backend.decode(list(map(int, ids)),
                                       skip_special_tokens=skip_special_tokens))

    def token_to_id(self, token: str) -> int | None:
        """The id of `token`, or None."""
        found = self.backend.token_to_id(token)
        return None if found is None else int(found)

    def id_to_token(self, token_id: int) -> str | None:
        """The token string of `token_id`, or None."""
        found = self.backend.id_to_token(int(token_id))
        return None if found is None else str(found)

    def to_json(self) -> str:
        """The ``tokenizer.json`` text of the backend."""
        return str(self.backend.to_str())

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``tokenizer.json`` to `path`."""
        Path(path).write_text(self.to_json(), encoding="utf-8")

    def summary(self) -> dict[str, Any]:
        """Model kind, vocabulary size, special ids, whether a chat template is present."""
        model = json.loads(self.to_json()).get("model", {}).get("type")
        return {"model": model, "vocab_size": self.vocab_size, "bos_id": self.bos_id,
                "eos_ids": list(self.eos_ids), "pad_id": self.pad_id, "add_bos": self.add_bos,
                "chat_template": self.chat_template is not None}

    def __repr__(self) -> str:
        return (f"Tokenizer(vocab={self.vocab_size}, bos={self.bos_id}, eos={self.eos_ids}, "
                f"add_bos={self.add_bos})")

    # --- sources -----------------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *,
                  config: Mapping[str, Any] | None = None) -> Tokenizer:
        """Load a Hugging Face ``tokenizer.json`` (with an optional ``tokenizer_config.json``).

        Raises:
            FormatError: when the file cannot be read or parsed.
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise FormatError(f"{path}: cannot read tokenizer ({exc})", path=str(path)) from None
        _check_tokenizer_json(text, str(path))
        with _library(str(path), "not a valid tokenizer.json"):
            backend = _Backend.from_str(text)
            return cls._from_hf(backend, dict(config or {}), {})

    @classmethod
    def from_hf_dir(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """The tokenizer of a Hugging Face model directory (``tokenizer.json`` + configs).

        Special ids come from ``tokenizer_config.json``, else ``generation_config.json`` /
        ``config.json``; the chat template from ``tokenizer_config.json`` or
        ``chat_template.jinja``.
        """
        directory = Path(path)
        configs: list[dict[str, Any]] = []
        for name in ("tokenizer_config.json", "generation_config.json", "config.json"):
            file = directory / name
            try:
                value = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise FormatError(f"{file}: cannot read JSON ({exc})", path=str(file)) from None
            configs.append(value if isinstance(value, dict) else {})
        tok_config, gen_config, model_config = configs
        template_file = directory / "chat_template.jinja"
        if "chat_template" not in tok_config and template_file.is_file():
            tok_config["chat_template"] = template_file.read_text(encoding="utf-8")
        tokenizer = cls.from_file(directory / "tokenizer.json")
        with _library(str(directory / "tokenizer.json"), "unusable tokenizer settings"):
            return cls._from_hf(tokenizer.backend, tok_config, {**model_config, **gen_config})

    @classmethod
    def _from_hf(cls, backend: _Backend, config: dict[str, Any],
                 model_config: dict[str, Any]) -> Tokenizer:
        # A tokenizer.json may pad every input to a fixed length and truncate it: that is the
        # exporter's batching, not the model's. Padding would come back as real tokens (attended
        # and pooled) and truncation would cut silently; the runtime pads its own batches,
        # masks by real lengths and truncates to the model's maximum with a warning.
        backend.no_padding()
        backend.no_truncation()
        def special(name: str) -> int | None:
            token = config.get(name)
            if isinstance(token, dict):
                token = token.get("content")
            found: Any = backend.token_to_id(token) if isinstance(token, str) else None
            if found is None:
                value = model_config.get(f"{name}_id")
                found = value[0] if isinstance(value, list) and value else value
            size = backend.get_vocab_size(with_added_tokens=True)
            ok = isinstance(found, int) and not isinstance(found, bool) and 0 <= found < size
            return int(found) if ok else None

        bos, eos, pad = special("bos_token"), special("eos_token"), special("pad_token")
        if bos is None:
            bos = _template_bos(backend)
        eos_list = model_config.get("eos_token_id")
        extra = [i for i in eos_list if isinstance(i, int) and not isinstance(i, bool)
                 and 0 <= i < backend.get_vocab_size(with_added_tokens=True)] if isinstance(
            eos_list, list) else []
        add_bos = config.get("add_bos_token")
        if not isinstance(add_bos, bool):
            try:
                probe = backend.encode("a", add_special_tokens=True).ids
            except Exception:  # noqa: BLE001 - tokenizers raises bare Exception: "a" is unknown
                probe = backend.encode("", add_special_tokens=True).ids
            add_bos = bos is not None and bool(probe) and probe[0] == bos
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        return cls(backend, bos_id=bos, eos_id=eos, eos_ids=extra, pad_id=pad, add_bos=add_bos,
                   chat_template=template if isinstance(template, str) else None)

    @classmethod
    def from_gguf_metadata(cls, metadata: Mapping[str, Any],
                           source: str = "gguf tokenizer") -> Tokenizer:
        """Build the tokenizer a GGUF file describes (``tokenizer.ggml.*`` keys).

        ``"gpt2"``: byte-level BPE from tokens and merges (pre-tokenizer regex by
        ``tokenizer.ggml.pre``). ``"llama"``: SentencePiece-style BPE whose merges follow the
        token scores (as llama.cpp merges), with ``<0xXX>`` byte fallback and the ``▁`` space
        prefix. ``"bert"``: WordPiece (llama.cpp's ``▁`` word starts turned back into ``##``
        continuations). Control tokens become special tokens; BOS/EOS, ``add_bos_token`` and
        ``tokenizer.chat_template`` come from the metadata.

        Args:
            metadata: the file's key/values.
            source: the file, for error messages.

        Raises:
            FormatError: a missing, mistyped or inconsistent key, an unsupported tokenizer
                model, or token tables the `tokenizers` library refuses (its panics included).
        """
        with _library(source, "the tokenizer.ggml.* tables are unusable"):
            return cls._from_gguf(metadata, source)

    @classmethod
    def _from_gguf(cls, metadata: Mapping[str, Any], source: str) -> Tokenizer:
        kind = metadata.get("tokenizer.ggml.model")
        tokens = metadata.get("tokenizer.ggml.tokens")
        if not isinstance(tokens, Sequence) or isinstance(tokens, str) or not tokens:
            raise FormatError(f"{source}: tokenizer.ggml.tokens is missing or empty",
                              path=source, key="tokenizer.ggml.tokens")
        tokens = _strings(source, "tokenizer.ggml.tokens", tokens)
        raw_types = metadata.get("tokenizer.ggml.token_type")
        types = [NORMAL] * len(tokens) if raw_types is None else _numbers(
            source, "tokenizer.ggml.token_type", raw_types, len(tokens), integers=True)
        if "tokenizer.ggml.scores" in metadata:
            _numbers(source, "tokenizer.ggml.scores", metadata["tokenizer.ggml.scores"],
                     len(tokens), integers=False)
        if "tokenizer.ggml.merges" in metadata:
            _strings(source, "tokenizer.ggml.merges", metadata["tokenizer.ggml.merges"])
        for key in ("tokenizer.ggml.pre", "tokenizer.chat_template"):
            if key in metadata and not isinstance(metadata[key], str):
                raise FormatError(f"{source}: {key} must be a string", path=source, key=key)
        for key in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
                    "tokenizer.ggml.add_space_prefix"):
            if key in metadata and not isinstance(metadata[key], bool):
                raise FormatError(f"{source}: {key} must be a bool", path=source, key=key)

        def ident(key: str) -> int | None:
            value = metadata.get(f"tokenizer.ggml.{key}")
            if isinstance(value, int) and not isinstance(value, bool):
                if not 0 <= value < len(tokens):
                    raise FormatError(f"{source}: tokenizer.ggml.{key} = {value} is not a token "
                                      f"id (vocabulary of {len(tokens)})", path=source,
                                      key=f"tokenizer.ggml.{key}")
                return value
            return None

        bos, eos, unk, pad = ident("bos_token_id"), ident("eos_token_id"), \
            ident("unknown_token_id"), ident("padding_token_id")
        if kind == "gpt2":
            backend = _gpt2_backend(metadata, tokens)
            default_bos = False
        elif kind == "llama":
            backend = _llama_backend(metadata, tokens, types, unk)
            default_bos = True
        elif kind == "bert":
            backend = _bert_backend(tokens, types, unk)
            default_bos = True
        else:
            raise FormatError(f"{source}: unsupported tokenizer.ggml.model {kind!r} "
                              "(expected 'gpt2', 'llama' or 'bert')", path=source,
                              key="tokenizer.ggml.model")
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                    for t, k in zip(tokens, types, strict=True) if k == CONTROL])
        user = [AddedToken(t, special=False, normalized=False)
                for t, k in zip(tokens, types, strict=True) if k == USER_DEFINED]
        if user:
            backend.add_tokens(user)
        add_bos = metadata.get("tokenizer.ggml.add_bos_token", default_bos)
        add_eos = metadata.get("tokenizer.ggml.add_eos_token", kind == "bert")
        _set_post_processor(backend, tokens, bos if add_bos else None,
                            eos if add_eos else None)
        eot = ident("eot_token_id")
        template = metadata.get("tokenizer.chat_template")
        return cls(backend, bos_id=bos, eos_id=eos, eos_ids=[eot] if eot is not None else [],
                   pad_id=pad, add_bos=bool(add_bos) and bos is not None,
                   chat_template=template if isinstance(template, str) else None)


def _template_bos(backend: _Backend) -> int | None:
    """The id a TemplateProcessing post-processor puts first, if any (tokenizer.json alone)."""
    post = json.loads(backend.to_str()).get("post_processor") or {}
    single = post.get("single") if post.get("type") == "TemplateProcessing" else None
    if not single or "SpecialToken" not in single[0]:
        return None
    ids = post.get("special_tokens", {}).get(single[0]["SpecialToken"]["id"], {}).get("ids")
    return int(ids[0]) if ids else None


def _set_post_processor(backend: _Backend, tokens: list[str], bos: int | None,
                        eos: int | None) -> None:
    if bos is None and eos is None:
        return
    first = f"{tokens[bos]} " if bos is not None else ""
    last = f" {tokens[eos]}" if eos is not None else ""
    specials = [(tokens[i], i) for i in dict.fromkeys(x for x in (bos, eos) if x is not None)]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{first}$A{last}", pair=f"{first}$A{last} $B{last}", special_tokens=specials)


def _gpt2_backend(metadata: Mapping[str, Any], tokens: list[str]) -> _Backend:
    merges_raw = metadata.get("tokenizer.ggml.merges")
    if not isinstance(merges_raw, list):
        raise FormatError("gguf tokenizer: gpt2 model without tokenizer.ggml.merges")
    merges: list[tuple[str, str]] = []
    for merge in merges_raw:
        parts = str(merge).split(" ")
        if len(parts) != 2:
            raise FormatError(f"gguf tokenizer: merge {merge!r} is not two tokens")
        merges.append((parts[0], parts[1]))
    vocab = {token: i for i, token in enumerate(tokens)}
    backend = _Backend(models.BPE(vocab, merges, ignore_merges=False))
    pre = str(metadata.get("tokenizer.ggml.pre", "gpt-2"))
    splits = _PRE_SPLITS.get(pre)
    if splits is None:
        log.warning("gguf tokenizer: pre-tokenizer %r is not one omnitensor knows (%s); "
                    "splitting as GPT-2 does", pre, ", ".join(PRE_TOKENIZERS))
        splits = (_GPT2_SPLIT,)
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        *(pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False)
          for split in splits),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    return backend


def _spm_merges(tokens: list[str], scores: list[float], types: Sequence[int]
                ) -> list[tuple[str, str]]:
    """BPE merges that reproduce SentencePiece's score-driven merging (as llama.cpp does).

    llama.cpp merges the adjacent pair whose concatenation is the highest-scoring token; a BPE
    whose merge ranks follow the merged token's score does the same.
    """
    mergeable = {t: i for i, (t, k) in enumerate(zip(tokens, types, strict=True))
                 if k in (NORMAL, USER_DEFINED)}
    candidates: list[tuple[float, int, int, str, str]] = []
    for token, index in mergeable.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in mergeable and right in mergeable:
                candidates.append((-scores[index], mergeable[left], mergeable[right], left, right))
    candidates.sort()
    return [(left, right) for *_, left, right in candidates]


def _llama_backend(metadata: Mapping[str, Any], tokens: list[str], types: Sequence[int],
                   unk: int | None) -> _Backend:
    scores = metadata.get("tokenizer.ggml.scores")
    if not isinstance(scores, Sequence) or len(scores) != len(tokens):
        raise FormatError("gguf tokenizer: llama model needs tokenizer.ggml.scores, one per token")
    vocab = {token: i for i, token in enumerate(tokens)}
    byte_fallback = BYTE in types
    model = models.BPE(vocab, _spm_merges(tokens, [float(s) for s in scores], types),
                       unk_token=tokens[unk] if unk is not None else None,
                       byte_fallback=byte_fallback, fuse_unk=True)
    backend = _Backend(model)
    steps: list[Any] = []
    if metadata.get("tokenizer.ggml.add_space_prefix", True):
        steps.append(normalizers.Prepend(_SPIECE))
    steps.append(normalizers.Replace(" ", _SPIECE))
    backend.normalizer = normalizers.Sequence(steps)
    decode: list[Any] = [decoders.Replace(_SPIECE, " ")]
    if byte_fallback:
        decode.append(decoders.ByteFallback())
    decode.append(decoders.Fuse())
    if metadata.get("tokenizer.ggml.add_space_prefix", True):
        decode.append(decoders.Strip(" ", 1, 0))
    backend.decoder = decoders.Sequence(decode)
    return backend


def _bert_backend(tokens: list[str], types: Sequence[int], unk: int | None) -> _Backend:
    # llama.cpp's converter marks word starts with "▁" and drops WordPiece's "##": undo it.
    vocab: dict[str, int] = {}
    for i, (token, kind) in enumerate(zip(tokens, types, strict=True)):
        if kind == CONTROL or (token.startswith("[") and token.endswith("]")):
            word = token
        elif token.startswith(_SPIECE):
            word = token[1:]
        else:
            word = "##" + token
        vocab.setdefault(word, i)
    unk_token = tokens[unk] if unk is not None else "[UNK]"
    backend = _Backend(models.WordPiece(vocab, unk_token=unk_token))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    return backend


def char_tokenizer(alphabet: str | Sequence[str], *, bos: str | None = None,
                   eos: str | None = None, unk: str | None = None) -> Tokenizer:
    """A character-level tokenizer: one id per character of `alphabet`, in order.

    Optional special tokens get the next ids (BOS, EOS, then UNK). Without `unk`, text with a
    character outside the alphabet cannot be encoded (FormatError). `Tokenizer.save` writes a
    valid ``tokenizer.json`` that `Tokenizer.from_file` (and Hugging Face) read back.

    Args:
        alphabet: the characters (duplicates ignored after the first).
        bos: beginning-of-sequence token, added by `encode` when given.
        eos: end-of-sequence token (not added by `encode`; it stops generation).
        unk: token for characters outside the alphabet.

    Raises:
        FormatError: an alphabet entry that is not a single character.
    """
    chars = list(dict.fromkeys(alphabet))
    if not chars or any(len(c) != 1 for c in chars):
        raise FormatError(f"char_tokenizer: the alphabet must be non-empty single characters "
                          f"(got {chars[:5]!r})")
    vocab = {c: i for i, c in enumerate(chars)}
    specials = [t for t in (bos, eos, unk) if t is not None]
    for token in specials:
        if token in vocab:
            raise FormatError(f"char_tokenizer: special token {token!r} is also in the alphabet")
        vocab[token] = len(vocab)
    backend = _Backend(models.WordLevel(vocab, unk_token=unk or "\x00<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    bos_id = vocab.get(bos) if bos is not None else None
    eos_id = vocab.get(eos) if eos is not None else None
    if bos_id is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(str(bos), bos_id)])
    return Tokenizer(backend, bos_id=bos_id, eos_id=eos_id, add_bos=bos_id is not None)
