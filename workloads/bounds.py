"""Hit-rate bounds from the token streams alone (docs/benchmarking.md §5.3 and §10).

Requests are replayed one at a time in arrival order (n > 1: each sample is a request). A prompt
is cut into blocks of g tokens, each named by a chained key (a hash of the whole prefix up to the
block's end), and hits its leading blocks up to the first miss. Afterwards the cache holds the
prompt, plus the reply minus its final token for a turn that a later turn names as `after`.

    accounting="engine" (§5.3): full blocks within the first n-1 tokens, g·floor(min(LCP, n-1)/g)
    accounting="trace"  (§10):  every block, the last one partial, no last-token rule
    policy: unbounded (the ideal) | lru | belady (evict the farthest next use, never a block the
    current request needs), at a capacity in blocks
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np

from workloads.bound_caches import POLICIES
from workloads.errors import BadInput
from workloads.progress import progress
from workloads.registry import Registry
from workloads.request import Request
from workloads.tokens import GAMMA, mix_array, stream_key

_BASE = np.uint64(0xD6E8FEB86659FD93)  # odd multiplier of the polynomial prefix hash


class Replay(NamedTuple):
    """What the simulator needs from a request."""

    prompt_ids: np.ndarray
    cached_ids: np.ndarray  # held afterwards: the prompt, or prompt + reply[:-1] for a chained turn
    num_samples: int = 1
    salt: str | None = None  # the request's namespace: its cache salt and LoRA adapter, if any


@dataclass(frozen=True)
class HitBound:
    granularity: int
    policy: str
    capacity_blocks: int | None
    accounting: str
    hit_tokens: int
    prompt_tokens: int
    hit_blocks: int
    total_blocks: int  # ceil(n/g) per prompt and sample
    hit_tokens_per_request: tuple[int, ...]  # the first sample of each request

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def block_hit_rate(self) -> float:
        return self.hit_blocks / self.total_blocks if self.total_blocks else 0.0


@dataclass(frozen=True)
class IdealHitRates:
    by_granularity: dict[int, float]  # g -> token hit rate with an unbounded cache
    bounds: dict[int, HitBound]


def replays(requests: Sequence[Request]) -> list[Replay]:
    return list(iter_replays(requests))


def iter_replays(requests: Sequence[Request]) -> Iterator[Replay]:
    """One request at a time: a whole trace's prompts as int64 arrays at once would be ~1.2 GB."""
    chained = {r.after for r in requests if r.after is not None}
    for r in requests:
        prompt = _int_array(r.prompt_ids)  # an array('i') prompt is read in place, not copied
        cached = prompt
        if r.request_id in chained and r.output_ids:
            cached = np.concatenate([prompt, np.asarray(r.output_ids[:-1], dtype=np.int64)])
        yield Replay(prompt, cached, r.n, namespace(r))


def namespace(r: Request) -> str | None:
    """What separates caches: the salt, and the LoRA adapter (vLLM keys every block of a LoRA
    request with its adapter; SGLang's extra key). None: the global namespace."""
    if r.lora_id is None:
        return r.salt
    return f"{r.salt or ''}|lora:{r.lora_id}"


def _int_array(ids) -> np.ndarray:
    arr = np.asarray(ids)
    return arr if arr.dtype.kind in "iu" else arr.astype(np.int64)


def _as_replays(source: Sequence[Request] | Iterable[Replay]) -> Iterable[Replay]:
    if isinstance(source, Sequence) and source and isinstance(source[0], Request):
        return iter_replays(source)
    return cast(Iterable[Replay], source)  # replays already (or no requests)


# --- block keys --------------------------------------------------------------------------------


class _Hasher:
    """Polynomial prefix hashes H(e) = sum_{i<e} mix(t_i)·B^i mod 2^64 at the block ends e only
    (segment sums, then a cumsum over the segments: the sum is exact modulo 2^64 in any order);
    the key of the block ending at e mixes H(e), e and the salt. mix(t) comes from a table over
    the token ids seen: a gather instead of six passes over every token."""

    TABLE_MAX = 1 << 22  # ids at or above this (or negative) are mixed directly

    def __init__(self) -> None:
        self.powers = np.ones(1, dtype=np.uint64)
        self.table = np.empty(0, dtype=np.uint64)  # mix(t + GAMMA) for t < len(table)

    def _mixed(self, ids: np.ndarray) -> np.ndarray:
        if len(ids) and ids.min() >= 0 and (top := int(ids.max())) < self.TABLE_MAX:
            if top >= len(self.table):
                size = min(max(top + 1, 2 * len(self.table)), self.TABLE_MAX)
                self.table = mix_array(np.arange(size, dtype=np.uint64) + np.uint64(GAMMA))
            # take, not table[ids]: fancy indexing first copies int32 ids to intp (3x slower).
            return self.table.take(ids)
        return mix_array(ids.astype(np.uint64) + np.uint64(GAMMA))

    def hashes_at(self, ids: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """H(e) for each e of `ends` (sorted, distinct, each in 1..len(ids))."""
        if not len(ends):
            return np.empty(0, dtype=np.uint64)
        n = int(ends[-1])
        if len(self.powers) < n:
            self.powers = np.cumprod(
                np.concatenate([[np.uint64(1)], np.full(2 * n, _BASE, dtype=np.uint64)]),
                dtype=np.uint64,
            )
        terms = self._mixed(ids[:n])
        terms *= self.powers[:n]
        if len(ends) * 8 > n:  # short blocks: one cumsum beats many tiny segment sums
            return np.cumsum(terms, dtype=np.uint64, out=terms)[ends - 1]
        starts = np.concatenate([[0], ends[:-1]])
        return np.cumsum(np.add.reduceat(terms, starts, dtype=np.uint64), dtype=np.uint64)

    @staticmethod
    def keys(hashes: np.ndarray, ends: np.ndarray, salt_code: int) -> np.ndarray:
        """Keys of the blocks ending at `ends`, from `hashes` = H at those ends."""
        e = ends.astype(np.uint64)
        return mix_array(hashes ^ (e * np.uint64(GAMMA)) ^ np.uint64(salt_code))


def _engine_ends(n: int, g: int, hit: bool) -> np.ndarray:
    """Full blocks; the hittable ones lie within the first n-1 tokens (the last-token rule)."""
    limit = n - 1 if hit else n
    return np.arange(1, limit // g + 1, dtype=np.int64) * g


def _trace_ends(n: int, g: int, hit: bool) -> np.ndarray:
    """Every block, the last one ending at n."""
    ends = np.arange(g, n + 1, g, dtype=np.int64)
    return np.append(ends, n) if n % g else ends


ACCOUNTINGS: Registry = Registry("bounds accounting")
ACCOUNTINGS.add("engine", _engine_ends)
ACCOUNTINGS.add("trace", _trace_ends)


class _Item(NamedTuple):
    hit_keys: list[int]
    hit_cum_tokens: np.ndarray  # tokens covered by the first k hittable blocks, k = 0..len
    insert_keys: list[int]
    num_samples: int
    num_blocks: int  # ceil(n/g)
    prompt_len: int


def _items(source, granularities: Sequence[int], accounting: str) -> dict[int, list[_Item]]:
    ends_of = ACCOUNTINGS.get(accounting)
    hasher = _Hasher()
    out: dict[int, list[_Item]] = {g: [] for g in granularities}
    total = len(source) if isinstance(source, Sequence) else None
    for rep in progress(_as_replays(source), "bounds: hashing", "req", total=total):
        prompt, cached = _int_array(rep.prompt_ids), _int_array(rep.cached_ids)
        n = len(prompt)
        ends = {g: (ends_of(n, g, True), ends_of(len(cached), g, False)) for g in granularities}
        at = _union([e for pair in ends.values() for e in pair])
        salt = stream_key("salt", rep.salt) if rep.salt is not None else 0
        keys = hasher.keys(hasher.hashes_at(cached, at), at, salt)  # a key depends on its end only
        for g, (hit_ends, insert_ends) in ends.items():
            cum = np.concatenate([[0], hit_ends])
            item = _Item(
                _pick(keys, at, hit_ends),
                cum,
                _pick(keys, at, insert_ends),
                rep.num_samples,
                -(-n // g),
                n,
            )
            out[g].append(item)
    return out


def _is_prefix(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether `a` starts `b` (np.array_equal's generality costs more than the compare here, once
    per request and block list)."""
    return a is b or (len(a) <= len(b) and bool((a == b[: len(a)]).all()))


def _union(arrays: list[np.ndarray]) -> np.ndarray:
    """Sorted distinct values of sorted, distinct `arrays`; usually one array holds all the
    others as its prefix (the hittable blocks start the cached ones)."""
    longest = max(arrays, key=len)
    if all(_is_prefix(a, longest) for a in arrays):
        return longest
    values = np.sort(np.concatenate(arrays))
    return values[np.concatenate([[True], values[1:] != values[:-1]])]


def _pick(keys: np.ndarray, at: np.ndarray, ends: np.ndarray) -> list[int]:
    """The keys of the blocks ending at `ends`, from those at `at` (a superset)."""
    if _is_prefix(ends, at):
        return keys[: len(ends)].tolist()
    return keys[np.searchsorted(at, ends)].tolist()


def _run(
    items: list[_Item], g: int, policy: str, capacity: int | None, accounting: str
) -> HitBound:
    if policy != "unbounded" and (capacity is None or capacity <= 0):
        raise BadInput(f"policy {policy!r} needs a positive capacity in blocks, got {capacity!r}")
    cache = POLICIES.get(policy)(capacity, items)
    hit_tokens = prompt_tokens = hit_blocks = total_blocks = 0
    per_request, t = [], 0
    for item in progress(items, f"bounds: {policy} at g={g}", "req"):
        for sample in range(item.num_samples):
            k = cache.hits(item.hit_keys, t)
            tokens = int(item.hit_cum_tokens[k])
            if sample == 0:
                per_request.append(tokens)
            hit_tokens, hit_blocks = hit_tokens + tokens, hit_blocks + k
            prompt_tokens, total_blocks = (
                prompt_tokens + item.prompt_len,
                total_blocks + item.num_blocks,
            )
            cache.admit(item.insert_keys, t)
            t += 1
    return HitBound(
        g,
        policy,
        capacity,
        accounting,
        hit_tokens,
        prompt_tokens,
        hit_blocks,
        total_blocks,
        tuple(per_request),
    )


def simulate(
    source: Sequence[Request] | Iterable[Replay],
    granularity: int,
    capacities: Sequence[int | None] = (None,),
    policy: str = "lru",
    accounting: str = "engine",
) -> list[HitBound]:
    """One replay per capacity (None = unbounded); the block keys are hashed once."""
    if not isinstance(granularity, int) or granularity <= 0:
        raise BadInput(f"granularity must be a positive integer, got {granularity!r}")
    items = _items(source, [granularity], accounting)[granularity]
    return [
        _run(items, granularity, "unbounded" if c is None else policy, c, accounting)
        for c in capacities
    ]


def ideal_hit_rate(
    source: Sequence[Request] | Iterable[Replay],
    granularities: Sequence[int] = (1, 16, 512),
    accounting: str = "engine",
) -> IdealHitRates:
    """The unbounded-cache hit rate at each granularity (§5.3 theoretical_hit_rate_by_granularity)."""
    gs = sorted(set(granularities))
    if any(not isinstance(g, int) or g <= 0 for g in gs):
        raise BadInput(f"granularities must be positive integers, got {list(granularities)}")
    items = _items(source, gs, accounting)
    bounds = {g: _run(items[g], g, "unbounded", None, accounting) for g in gs}
    return IdealHitRates({g: b.hit_rate for g, b in bounds.items()}, bounds)


def ceiling_hit_tokens(items: list[_Item], g: int) -> tuple[int, int]:
    """(hit tokens, prompt tokens) no run of the stream can beat, in any order, on any number of
    caches of any size: every hittable block (engine accounting) can hit except that each distinct
    one must first be computed by a counted prefill, unless some request makes it for free (a
    prompt's last full block, beyond its hittable range; a chained turn's reply; an n > 1
    request's prompt, which a serving engine may prefill once outside the counted samples)."""
    hittable = prompt = 0
    needed: set[int] = set()
    free: set[int] = set()
    for item in items:
        hittable += item.num_samples * int(item.hit_cum_tokens[-1])
        prompt += item.num_samples * item.prompt_len
        hit = set(item.hit_keys)
        free.update(k for k in item.insert_keys if k not in hit)
        (free if item.num_samples > 1 else needed).update(hit)
    return max(hittable - g * len(needed - free), 0), prompt


def ceiling_tokens(
    source: Sequence[Request] | Iterable[Replay], granularity: int
) -> tuple[int, int]:
    """(hit tokens, prompt tokens) of the order-free ceiling (ceiling_hit_tokens) of a stream."""
    return ceiling_hit_tokens(_items(source, [granularity], "engine")[granularity], granularity)


def ceiling_hit_rate(
    source: Sequence[Request] | Iterable[Replay], granularity: int
) -> float | None:
    """The order-free ceiling (ceiling_hit_tokens) as a token hit rate."""
    hits, prompt = ceiling_tokens(source, granularity)
    return hits / prompt if prompt else None


@dataclass(frozen=True)
class RunBounds:
    ideal: dict[int, float]  # g -> unbounded-cache token hit rate
    capped: dict[str, float]  # policy -> hit rate at the capacity, at `capped_granularity`
    ceiling: float | None = None  # ceiling_hit_tokens at `ceiling_granularity`, when asked


def run_bounds(
    source: Sequence[Request] | Iterable[Replay],
    granularities: Sequence[int],
    capped_granularity: int | None = None,
    capacity_blocks: int | None = None,
    policies: Sequence[str] = ("lru", "belady"),
    accounting: str = "engine",
    ceiling_granularity: int | None = None,
) -> RunBounds:
    """Every reference a run reports, hashing the token streams once: the ideal at each of
    `granularities`, and each of `policies` at `capacity_blocks` blocks of `capped_granularity`
    tokens (which must be one of `granularities`; None skips the capped references), and the
    order-free ceiling at `ceiling_granularity` (one of `granularities`; engine accounting)."""
    gs = sorted(set(granularities))
    if any(not isinstance(g, int) or g <= 0 for g in gs):
        raise BadInput(f"granularities must be positive integers, got {list(granularities)}")
    if not gs:
        return RunBounds({}, {})
    items = _items(source, gs, accounting)
    ideal = {g: _run(items[g], g, "unbounded", None, accounting).hit_rate for g in gs}
    capped = {}
    if capped_granularity is not None:
        capped = {
            p: _run(
                items[capped_granularity], capped_granularity, p, capacity_blocks, accounting
            ).hit_rate
            for p in policies
        }
    ceiling = None
    if ceiling_granularity is not None and accounting == "engine":
        hits, prompt = ceiling_hit_tokens(items[ceiling_granularity], ceiling_granularity)
        ceiling = hits / prompt if prompt else None
    return RunBounds(ideal, capped, ceiling)


def capped_hit_rate(
    source: Sequence[Request] | Iterable[Replay],
    granularity: int,
    capacity_blocks: int,
    policy: str = "lru",
    accounting: str = "engine",
) -> HitBound:
    """The hit rate with a cache of `capacity_blocks` blocks of `granularity` tokens."""
    return simulate(source, granularity, [capacity_blocks], policy, accounting)[0]


def shared_prefix_lens(requests: Sequence[Request]) -> list[int]:
    """Exact tokens each prompt shares with the cacheable content before it (Request's
    shared_prefix_len), for generators that cannot know it by construction."""
    return list(simulate(requests, 1, [None], accounting="trace")[0].hit_tokens_per_request)
