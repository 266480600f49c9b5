"""Seeded token streams: identical keys give identical tokens, distinct keys independent ones.

A stream is SplitMix64 started from a 64-bit key folded from a tuple such as (seed, "doc", 7):
token j = mix(key + (j+1)·γ) mapped into the workload id range. Being counter-based (like Philox)
it is vectorised across keys, so the Mooncake expansion of a whole trace takes about a second.
Other random choices (shuffles, Zipf draws) use numpy's Philox keyed by the same tuples.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from workloads.errors import BadInput
from workloads.request import Request

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment (golden ratio)
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


@dataclass(frozen=True)
class TokenSpace:
    """Which ids generators may use; the harness passes the model's values.

    ids < first_ordinary_id are specials (never drawn). `first_ordinary_id` itself is the reserved
    warm-up id: only warm-up prompts start with it, so they share no prefix with any workload.

        0 ... first_ordinary_id-1 | first_ordinary_id | first_ordinary_id+1 ... vocab_size-1
              specials            |   warm-up id      |        workload ids
    """

    vocab_size: int
    first_ordinary_id: int = 0
    # The model's context (prompt + output): no token array of one request may be longer, checked
    # before it is allocated (an output_len of 10**9 would take 8 GB per request). None: no bound.
    max_request_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.first_ordinary_id < 0 or self.vocab_size - self.first_ordinary_id < 2:
            raise BadInput(
                f"token space needs at least 2 ordinary ids, got vocab_size={self.vocab_size}, "
                f"first_ordinary_id={self.first_ordinary_id}"
            )

    @property
    def warmup_id(self) -> int:
        return self.first_ordinary_id

    @property
    def first_workload_id(self) -> int:
        return self.first_ordinary_id + 1

    @property
    def num_workload_ids(self) -> int:
        return self.vocab_size - self.first_workload_id


def _mix(x: int) -> int:
    """SplitMix64's finaliser on a Python int."""
    x = ((x ^ (x >> 30)) * _M1) & MASK64
    x = ((x ^ (x >> 27)) * _M2) & MASK64
    return x ^ (x >> 31)


def mix_array(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on a uint64 array (numpy array arithmetic wraps modulo 2**64)."""
    out = x.copy()
    _mix_in_place(out, np.empty_like(out))
    return out


def _mix_in_place(x: np.ndarray, scratch: np.ndarray) -> None:
    """mix_array into `x` itself, `scratch` (its shape) overwritten: no temporary arrays (a
    trace's expansion mixes ~10^8 tokens; each temporary was one more pass over fresh memory)."""
    for shift, multiplier in ((30, _M1), (27, _M2), (31, None)):
        np.right_shift(x, np.uint64(shift), out=scratch)
        np.bitwise_xor(x, scratch, out=x)
        if multiplier is not None:
            np.multiply(x, np.uint64(multiplier), out=x)


def _code(part: int | str) -> int:
    if isinstance(part, str):  # not hash(): that one is salted per process
        return int.from_bytes(hashlib.blake2b(part.encode(), digest_size=8).digest(), "little")
    return int(part) & MASK64


def stream_key(*parts: int | str) -> int:
    """Fold a tuple of ints and strings into a 64-bit stream key."""
    key = 0
    for part in parts:
        key = _mix(key ^ ((_code(part) + GAMMA) & MASK64))
    return key


def stream_keys(prefix: tuple[int | str, ...], last: np.ndarray) -> np.ndarray:
    """`stream_key(*prefix, x)` for every x of an int array, vectorised."""
    base = np.uint64(stream_key(*prefix))
    return mix_array(base ^ (last.astype(np.uint64) + np.uint64(GAMMA)))


def _to_ids(raw: np.ndarray, space: TokenSpace, dtype: type = np.int64) -> np.ndarray:
    """Token ids of the uint64 draws `raw` (overwritten)."""
    out: np.ndarray = np.empty(raw.shape, dtype=dtype)
    _ids_into(raw, np.empty_like(raw), space, out)
    return out


def _ids_into(raw: np.ndarray, scratch: np.ndarray, space: TokenSpace, out: np.ndarray) -> None:
    """Token ids of the uint64 draws `raw` into `out`; `raw` and `scratch` are overwritten."""
    n = np.uint64(space.num_workload_ids)
    # raw % n, exactly; numpy divides by a scalar with libdivide but computes `%` by hardware
    # division, twice as slow.
    np.floor_divide(raw, n, out=scratch)
    np.multiply(scratch, n, out=scratch)
    np.subtract(raw, scratch, out=raw)
    # The ids fit any integer dtype asked for (vocab < 2**31), so the cast loses nothing.
    np.add(raw, np.uint64(space.first_workload_id), out=out, casting="unsafe")


DRAW_TOKENS = 1 << 15  # tokens drawn per vectorised pass: 256 KB of uint64 temporaries, in L2


def check_length(space: TokenSpace, length: int) -> None:
    """BadInput before allocating a request's token array longer than the model's context."""
    limit = space.max_request_tokens
    if limit is not None and length > limit:
        raise BadInput(
            f"workload: a request needs {length:,} tokens in one piece (an output or prompt "
            f"length, or a trace's block size) but the model's context is {limit:,} "
            f"(model.max_position_embeddings); nothing was allocated"
        )


def token_block(
    space: TokenSpace, keys: np.ndarray, length: int, dtype: type = np.int64
) -> np.ndarray:
    """Rows of `length` tokens, row b being the stream of keys[b]: shape [len(keys), length].
    `dtype` np.int32 skips an int64 copy where the ids are stored compactly (they fit: vocab < 2**31).
    Many rows are drawn DRAW_TOKENS at a time in two reused scratch arrays: temporaries that
    spilled out of the CPU cache, or were fresh pages, made a large draw twice as slow per token."""
    check_length(space, length)
    steps = np.arange(1, length + 1, dtype=np.uint64) * np.uint64(GAMMA)
    keys = keys.astype(np.uint64)
    out: np.ndarray = np.empty((len(keys), length), dtype=dtype)
    per_pass = max(1, min(len(keys), DRAW_TOKENS // max(length, 1)))
    x, scratch = np.empty((2, per_pass, length), dtype=np.uint64)
    for lo in range(0, len(keys), per_pass):
        part = keys[lo : lo + per_pass]
        xs, ss = x[: len(part)], scratch[: len(part)]
        np.add(part[:, None], steps[None, :], out=xs)
        _mix_in_place(xs, ss)
        _ids_into(xs, ss, space, out[lo : lo + len(part)])
    return out


def token_streams(space: TokenSpace, keys: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The first lengths[b] tokens of stream keys[b], for every b, concatenated (one vectorised
    draw for many short streams, such as a trace's replies)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size:
        check_length(space, int(lengths.max()))
    starts = np.cumsum(lengths) - lengths
    steps = np.arange(int(lengths.sum()), dtype=np.uint64) - np.repeat(starts, lengths).astype(
        np.uint64
    )
    steps += np.uint64(1)
    steps *= np.uint64(GAMMA)
    steps += np.repeat(keys.astype(np.uint64), lengths)
    return _to_ids(mix_array(steps), space)


def token_ids(
    space: TokenSpace, key: tuple[int | str, ...], length: int, head: int | None = None
) -> np.ndarray:
    """The first `length` tokens of stream `key`; `head`, if given, replaces token 0 (to force
    two pieces to diverge at their first token)."""
    ids = token_block(space, np.array([stream_key(*key)], dtype=np.uint64), length)[0]
    if head is not None and length > 0:
        ids[0] = head
    return ids


def rng(*key: int | str) -> np.random.Generator:
    """A Philox generator keyed by a tuple, for choices that are not token ids."""
    return np.random.Generator(np.random.Philox(key=stream_key(*key)))


def distinct_heads(space: TokenSpace, count: int, *key: int | str) -> np.ndarray:
    """`count` distinct workload ids (first tokens that make pieces diverge immediately)."""
    if count > space.num_workload_ids:
        raise BadInput(
            f"cannot draw {count} distinct first tokens from {space.num_workload_ids} workload ids"
        )
    picks = rng(*key, "heads").choice(space.num_workload_ids, size=count, replace=False)
    return picks.astype(np.int64) + space.first_workload_id


class _SharedInts:
    """One int object per token id, shared by every tuple that `as_tuple` makes."""

    def __init__(self) -> None:
        self.pool = np.empty(0, dtype=object)

    def take(self, ids: np.ndarray) -> tuple[int, ...]:
        if len(ids) == 0:
            return ()
        top = int(ids.max())
        if top >= len(self.pool):
            grown = np.empty(top + 1, dtype=object)
            grown[: len(self.pool)] = self.pool
            grown[len(self.pool) :] = list(range(len(self.pool), top + 1))
            self.pool = grown
        return tuple(self.pool[ids].tolist())  # an object array's tolist keeps its objects


_INTS = _SharedInts()


def as_tuple(ids: np.ndarray) -> tuple[int, ...]:
    """Token ids as a tuple of shared int objects: a whole-trace replay holds ~10^8 tokens, and one
    fresh Python int per token would cost ~54 bytes each instead of an 8-byte pointer."""
    return _INTS.take(np.asarray(ids))


def warmup_requests(
    space: TokenSpace, seed: int, num: int, prompt_len: int, output_len: int
) -> list[Request]:
    """Warm-up requests from a reserved stream: each prompt starts with the warm-up-only id, so no
    workload prompt (which never uses that id, or starts with a special) shares even one token."""
    out = []
    for i in range(num):
        prompt = token_ids(space, (seed, "warmup", i), prompt_len, head=space.warmup_id)
        reply = token_ids(space, (seed, "warmup-output", i), output_len)
        out.append(
            Request(
                request_id=f"warmup-{i}",
                prompt_ids=as_tuple(prompt),
                output_ids=as_tuple(reply),
                tags={"warmup": True},
            )
        )
    return out
