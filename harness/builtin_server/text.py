"""Text in and out for a model with a real tokenizer (`model.tokenizer`, e.g. smollm2-rand).

`TextCodec.encode` turns a text prompt into ids (no special tokens added, as the workloads do);
`Detokenizer` turns a growing list of output ids into text deltas, holding back a delta that
ends in an incomplete UTF-8 character until the next token completes it. A model with a made-up
vocabulary (`tiny`, `s`) has no codec: it takes token ids only and answers with empty text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workloads.tokenizer import LoadedTokenizer

REPLACEMENT = "\ufffd"  # what a byte-level BPE decodes an incomplete character to


@dataclass(frozen=True)
class TextCodec:
    tokenizer: LoadedTokenizer

    def encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def load_codec(name: str | None) -> TextCodec | None:
    if name is None:
        return None
    from workloads.tokenizer import load

    return TextCodec(load(name))


@dataclass
class Detokenizer:
    """Text deltas of one sample's output ids, each emitted once and in order."""

    codec: TextCodec | None
    ids: list[int] = field(default_factory=list)
    sent: str = ""

    def add(self, new_ids: list[int]) -> str:
        """The text that `new_ids` completes (empty while a character is still partial)."""
        self.ids.extend(new_ids)
        if self.codec is None:
            return ""
        text = self.codec.decode(self.ids)
        if text.endswith(REPLACEMENT) or not text.startswith(self.sent):
            return ""
        delta, self.sent = text[len(self.sent) :], text
        return delta

    def flush(self) -> str:
        """Whatever is left once the sample has finished (a trailing partial character too)."""
        if self.codec is None:
            return ""
        text = self.codec.decode(self.ids)
        delta = text[len(self.sent) :] if text.startswith(self.sent) else ""
        self.sent = text
        return delta
