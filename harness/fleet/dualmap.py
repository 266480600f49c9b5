"""DualMap (Yuan et al., arXiv 2602.06502, ICLR 2026): two candidate replicas per request from two
independent hashes of the prompt's prefix, the better one chosen at decision time.

Prompts sharing a prefix map to the same pair (cache affinity); distinct prefixes spread over the
fleet, and each request still has two choices (the power of two choices). Here: the candidate
holding the longer cached prefix, unless its estimated TTFT misses the SLO, then the candidate
estimated sooner. `dualmap_hot` (DualMapHot) also hashes a prefix too hot for one pair whole.
The paper's hotspot migration and ring scaling are not modelled (docs/fleet.md §2).
"""

from __future__ import annotations

import bisect
import hashlib
from collections import Counter, deque
from collections.abc import Iterator
from collections.abc import Sequence as Ids
from typing import TYPE_CHECKING, NamedTuple

from harness.fleet.approx_tree import pack
from harness.fleet.config import FleetConfig
from harness.fleet.probe import cached_at

if TYPE_CHECKING:  # policies.py registers this router
    from harness.fleet.policies import FleetView, Routed

HASHES = (b"dualmap-1", b"dualmap-2")  # blake2b personalisations: two independent hash functions
HOT_WINDOW = 512  # requests over which a prefix's share is counted (dualmap_hot_share)
HOT_MIN = 64


class Pick(NamedTuple):
    """One decision and why: the two candidates, the affinity pick and whether the SLO fallback
    overrode it."""

    candidates: tuple[int, int]
    affinity: int
    fallback: bool
    choice: int


class DualMap:
    """Candidates from two hash rings (`virtual_nodes` points per replica each, so a replica that
    joins moves only keys onto itself, as the paper's dual hash ring); the second is the next
    distinct replica on ring two when both hashes name the same one."""

    splits_hot = False  # dualmap_hot: a hot prefix's prompts are hashed whole

    def __init__(self, cfg: FleetConfig) -> None:
        self.cfg = cfg
        self._rings: tuple[list[tuple[int, int]], ...] = ()
        self._points: tuple[list[int], ...] = ()
        self._n = -1
        self.last: Pick | None = None  # the last decision, for tests and traces
        self._recent: deque[bytes | str] = deque()  # the hashed prefixes of recent requests
        self._seen: Counter[bytes | str] = Counter()

    def _build(self, n: int) -> None:
        rings = tuple(
            sorted(
                (_hash(f"replica-{i}#{v}".encode(), person), i)
                for i in range(n)
                for v in range(self.cfg.virtual_nodes)
            )
            for person in HASHES
        )
        self._rings = rings
        self._points = tuple([h for h, _ in ring] for ring in rings)
        self._n = n

    def candidates(self, prompt: Ids[int] | str, n: int, hot: bool = False) -> tuple[int, int]:
        """The two replicas the prompt's first `dualmap_prefix_tokens` tokens hash to (`hot`:
        its whole prompt, so a hot prefix's requests spread over many pairs)."""
        if n != self._n:
            self._build(n)
        head = prompt if hot else prompt[: self.cfg.dualmap_prefix_tokens]
        key = head.encode() if isinstance(head, str) else pack(head)
        first = next(self._walk(0, _hash(key, HASHES[0])))
        second = next((i for i in self._walk(1, _hash(key, HASHES[1])) if i != first), first)
        return first, second

    def _walk(self, ring: int, point: int) -> Iterator[int]:
        """The replicas clockwise from `point` on ring `ring`, the first at or after it."""
        at = bisect.bisect_left(self._points[ring], point)
        owners = self._rings[ring]
        return (owners[(at + k) % len(owners)][1] for k in range(len(owners)))

    def choose(self, req: Routed, view: FleetView) -> int:
        self.last = self.decide(req, view)
        return self.last.choice

    def decide(self, req: Routed, view: FleetView) -> Pick:
        pair = self.candidates(req.prompt, view.num_replicas, self._hot(req.prompt))
        cached = dict(zip(pair, cached_at(req, view, pair)))
        est = {i: self.estimated_ttft_s(i, req, cached[i], view) for i in pair}
        # affinity: the longer cached prefix; then the sooner, the less loaded, the first hash's
        affinity = min(pair, key=lambda i: (-cached[i], est[i], view.loads[i], pair.index(i)))
        if est[affinity] <= self.cfg.dualmap_slo_s:
            return Pick(pair, affinity, False, affinity)
        sooner = min(pair, key=lambda i: (est[i], view.loads[i], i != affinity))
        return Pick(pair, affinity, sooner != affinity, sooner)

    def estimated_ttft_s(self, i: int, req: Routed, cached: int, view: FleetView) -> float:
        """The router's estimate of this request's TTFT at replica i: the prompt tokens in flight
        there (an upper bound on what it still has to prefill) plus this request's uncached
        tokens, at the assumed prefill rate."""
        if view.pending is None:
            raise ValueError("dualmap needs each replica's prompts in flight")
        ahead = sum(len(p) for p in view.pending[i])
        own = max(len(req.prompt) - cached, 0)
        return (ahead + own) / self.cfg.dualmap_prefill_tokens_per_s

    def _hot(self, prompt: Ids[int] | str) -> bool:
        """Whether the prompt's hashed prefix took more than `dualmap_hot_share` of the last
        `HOT_WINDOW` requests (counting this one; at least HOT_MIN counted); never for `dualmap`."""
        if not self.splits_hot:
            return False
        head = prompt[: self.cfg.dualmap_prefix_tokens]
        key = head if isinstance(head, str) else pack(head)
        if len(self._recent) == HOT_WINDOW:
            old = self._recent.popleft()
            self._seen[old] -= 1
        self._recent.append(key)
        self._seen[key] += 1
        # counted over at least HOT_MIN requests: a run's first requests are not all hot
        return self._seen[key] > self.cfg.dualmap_hot_share * max(len(self._recent), HOT_MIN)

    def reset(self) -> None:
        """The rings depend on the replicas alone; the recent prefixes are forgotten."""
        self._recent.clear()
        self._seen.clear()


def _hash(data: bytes, person: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, person=person).digest(), "big")


class DualMapHot(DualMap):
    """`dualmap_hot`: DualMap whose prompts of a hot prefix (over `dualmap_hot_share` of the last
    HOT_WINDOW requests) are hashed whole, so they spread over many pairs instead of overloading
    one: our stand-in for the paper's adaptive prefix length, whose rule we could not read."""

    splits_hot = True
