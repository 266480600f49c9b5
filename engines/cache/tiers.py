"""A host-memory KV tier behind a design's device cache: its config, its counters, the capability,
and the log of its transfers (tokens for pricing, copy events for a real executor; docs/tiers.md §7).

`engine.host_tier.tokens` sizes the tier (0: off, the cache is exactly the tier-less class). Each
design brings its own upstream policy (docs/tiers.md): apc follows vLLM's OffloadingConnector and
CPU offloading manager, radix follows SGLang's HiCache. A scheduler asks `isinstance(cache,
HostTier)` and drives the tier through the protocol only.
"""

from __future__ import annotations

from collections.abc import Container, Hashable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from engines.cache.records import PrefixMatch
from engines.errors import BadInput
from engines.sequence import Sequence

# The largest tier accepted: 2**36 tokens (~69 G tokens, TBs of host memory on any model).
MAX_TIER_TOKENS = 1 << 36

# The policies each upstream ships: vLLM 0.33 kv_offload/cpu/policies, SGLang 0.5.23 HiCache.
APC_POLICIES = ("arc", "lru")
RADIX_WRITE_POLICIES = ("write_back", "write_through", "write_through_selective")


@dataclass
class HostTierConfig:
    """`engine.host_tier`: a host tier of `tokens` KV tokens (0 = off).

    apc (vLLM OffloadingConnector): `blocks_per_chunk` device blocks per offloaded chunk (the
    tier's hit granularity), `policy` lru | arc, `store_threshold` sightings of a chunk before it
    is stored, `offload_prompt_only` (store prompt chunks only, upstream's default).
    radix (SGLang HiCache): `write_policy` write_through | write_through_selective | write_back,
    `load_back_threshold` (host hits of at most this many tokens are not loaded back).
    """

    tokens: int = 0
    policy: str = "lru"
    blocks_per_chunk: int = 1
    store_threshold: int = 1
    offload_prompt_only: bool = True
    write_policy: str = "write_through"
    load_back_threshold: int = 10

    @property
    def enabled(self) -> bool:
        return self.tokens > 0


def validate_host_tier(
    tier: HostTierConfig,
    cache: str,
    unit_tokens: int,
    others_knobs: dict[str, tuple[str, ...]],
) -> None:
    """Raise BadInput (one line: what, where, what is allowed) for a tier no design can run.

    cache: the chosen design; unit_tokens: the tokens of one unit of its tier (its registration's
    `tier_unit`); others_knobs: each other design's tier knobs, refused away from their defaults."""
    _int_at_least("tokens", tier.tokens, 0)
    if tier.tokens > MAX_TIER_TOKENS:
        raise BadInput(
            f"engine.host_tier.tokens must be at most {MAX_TIER_TOKENS}, got {tier.tokens}"
        )
    refuse_others_knobs("host_tier", "tier", tier, HostTierConfig(), others_knobs, cache)
    _int_at_least("blocks_per_chunk", tier.blocks_per_chunk, 1)
    _int_at_least("store_threshold", tier.store_threshold, 1)
    _int_at_least("load_back_threshold", tier.load_back_threshold, 0)
    if tier.policy not in APC_POLICIES:
        raise BadInput(
            f"engine.host_tier.policy must be one of {list(APC_POLICIES)}, got {tier.policy!r}"
        )
    if tier.write_policy not in RADIX_WRITE_POLICIES:
        raise BadInput(
            f"engine.host_tier.write_policy must be one of {list(RADIX_WRITE_POLICIES)}, "
            f"got {tier.write_policy!r}"
        )
    if not isinstance(tier.offload_prompt_only, bool):
        raise BadInput(
            f"engine.host_tier.offload_prompt_only must be true or false, "
            f"got {tier.offload_prompt_only!r}"
        )
    if tier.enabled and tier.tokens < unit_tokens:
        raise BadInput(
            f"engine.host_tier.tokens ({tier.tokens}) is smaller than one {cache} tier unit "
            f"({unit_tokens} tokens); use 0 for no tier or at least {unit_tokens}"
        )


def refuse_others_knobs(
    section: str,
    what: str,
    tier: object,
    defaults: object,
    others_knobs: dict[str, tuple[str, ...]],
    cache: str,
) -> None:
    """A knob of another design's tier (`what`: tier, storage tier) set away from its default in
    `engine.<section>` is one BadInput line naming it."""
    for design, names in others_knobs.items():
        for name in names:
            if getattr(tier, name) != getattr(defaults, name):
                raise BadInput(
                    f"engine.{section}.{name} is a knob of the {design} design's {what}, "
                    f"which this run does not use (cache {cache})"
                )


def _int_at_least(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadInput(f"engine.host_tier.{name} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class TierStats:
    """A host tier's cumulative counters, in tokens: lookups past the device hit (`queries`,
    `hits`), tokens stored into and loaded from the tier, tokens evicted from it."""

    queries: int = 0
    hits: int = 0
    stored: int = 0
    loaded: int = 0
    evicted: int = 0


# How a design's upstream overlaps a host-tier load with the forward (the executor prices it):
# vLLM's connector loads before the request is scheduled, so its step waits for the whole load;
# HiCache loads layer by layer, each layer's attention waiting only for that layer's KV.
LOAD_BEFORE_STEP = "before_step"
LOAD_LAYERWISE = "layerwise"


class Transfers(NamedTuple):
    """Tier transfers made since the last `host_take_transfers`, in tokens: loads into the device
    (the request that loads) and stores to the host (the request whose KV it is; None: a write-back
    of evicted device pages, no request's). With a storage tier (docs/tiers.md §10.3) also its
    reads into host memory (the id of the request that will load them) and its writes from host
    memory; both stay empty without one. `storage_ends`: reads whose tier ended them (a timed
    prefetch terminated) after (request, tokens) were read, the rest never read."""

    loads: list[tuple[Sequence, int]]
    stores: list[tuple[Sequence | None, int]]
    storage_reads: tuple[tuple[str, int], ...] = ()
    storage_writes: tuple[int, ...] = ()
    storage_ends: tuple[tuple[str, int], ...] = ()


# What a real executor needs to move real K/V (TransferLog.events; engines/host_pool.py). Slots
# are device token slots (block id * block size + offset), taken when the tier decides, since a
# finished request's or an evicted page's blocks may be handed out again before the copy.
class HostStore(NamedTuple):
    """Copy the K/V at `slots` (unit tokens per key, in key order) to host copies of `keys`;
    `ready`: the K/V is computed already (copy before the next forward, which may overwrite
    freed slots), else the step being planned computes it (copy after its forward)."""

    keys: tuple[Hashable, ...]
    slots: np.ndarray
    ready: bool


class HostLoad(NamedTuple):
    """Copy host copies of `keys` into device `slots`, starting `offset` tokens into the first
    key's unit, for `seq` (before the forward that reads them)."""

    seq: Sequence
    keys: tuple[Hashable, ...]
    offset: int
    slots: np.ndarray


class HostEvict(NamedTuple):
    """The tier dropped these host copies (their host room is free)."""

    keys: tuple[Hashable, ...]


class HostReset(NamedTuple):
    """The tier was cleared."""


class StorageWrite(NamedTuple):
    """Copy the host copies of `keys` to storage (a storage tier's write of host units; storage
    keeps them: neither shipped file backend evicts)."""

    keys: tuple[Hashable, ...]


class StorageRead(NamedTuple):
    """Copy the storage copies of `keys` into new host units (a storage hit brought into the host
    tier before the device loads it)."""

    keys: tuple[Hashable, ...]


HostEvent = HostStore | HostLoad | HostEvict | HostReset | StorageWrite | StorageRead


def held_past_device(device_tokens: int, unit: int, keys: list[Any], held: Container[Any]) -> int:
    """Leading tokens held on the device or in the host tier (HostPrefixPeek): the device's
    `device_tokens`, then the tier's units that continue them from the unit they end in; `keys`
    are the prompt's unit keys in order, `held` the tier's ready ones."""
    start = n = device_tokens // unit
    while n < len(keys) and keys[n] in held:
        n += 1
    return max(device_tokens, n * unit) if n > start else device_tokens


def token_slots(table: list[int], block_size: int, start: int, end: int) -> np.ndarray:
    """Device token slots of tokens [start, end) of a request whose block table is `table`."""
    t = np.arange(start, end, dtype=np.int64)
    return np.asarray(table, dtype=np.int64)[t // block_size] * block_size + t % block_size


@dataclass
class TransferLog:
    """The transfers a tier made since they were last taken (a tiered cache owns one); with
    `events` kept (a real executor asks), also what to copy, in the order it was decided."""

    loads: list[tuple[Sequence, int]] = field(default_factory=list)
    stores: list[tuple[Sequence | None, int]] = field(default_factory=list)
    events: list[HostEvent] | None = None  # None: nobody copies real K/V
    storage_reads: list[tuple[str, int]] = field(default_factory=list)
    storage_writes: list[int] = field(default_factory=list)
    storage_ends: list[tuple[str, int]] = field(default_factory=list)

    def take_events(self) -> list[HostEvent]:
        if self.events is None:
            return []
        out, self.events = self.events, []
        return out

    def load(self, seq: Sequence, tokens: int) -> None:
        self.loads.append((seq, tokens))

    def store(self, seq: Sequence | None, tokens: int) -> None:
        if seq is not None:
            seq.num_host_stored_tokens += tokens
        self.stores.append((seq, tokens))

    def storage_read(self, seq_id: str, tokens: int) -> None:
        """Storage -> host memory, for request `seq_id`'s coming load."""
        self.storage_reads.append((seq_id, tokens))

    def drop_storage_reads(self, seq_id: str) -> None:
        """`seq_id`'s reads not yet taken were called off (nothing of them arrives)."""
        self.storage_reads = [r for r in self.storage_reads if r[0] != seq_id]

    def storage_write(self, tokens: int) -> None:
        """Host memory -> storage (a cascade or backup of host units)."""
        self.storage_writes.append(tokens)

    def storage_end(self, seq_id: str, tokens: int) -> None:
        """`seq_id`'s read, already taken, ends after `tokens` were read (a timed prefetch was
        terminated): nothing waits for it and the rest is not read."""
        self.storage_ends.append((seq_id, tokens))

    def take(self) -> Transfers:
        if not (self.storage_reads or self.storage_writes or self.storage_ends):
            out = Transfers(self.loads, self.stores)  # no storage: as without a tier
        else:
            out = Transfers(
                self.loads,
                self.stores,
                tuple(self.storage_reads),
                tuple(self.storage_writes),
                tuple(self.storage_ends),
            )
            self.storage_reads, self.storage_writes, self.storage_ends = [], [], []
        self.loads, self.stores = [], []
        return out


@runtime_checkable
class HostTier(Protocol):
    """Capability: a host tier behind the device cache (engines/cache/<design>/ implements it with
    its upstream's rules; the scheduler of the same upstream drives it)."""

    def host_lookup(self, seq: Sequence, device_tokens: int) -> int | None:
        """Tokens of `seq` the host tier holds past its first `device_tokens` (the device hit),
        in the tier's unit; None: a chunk it needs is still being written (ask again later)."""
        ...

    def host_load(self, seq: Sequence, device_tokens: int, host_tokens: int) -> None:
        """Account a load of `host_tokens` past the device hit into the device cache (`seq`'s own
        KV on apc; the tree on radix, which makes the match cover them)."""
        ...

    def host_after_schedule(self, scheduled: list[tuple[Sequence, int]]) -> None:
        """A step was planned: each scheduled `seq` will hold KV for its first `n` tokens after it
        (vLLM builds its store jobs here)."""
        ...

    def host_after_step(self, finished: list[Sequence]) -> None:
        """A step ran: transfers it carried complete; `finished` requests have left."""
        ...

    def host_idle(self) -> None:
        """Nothing ran: every transfer in flight completes."""
        ...

    def host_stats(self) -> TierStats: ...

    def host_take_transfers(self) -> Transfers:
        """The loads and stores made since the last call (the executor prices them)."""
        ...

    def host_keep_events(self) -> tuple[int, int]:
        """From now on log copy events (`host_take_events`); returns the tier's (units, tokens a
        unit): the host pool a real executor allocates."""
        ...

    def host_take_events(self) -> list[HostEvent]:
        """The copy events since the last call, in order."""
        ...

    @property
    def host_load_overlap(self) -> str:
        """LOAD_BEFORE_STEP or LOAD_LAYERWISE: how upstream overlaps a load with the forward."""
        ...


@runtime_checkable
class AsyncHostLoad(Protocol):
    """Capability: a host tier whose loads run between steps (vLLM's OffloadingConnector): a
    request with a host hit is admitted holding its blocks but computes nothing until its load is
    done, and the admission keeps free the blocks other prefills in flight still need."""

    def host_admit(
        self,
        seq: Sequence,
        match: PrefixMatch[Any] | None,
        device_tokens: int,
        host_tokens: int,
        whole_sequence_must_fit: bool,
        in_flight: list[Sequence],
    ) -> bool:
        """Adopt `match` (the device hit) and allocate uncached blocks for the `host_tokens` the
        load will write, keeping free what the `in_flight` prefills still need to finish; False
        (nothing changed) when it does not fit. On success the load is started."""
        ...

    def host_load_done(self, seq: Sequence) -> bool:
        """Whether `seq`'s load has completed (its loaded blocks can then be cached)."""
        ...

    def host_busy(self) -> bool:
        """Whether a transfer no admitted request waits on is in flight (a storage tier's
        existence check or promotion into the host tier): the next step advances it."""
        ...

    def host_storage_tokens(self, seq: Sequence) -> int:
        """Of `seq`'s last admitted host hit, the tokens a storage tier supplied (0 without)."""
        ...


@runtime_checkable
class TreeLoadBack(Protocol):
    """Capability: a host tier whose load-back puts the loaded pages in the device tree at
    admission (SGLang 0.5.23's HiCache `init_load_back`, called from the prefill adder), so the
    next request of the same round, and every later round, matches them on the device even
    before the loading request's own insert."""

    def host_load_into_tree(
        self, seq: Sequence, match: PrefixMatch[Any], lock: Any, host_tokens: int
    ) -> tuple[PrefixMatch[Any], Any]:
        """Allocate device slots for the `host_tokens` after `match` (evicting the shortfall),
        insert them into the tree, and move `lock` to the new last node; the match covering the
        device hit and the load, and its lock."""
        ...
