"""What the replay (harness/routers/replay.py) knows of a cache_aware wave before it searches its
arrival orders, and the facts that let it drop an order early or not try it at all. Every one
holds in every order, so a search using them finds what a walk of every order finds
(tests/unit/test_fleet_replay.py checks it on waves of up to 7).

Within a wave that cannot unbalance the loads (at most `balance_abs_threshold` requests, 64 by
default) every decision is the tree's (its match past the cache threshold: the worker that used
the matched node last) or cold (the least loaded worker, a tie to the first in the router's
order). A request's match is the longest prefix it shares with the tree, which within the wave
only grows. So:

- *cold in every order*: a request sharing at most its threshold with the tree and with every
  other request of the wave;
- *groups*: two requests are in one group when one shares more than its threshold with the
  other; a request of another group never reaches a node deep enough to move a decision, so a
  group is tried alone (cold decisions allowed anywhere) and a wave with a group that fails alone
  is `other`;
- *loads*: a cold decision goes to a least loaded worker, so once the last cold decision still to
  come for worker w would find another worker busier than w can still become, the order is
  dropped (the cold ones: those cold in every order, and the first of each group not started
  whose requests all went to one worker and that the tree before the wave does not place);
- *stuck*: a request whose match is past its threshold, on a node no worker of the router's
  choice holds, stays off it unless a request to come for that worker shares as much;
- *the same to the router*: two requests cold in every order and alone (no other shares more
  than its threshold with them) for one worker; and the requests to come of a group all sent to
  one worker once each matches past its threshold a part held by that worker alone (they go
  there in any order, changing only its load). Of such, only the first is tried next.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.fleet.approx_tree import pack, shared_units
from harness.fleet.policies import CacheAware, FleetView, Routed

GROUP_BUDGET = 200  # states to try one group alone; past it the group is taken as possible


@dataclass
class WaveShape:
    """A wave, the router's decisions and, for a wave that cannot unbalance the loads, what holds
    in every order (the module's docstring); a wider wave's lists stay empty and prune nothing."""

    wave: list[Routed]
    actual: list[int]
    num_workers: int
    now: float
    keys: list[bytes] = field(default_factory=list)  # each request as the tree reads it
    limit: list[float] = field(default_factory=list)  # the units a match must pass to count
    shared: list[list[int]] = field(default_factory=list)  # units each two requests share
    cold: list[bool] = field(default_factory=list)  # cold in every order
    # the request before it that is the same to the router (cold and alone), else itself
    before: list[int] = field(default_factory=list)
    uniform: list[list[int]] = field(default_factory=list)  # groups all sent to one worker
    led: list[list[int]] = field(default_factory=list)  # of those, the tree before places none

    @classmethod
    def of(
        cls, root: CacheAware, wave: Sequence[Routed], actual: Sequence[int], num_workers: int,
        now: float,
    ) -> WaveShape:  # fmt: skip
        """The shape of `wave` over `root` (the twin before the wave, its eviction done)."""
        shape = cls(list(wave), list(actual), num_workers, now)
        if len(wave) <= root.cfg.balance_abs_threshold:
            shape._learn(root)
        return shape

    def _learn(self, root: CacheAware) -> None:
        keys = self.keys = [pack(r.prompt) for r in self.wave]
        limit = self.limit = [root.cfg.cache_threshold * max(len(k) // 4, 1) for k in keys]
        n = len(keys)
        shared = self.shared = [
            [shared_units(a, b) if j != i else 0 for j, b in enumerate(keys)]
            for i, a in enumerate(keys)
        ]
        base = [root.tree.match(k, self.now, touch=False)[0] for k in keys]
        self.cold = [max([base[i], *shared[i]]) <= limit[i] for i in range(n)]
        alone = [self.cold[i] and all(shared[j][i] <= limit[j] for j in range(n)) for i in range(n)]
        self.before = list(range(n))
        for i in range(n):
            same = [
                j for j in range(i) if alone[i] and alone[j] and self.actual[j] == self.actual[i]
            ]
            self.before[i] = same[-1] if same else i
        one_worker = [
            g for g in self.groups() if len(g) > 1 and len({self.actual[i] for i in g}) == 1
        ]
        self.uniform = one_worker
        self.led = [g for g in one_worker if all(base[i] <= limit[i] for i in g)]

    def groups(self) -> list[list[int]]:
        """The requests in groups (the module's docstring), each in send order."""
        n = len(self.keys)
        top = list(range(n))

        def root_of(i: int) -> int:
            while top[i] != i:
                i = top[i]
            return i

        for i in range(n):
            for j in range(i):
                if self.shared[i][j] > min(self.limit[i], self.limit[j]):
                    top[root_of(i)] = root_of(j)
        out: dict[int, list[int]] = {}
        for i in range(n):
            out.setdefault(root_of(i), []).append(i)
        return list(out.values())

    def a_group_fails(self, root: CacheAware) -> bool:
        """Whether the requests of some group reach no order among themselves in which each goes
        where the router sent it, every cold decision allowed to go anywhere."""
        return any(
            len(g) > 1 and not self._alone(root, g, 0, set(), [GROUP_BUDGET]) for g in self.groups()
        )

    def _alone(
        self, twin: CacheAware, group: list[int], placed: int, dead: set[int], budget: list[int]
    ) -> bool:
        """Whether `group` completes from `placed` (a_group_fails); True once over budget."""
        if all(placed >> i & 1 for i in group):
            return True
        budget[0] -= 1
        if budget[0] < 0:
            return True  # not proved impossible
        view = FleetView([0] * self.num_workers, self.now)
        for i in group:
            nxt = placed | 1 << i
            if placed >> i & 1 or nxt in dead:
                continue
            guess = twin.decide(self.wave[i], view, touch=False)
            if twin.ties is None and guess != self.actual[i]:
                continue  # the tree's decision, not the router's
            after = copy.deepcopy(twin)
            after.decide(self.wave[i], view)
            after.record(self.wave[i], self.actual[i], self.now)
            if self._alone(after, group, nxt, dead, budget):
                return True
            dead.add(nxt)
        return False

    def hopeless(self, loads: list[int], placed: int, twin: CacheAware | None = None) -> bool:
        """Whether, the requests of `placed` in and `loads` theirs, a request to come can no
        longer go where the router sent it (*loads*; with `twin`, the state's, *stuck*)."""
        if not self.keys:
            return False
        coming = [0] * self.num_workers
        cold = [0] * self.num_workers  # cold decisions to come, at least, per worker
        for i, w in enumerate(self.actual):
            if not placed >> i & 1:
                coming[w] += 1
                cold[w] += self.cold[i]
        for group in self.led:  # not started: its first to arrive is cold
            if not any(placed >> i & 1 or self.cold[i] for i in group):
                cold[self.actual[group[0]]] += 1
        for w, k in enumerate(cold):
            last = loads[w] + k - 1  # w's load when the last of them arrives, at least
            if k and any(loads[v] + coming[v] < last for v in range(self.num_workers) if v != w):
                return True
        return twin is not None and bool(self.stuck(twin, placed))

    def stuck(self, twin: CacheAware, placed: int) -> set[int]:
        """The requests to come that can never go where the router sent them (*stuck*): a
        request to come for that worker sharing as much frees one, unless it is stuck too."""
        coming = [i for i in range(len(self.keys)) if not placed >> i & 1]
        depth: dict[int, int] = {}
        for r in coming:
            if not self.cold[r]:
                units, held = twin.tree.holders(self.keys[r])
                if held and units > self.limit[r] and self.actual[r] not in held:
                    depth[r] = units
        out = set(depth)
        while freed := {r for r in out if self._freed(r, depth[r], coming, out)}:
            out -= freed
        return out

    def _freed(self, r: int, depth: int, coming: list[int], stuck: set[int]) -> bool:
        return any(
            x != r
            and x not in stuck
            and self.actual[x] == self.actual[r]
            and self.shared[r][x] >= depth
            for x in coming
        )

    def not_next(self, twin: CacheAware, placed: int) -> set[int]:
        """The requests to come that are the same to the router as one tried before them (the
        module's docstring), in `twin`'s state."""
        later = {i for i, b in enumerate(self.before) if b != i and not placed >> b & 1}
        free: list[int] = []
        for group in self.uniform:
            coming = [r for r in group if not placed >> r & 1]
            if all(self._held_by_own(twin, r) for r in coming):
                free += coming
        first: dict[int, int] = {}
        for r in free:  # groups in send order of their first request; free sorted below
            first[self.actual[r]] = min(r, first.get(self.actual[r], r))
        return later | (set(free) - set(first.values()))

    def _held_by_own(self, twin: CacheAware, r: int) -> bool:
        units, held = twin.tree.holders(self.keys[r])
        return units > self.limit[r] and held == {self.actual[r]}
