"""Text in and out for a model with a real tokenizer (`model.tokenizer`, e.g. smollm2-rand).

`TextCodec.encode` turns a text prompt into ids (no special tokens added, as the workloads do);
`Detokenizer` turns a growing list of output ids into text deltas, holding back a delta that
ends in an incomplete UTF-8 character until the next token completes it. A model with a made-up
vocabulary (`tiny`, `s`) has no codec: it takes token ids only and answers with empty text.
`max_token_bytes` bounds the bytes one token covers, so a text that could never fit the context
is refused from its length alone, before any tokenising (a 20 MB prompt costs nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workloads.tokenizer import LoadedTokenizer

REPLACEMENT = "\ufffd"  # what a byte-level BPE decodes an incomplete character to


@dataclass(frozen=True)
class TextCodec:
    tokenizer: LoadedTokenizer
    # The most UTF-8 bytes of text one token can stand for; None where the tokenizer gives no
    # such bound (a normalizer may shrink the text, an unknown token may cover any length).
    max_token_bytes: int | None = None

    def min_tokens(self, text: str) -> int:
        """A lower bound on the number of tokens `text` encodes to (0 when none is known)."""
        if self.max_token_bytes is None:
            return 0
        return -(-len(text.encode("utf-8", "surrogatepass")) // self.max_token_bytes)

    def encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def load_codec(name: str | None) -> TextCodec | None:
    if name is None:
        return None
    from workloads.tokenizer import load

    loaded = load(name)
    return TextCodec(loaded, _max_token_bytes(loaded))


def _max_token_bytes(loaded: LoadedTokenizer) -> int | None:
    """The longest text any token decodes to, in UTF-8 bytes (a partial character decodes to
    U+FFFD, 3 bytes, never fewer than it stands for); None when a token may cover more."""
    tok = loaded.tokenizer
    if tok.normalizer is not None or getattr(tok.model, "unk_token", None):
        return None
    decode = tok.decode
    return max(
        len(decode([i], skip_special_tokens=False).encode()) for i in range(loaded.vocab_size)
    )


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
