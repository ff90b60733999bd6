"""Token ids to text as they come: whole characters only, stop strings held back and cut.

Decoding each token alone breaks characters split across tokens (a UTF-8 sequence over two
byte-level BPE tokens) and leaks a stop string's first half before its second half arrives.
`TextStream` decodes the whole sequence, emits only what can no longer change, and cuts the text
at the first stop string (which is never part of the output, as in the OpenAI API).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["TextStream"]

_INCOMPLETE = "\ufffd"  # what a decoder gives for a partial UTF-8 sequence


class TextStream:
    """Incremental detokenizer with stop strings.

    Attributes:
        ids: every token id pushed.
        stopped: a stop string was produced (nothing more is emitted).
        text: the text emitted so far.
    """

    def __init__(self, tokenizer: Any, stop: Sequence[str] = ()) -> None:
        self._tokenizer = tokenizer
        self._stop = [s for s in stop if s]
        self.ids: list[int] = []
        self.stopped = False
        self.text = ""

    def push(self, token: int) -> str:
        """Add one token; return the text that became final (may be empty)."""
        if self.stopped:
            return ""
        self.ids.append(int(token))
        full = self._tokenizer.decode(self.ids)
        cut = min((i for s in self._stop if (i := full.find(s)) >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            return self._emit(full[:cut])
        if full.endswith(_INCOMPLETE):
            return ""
        hold = max((n for s in self._stop for n in range(len(s) - 1, 0, -1)
                    if full.endswith(s[:n])), default=0)
        return self._emit(full[: len(full) - hold])

    def finish(self) -> str:
        """The text still held back (a partial stop string at the end); call once at the end."""
        if self.stopped:
            return ""
        return self._emit(self._tokenizer.decode(self.ids))

    def _emit(self, final: str) -> str:
        if not final.startswith(self.text):  # a decoder that rewrote earlier text: emit nothing
            return ""
        piece = final[len(self.text):]
        self.text = final
        return piece
