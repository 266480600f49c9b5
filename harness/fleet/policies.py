"""Router policies: which replica serves a request. All registered in ROUTERS at the bottom.

A router sees the request (`Routed`) and the fleet as a router can (`FleetView`): its own count
of requests in flight per replica (what both real routers call a worker's load), the run clock,
and, for the precise policies only, each replica's real cache. docs/fleet.md §2 cites the
upstream file and version each policy is described from.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections.abc import Callable
from collections.abc import Sequence as Ids
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from engines.cache.protocol import PrefixCache
from engines.registry import Registry
from harness.fleet.approx_tree import ApproxTree, pack
from harness.fleet.config import FleetConfig
from harness.fleet.dualmap import DualMap, DualMapHot
from harness.fleet.furc import ring_point
from harness.fleet.probe import device_and_host, truly_cached


@dataclass(frozen=True)
class Routed:
    """What a router reads of a request: its id, prompt (token ids, or text before a real
    router) and the session it belongs to (the routing key of consistent_hash)."""

    request_id: str
    prompt: Ids[int] | str
    session_id: str | None = None
    salt: str | None = None
    lora_id: str | None = None


@dataclass
class FleetView:
    """The fleet as the router sees it at one decision."""

    loads: list[int]  # requests in flight per replica (the router's own count)
    now_s: float = 0.0
    caches: list[PrefixCache] | None = None  # real cache state (PRECISE routers only)
    # Or, for workers in other processes, each one's cached prefix of this request in tokens, as
    # their KV events tell it (harness/routers/kv_index.py)
    cached: list[int] | None = None
    # The prompts in flight at each replica (PENDING routers only)
    pending: list[list[Ids[int]]] | None = None
    # With `caches`: count what each replica's host tier holds past its device prefix
    # (fleet.index_host_tier; the HostPrefixPeek capability)
    host_tiers: bool = False

    @property
    def num_replicas(self) -> int:
        return len(self.loads)


class Router(Protocol):
    def choose(self, req: Routed, view: FleetView) -> int: ...

    def reset(self) -> None:
        """Forget every past decision (a flushed fleet)."""
        ...


def least_loaded(loads: list[int], among: Ids[int] | None = None) -> int:
    """The replica with the fewest requests in flight (lowest index on a tie)."""
    idx = range(len(loads)) if among is None else among
    return min(idx, key=lambda i: (loads[i], i))


class RoundRobin:
    """Each request to the next replica in turn (both routers' `round_robin`)."""

    def __init__(self, cfg: FleetConfig) -> None:
        self.next = 0

    def choose(self, req: Routed, view: FleetView) -> int:
        i = self.next % view.num_replicas
        self.next = i + 1
        return i

    def reset(self) -> None:
        self.next = 0


class Random:
    """A uniformly random replica from the router's own seeded generator."""

    def __init__(self, cfg: FleetConfig) -> None:
        self.seed = cfg.seed
        self.rng = random.Random(cfg.seed)

    def choose(self, req: Routed, view: FleetView) -> int:
        return self.rng.randrange(view.num_replicas)

    def reset(self) -> None:
        self.rng = random.Random(self.seed)


class LeastLoad(Random):
    """The replica with the fewest requests in flight."""

    def choose(self, req: Routed, view: FleetView) -> int:
        return least_loaded(view.loads)


class PowerOfTwo(Random):
    """Two distinct replicas drawn at random, the less loaded one taken (the first on a tie)."""

    def choose(self, req: Routed, view: FleetView) -> int:
        if view.num_replicas == 1:
            return 0
        a, b = self.rng.sample(range(view.num_replicas), 2)
        return b if view.loads[b] < view.loads[a] else a


def ring_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class ConsistentHash:
    """vllm-router's `consistent_hash`: `virtual_nodes` points per worker on a hash ring; a
    request goes to the first point clockwise of its key's hash. The key is the session id, else
    a hash of the prompt (vllm-router falls back to hashing the body). Adding a worker moves only
    the keys that land on its new points. Given the real workers' URLs (`names`), the ring and
    the key are vllm-router's own (harness/fleet/furc.py), so a session lands where it does."""

    def __init__(self, cfg: FleetConfig, names: list[str] | None = None) -> None:
        self.virtual_nodes = cfg.virtual_nodes
        self.names = names
        self._ring: list[tuple[int, int]] = []
        self._n = -1

    def _build(self, n: int) -> None:
        if self.names is not None:  # vllm-router's points: f"{url}:{i}" under its ring hash
            points = [
                (ring_point(f"{u}:{v}"), i)
                for i, u in enumerate(self.names[:n])
                for v in range(self.virtual_nodes)
            ]
        else:
            points = [
                (ring_hash(f"replica-{i}#{v}"), i)
                for i in range(n)
                for v in range(self.virtual_nodes)
            ]
        self._ring = sorted(points)
        self._points = [h for h, _ in self._ring]
        self._n = n

    def choose(self, req: Routed, view: FleetView) -> int:
        if view.num_replicas != self._n:
            self._build(view.num_replicas)
        if self.names is not None and req.session_id is not None:
            # vllm-router keys a request by its X-Session-ID header (src/policies/hash_key.rs)
            point = ring_point(f"header:x-session-id:{req.session_id}")
        else:
            key = req.session_id if req.session_id is not None else _prompt_digest(req.prompt)
            point = ring_hash(key)
        at = bisect.bisect_left(self._points, point) % len(self._ring)
        return self._ring[at][1]

    def reset(self) -> None:
        """Nothing to forget: the ring depends on the workers alone."""


def _prompt_digest(prompt: Ids[int] | str) -> str:
    data = prompt.encode() if isinstance(prompt, str) else pack(prompt)
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class CacheAware:
    """sglang-router's `cache_aware`: with loads imbalanced (max - min > balance_abs_threshold and
    max > min x balance_rel_threshold) the least loaded worker; else the worker the approximate
    tree matches best when matched / prompt > cache_threshold, else the worker holding the
    smallest tree. The prompt is inserted under the chosen worker either way; the tree is trimmed
    to max_tree_size per worker every eviction_interval_s."""

    def __init__(
        self,
        cfg: FleetConfig,
        all_tenants: bool = True,
        cold_least_load: bool = False,
        order: Ids[int] | None = None,
    ) -> None:
        self.cfg = cfg
        self.tree = ApproxTree()
        self._last_eviction_s = 0.0
        # False: a worker enters the tree only when a request is routed to it, as observed of
        # both real routers behind workers registered at start-up (docs/fleet.md §5)
        self.all_tenants = all_tenants
        # True: a prompt below the cache threshold goes to the least loaded worker, a tie to the
        # first of them in the router's own worker order (`order`), as both real routers were
        # observed to do (docs/fleet.md §5); False: the smallest tree, as upstream's code reads
        self.cold_least_load = cold_least_load
        # the router's worker order as far as it is known (a real router's start log, or learned
        # from its tie decisions: `learn_tie`); workers not in it come after, by index
        self.order: list[int] = list(order or [])
        self.ties: list[int] | None = None  # the tied workers of the last cold decision

    def choose(self, req: Routed, view: FleetView) -> int:
        choice = self.decide(req, view)
        self.record(req, choice, view.now_s)
        return choice

    def decide(self, req: Routed, view: FleetView, touch: bool = True) -> int:
        """The worker for `req`, no prompt inserted (the routing twin records the worker the
        real router chose instead); the matched path marked used, as the router's match does
        (`touch=False`: not, for a decision only looked at)."""
        cfg, loads = self.cfg, view.loads
        self.ties = None
        if self.all_tenants:
            for i in range(view.num_replicas):
                self.tree.add_tenant(i)
        self._maybe_evict(view.now_s)
        hi, lo = max(loads), min(loads)
        if hi - lo > cfg.balance_abs_threshold and hi > lo * cfg.balance_rel_threshold:
            return least_loaded(loads)
        key = pack(req.prompt)
        matched, tenant = self.tree.match(key, view.now_s, touch)
        if tenant is not None and matched / max(len(key) // 4, 1) > cfg.cache_threshold:
            return tenant
        if self.cold_least_load:
            self.ties = [i for i in range(view.num_replicas) if loads[i] == lo]
            return min(self.ties, key=self._rank)
        sizes = self.tree.tenant_size
        return min(list(sizes or range(view.num_replicas)), key=lambda i: (sizes.get(i, 0), i))

    def _rank(self, worker: int) -> tuple[int, int]:
        known = self.order.index(worker) if worker in self.order else len(self.order)
        return (known, worker)

    def learn_tie(self, ties: Ids[int], actual: int) -> None:
        """The router broke a tie among `ties` for `actual`: it comes before the others in its
        order (moved there when the order held it later, as a guess may have placed it)."""
        if actual not in ties:
            return  # the router saw other loads (arrival order): nothing about its order
        others = [self.order.index(i) for i in ties if i != actual and i in self.order]
        if actual in self.order:
            if not others or self.order.index(actual) < min(others):
                return
            self.order.remove(actual)
            others = [self.order.index(i) for i in ties if i != actual and i in self.order]
        self.order.insert(min(others) if others else len(self.order), actual)

    def record(self, req: Routed, choice: int, now_s: float) -> None:
        """The prompt goes into the tree under the worker that took it."""
        self.tree.insert(pack(req.prompt), choice, now_s)

    def _maybe_evict(self, now_s: float) -> None:
        if now_s - self._last_eviction_s >= self.cfg.eviction_interval_s:
            self.tree.evict(self.cfg.max_tree_size)
            self._last_eviction_s = now_s

    def reset(self) -> None:
        self.tree = ApproxTree()
        self._last_eviction_s = 0.0


class KvAware:
    """Precise prefix routing (llm-d's precise prefix-cache scorer, vllm-router's `kv_aware`):
    each replica scored from its real cache state, prefix_weight x cached fraction minus
    load_weight x its share of the largest load; the best score, then the less loaded, wins.
    Seeing host tiers, a token held only in one counts `fleet.host_tier_weight` of a device
    token, as llm-d weighs a block by its medium."""

    def __init__(self, cfg: FleetConfig) -> None:
        self.cfg = cfg

    def weighted_cached(self, req: Routed, view: FleetView) -> list[float]:
        """Each replica's cached prefix in device-token equivalents."""
        if not view.host_tiers:
            return [float(n) for n in truly_cached(req, view)]
        w = self.cfg.host_tier_weight
        return [device + w * host for device, host in device_and_host(req, view)]

    def choose(self, req: Routed, view: FleetView) -> int:
        cached = self.weighted_cached(req, view)
        n_tokens = max(len(req.prompt), 1)
        top = max(max(view.loads), 1)

        def score(i: int) -> tuple[float, int, int]:
            s = self.cfg.prefix_weight * cached[i] / n_tokens
            s -= self.cfg.load_weight * view.loads[i] / top
            return (-s, view.loads[i], i)

        return min(range(view.num_replicas), key=score)

    def reset(self) -> None:
        """Stateless: the caches are the state."""


class CachedNow(KvAware):
    """The longest prefix cached *now* (named `ideal` before 2026-12: it is no bound): among
    replicas under the load cap (in flight < load_cap x the fleet's mean after this request, plus
    one), the one truly holding the longest prefix at decision time; on a tie the less loaded,
    then the one sent the fewest prompt tokens so far (room for a new prefix: the smallest-tree
    rule of cache_aware, which a greedy longest-prefix rule otherwise lacks). In a burst every
    cache is still empty, so it spreads like round robin (docs/fleet.md §2)."""

    capped = True

    def __init__(self, cfg: FleetConfig) -> None:
        super().__init__(cfg)
        self.routed_tokens: dict[int, int] = {}

    def held(self, req: Routed, view: FleetView) -> list[int]:
        return truly_cached(req, view)

    def choose(self, req: Routed, view: FleetView) -> int:
        cached = self.held(req, view)
        eligible: Ids[int] = range(view.num_replicas)
        if self.capped:
            cap = self.cfg.load_cap * (sum(view.loads) + 1) / view.num_replicas + 1
            eligible = [i for i, load in enumerate(view.loads) if load < cap] or [
                least_loaded(view.loads)
            ]
        sent = self.routed_tokens
        choice = min(eligible, key=lambda i: (-cached[i], view.loads[i], sent.get(i, 0), i))
        sent[choice] = sent.get(choice, 0) + len(req.prompt)
        return choice

    def reset(self) -> None:
        self.routed_tokens = {}


class Oracle(CachedNow):
    """An online oracle: what each replica will hold when this request's prefill starts, its
    cache now plus the prompts in flight there (queued or running ahead of it, so prefilled by
    then), the longest such prefix winning; tie-breaks as cached_now, no load cap. It knows no
    future request: an online router with perfect knowledge of the present."""

    capped = False

    def held(self, req: Routed, view: FleetView) -> list[int]:
        cached = list(truly_cached(req, view))
        if view.pending is None or isinstance(req.prompt, str):
            raise ValueError("the oracle needs each replica's prompts in flight")
        prompt = np.asarray(req.prompt)
        for i, prompts in enumerate(view.pending):
            for other in prompts:
                cached[i] = max(cached[i], _common_prefix(prompt, other))
        return cached


class OracleCapped(Oracle):
    """The online oracle under cached_now's load cap (`load_cap`)."""

    capped = True


def _common_prefix(a: np.ndarray, b: Ids[int]) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != np.asarray(b[:n]))
    return int(differ[0]) if len(differ) else n


# registry: every router policy (name -> factory taking the fleet config)
ROUTERS: Registry[Callable[[FleetConfig], Router]] = Registry("fleet router")
ROUTERS.add("round_robin", RoundRobin)
ROUTERS.add("random", Random)
ROUTERS.add("least_load", LeastLoad)
ROUTERS.add("power_of_two", PowerOfTwo)
ROUTERS.add("consistent_hash", ConsistentHash)
ROUTERS.add("cache_aware", CacheAware)
ROUTERS.add("kv_aware", KvAware)
ROUTERS.add("cached_now", CachedNow)
ROUTERS.add("oracle", Oracle)
ROUTERS.add("oracle_capped", OracleCapped)
ROUTERS.add("dualmap", DualMap)
ROUTERS.add("dualmap_hot", DualMapHot)

# read the replicas' real caches
PRECISE = ("kv_aware", "cached_now", "oracle", "oracle_capped", "dualmap", "dualmap_hot")
PENDING = (
    "oracle",
    "oracle_capped",
    "dualmap",
    "dualmap_hot",
)  # read the prompts in flight at each replica too
