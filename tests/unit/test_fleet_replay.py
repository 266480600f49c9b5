"""The replay that names a missed cache_aware wave's cause (harness/routers/replay.py,
docs/fleet.md §5) searches the arrival orders instead of walking them: it finds what a walk of
every order finds on small waves, and at 16 requests it finds the whole-group swaps a walk of the
first 5,040 orders never reached (they move the wave's first requests), on decisions vllm-router
made and on hand-made ones, and proves a wave no order reproduces `other` without running out of
states."""

from __future__ import annotations

import copy
import itertools
import random

from harness.fleet.approx_tree import ApproxTree, pack, shared_units
from harness.fleet.config import FleetConfig
from harness.fleet.policies import CacheAware, FleetView, Routed
from harness.routers.replay import ARRIVAL, OTHER, TIE, replay, search
from harness.routers.streams import text_stream

WORDS = [f"w{k}" for k in range(40)]


def _twin(n: int, order: list[int] | None) -> CacheAware:
    cfg = FleetConfig(replicas=n, router="cache_aware")
    return CacheAware(cfg, all_tenants=False, cold_least_load=True, order=order)


def _open(twin: CacheAware, ties: list[int], got: int) -> bool:
    """The replay's rule for a tie the twin broke otherwise: no tied worker known before `got`."""
    return got not in twin.order and not any(i in twin.order for i in ties)


def _every_order(twin, wave, actual, n):
    """The replay as it was until 2026-12-07, without its limit: each order of the wave in
    lexicographic order, the first whose decisions are the router's."""
    for k, order in enumerate(itertools.permutations(range(len(wave)))):
        t, loads = copy.deepcopy(twin), [0] * n
        for i in order:
            got = actual[i]
            if t.decide(wave[i], FleetView(list(loads), 1.0)) != got:
                ties = t.ties
                if ties is None or got not in ties or not _open(t, ties, got):
                    break
                t.learn_tie(ties, got)
            t.record(wave[i], got, 1.0)
            loads[got] += 1
        else:
            return (TIE if k == 0 else ARRIVAL), list(order), t.order
    return OTHER, None, None


def _arrived(twin, wave, order, n):
    """The decisions the twin's rule makes when the wave reaches it in `order`."""
    t, loads, actual = copy.deepcopy(twin), [0] * n, [0] * len(wave)
    for i in order:
        actual[i] = t.decide(wave[i], FleetView(list(loads), 1.0))
        t.record(wave[i], actual[i], 1.0)
        loads[actual[i]] += 1
    return actual


def _finishing(twin, wave, n, rng: random.Random):
    """The decisions of a random arrival order in which up to two requests finish before the
    wave has arrived (their worker's load drops): what the twin's rule does not model."""
    t, loads, actual, done = copy.deepcopy(twin), [0] * n, [0] * len(wave), 0
    for i in rng.sample(range(len(wave)), len(wave)):
        actual[i] = t.decide(wave[i], FleetView(list(loads), 1.0))
        t.record(wave[i], actual[i], 1.0)
        loads[actual[i]] += 1
        if done < 2 and rng.random() < 0.4:
            loads[rng.choice([w for w in range(n) if loads[w]])] -= 1
            done += 1
    return actual


def _small_wave(rng: random.Random):
    """A few prompts over a few shared prefixes, a tree of earlier prompts, a known, partly
    known or unknown worker order; the decisions of a real arrival order, or drawn at random."""
    n = rng.choice([2, 3, 4])
    twin = _twin(n, rng.choice([None, rng.sample(range(n), n), [rng.randrange(n)]]))
    prefixes = [" ".join(rng.choices(WORDS, k=rng.choice([2, 6, 12]))) for _ in range(3)]
    for j in range(rng.randint(0, 5)):
        prompt = f"{rng.choice(prefixes)} h {' '.join(rng.choices(WORDS, k=rng.randint(0, 4)))}"
        twin.record(Routed(f"h{j}", prompt), rng.randrange(n), 0.0)
    wave = []
    for j in range(rng.randint(2, 5)):
        head = rng.choice(prefixes) if rng.random() < 0.7 else " ".join(rng.choices(WORDS, k=4))
        wave.append(
            Routed(f"r{j}", f"{head} q {' '.join(rng.choices(WORDS, k=rng.randint(0, 3)))}")
        )
    if rng.random() < 0.5:
        actual = _arrived(twin, wave, rng.sample(range(len(wave)), len(wave)), n)
    else:
        actual = [rng.randrange(n) for _ in wave]
    return twin, wave, actual, n


def test_the_search_finds_what_a_walk_of_every_order_finds():
    """Cause, arrival order (the first in lexicographic order) and the worker order it settles,
    on 300 small waves, about half of them reproduced by no order."""
    rng = random.Random(7)
    causes = set()
    for _ in range(300):
        twin, wave, actual, n = _small_wave(rng)
        want = _every_order(twin, wave, actual, n)
        got = search(twin, wave, actual, n, 1.0)
        assert (got.cause, got.order) == want[:2]
        if got.order is not None:
            assert got.settled == want[2]
        assert not got.exhausted
        causes.add(got.cause)
    assert causes == {TIE, ARRIVAL, OTHER}


def test_the_search_finds_what_a_walk_of_every_order_finds_on_groups():
    """Groups of prompts sharing a long prefix (what the groups, loads and stuck facts of
    harness/routers/wave_shape.py are about), some requests finishing inside the wave."""
    rng = random.Random(11)
    causes = set()
    for k in range(24):
        n = rng.choice([2, 3, 4])
        twin = _twin(n, rng.choice([None, rng.sample(range(n), n)]))
        for req in text_stream(2, 2, seed=100 + k):
            twin.record(req, rng.randrange(n), 0.0)
        wave = text_stream(rng.choice([2, 3]), 3, seed=k)[:6]
        actual = _finishing(twin, wave, n, rng)
        want = _every_order(twin, wave, actual, n)
        got = search(twin, wave, actual, n, 1.0)
        assert (got.cause, got.order) == want[:2] and not got.exhausted
        causes.add(got.cause)
    assert causes == {TIE, ARRIVAL, OTHER}


# vllm-router 0.1.17's decisions for the first wave of 16 (4 groups x 4 text prompts,
# interleaved: scripts/fleet_twin_scores.py --workers 4 --concurrency 16 --cases
# vllm:cache_aware, two router starts over built-in workers, 2026-12-07), with the worker order
# of each start's log: every group's first prompt cold, then its followers where it went
RECORDED = [
    ([0, 1, 2, 3], [0, 2, 3, 1] * 4),
    ([1, 2, 3, 0], [1, 3, 0, 2] * 4),
]


def test_recorded_group_swaps_at_16_are_arrival_order():
    """The twin sends the groups to the workers in the router's order; the router sent three
    of them one place on: the fourth group's first prompt reached it second. A walk of the
    first 5,040 orders moves only the last 7 requests, so it called these 12 misses `other`."""
    wave = text_stream(4, 8)[:16]
    for order, actual in RECORDED:
        twin = _twin(4, order)
        predicted = _arrived(twin, wave, range(16), 4)
        assert predicted == order * 4  # the twin's send-order prediction, as in the run
        assert sum(p != a for p, a in zip(predicted, actual)) == 12
        found = search(twin, wave, actual, 4, 1.0)
        assert found.cause == ARRIVAL and found.order is not None
        assert found.order[:4] == [0, 3, 1, 2] and found.order[4:] == list(range(4, 16))
        assert found.states == 16  # one state per request: no order was tried and dropped
        assert _arrived(twin, wave, found.order, 4) == actual  # the order found reproduces them
        assert replay(twin, wave, actual, 4, 1.0) == (ARRIVAL, order)


def _groups_wave():
    """A tree of 64 earlier prompts over 4 workers, the router's order known (its start log),
    and a wave of 4 new groups x 4 prompts, interleaved."""
    twin = _twin(4, [2, 0, 3, 1])
    for i, req in enumerate(text_stream(8, 8)):
        twin.record(req, i % 4, 0.0)
    return twin, text_stream(4, 4, seed=5)


def test_a_hand_made_group_swap_at_16_is_arrival_order_and_a_full_shuffle_too():
    twin, wave = _groups_wave()
    predicted = _arrived(twin, wave, range(16), 4)
    first, last = predicted[0], predicted[3]
    swapped = [last if p == first else first if p == last else p for p in predicted]
    found = search(twin, wave, swapped, 4, 1.0)
    assert (found.cause, found.order) == (ARRIVAL, [3, 1, 2, 0, *range(4, 16)])
    rng = random.Random(3)
    for _ in range(10):  # any arrival order's decisions: an order is found, one per request
        actual = _arrived(twin, wave, rng.sample(range(16), 16), 4)
        found = search(twin, wave, actual, 4, 1.0)
        assert found.cause in (TIE, ARRIVAL) and found.states == 16
        assert _arrived(twin, wave, found.order, 4) == actual


def test_a_16_wide_wave_no_order_reproduces_is_other_proved_not_cut_short():
    twin, wave = _groups_wave()
    predicted = _arrived(twin, wave, range(16), 4)
    stray = list(predicted)
    stray[15] = (stray[15] + 1) % 4  # a follower on a worker its group never reached
    found = search(twin, wave, stray, 4, 1.0)
    assert found.cause == OTHER and not found.exhausted
    assert replay(twin, wave, stray, 4, 1.0) is None
    cold = [Routed(f"c{i}", f"cold {i} " + " ".join(random.Random(i).choices(WORDS, k=30)))
            for i in range(16)]  # fmt: skip
    # 6 / 4 / 4 / 2 cold prompts: the sixth for worker 0 cannot find it least loaded
    uneven = [0] * 6 + [1] * 4 + [2] * 4 + [3] * 2
    found = search(_twin(4, None), cold, uneven, 4, 1.0)
    assert found.cause == OTHER and not found.exhausted and found.states == 0


def test_a_search_cut_short_says_so():
    twin, wave = _groups_wave()
    actual = _arrived(twin, wave, list(range(16))[::-1], 4)
    found = search(twin, wave, actual, 4, 1.0, max_states=5)
    assert found.cause == OTHER and found.exhausted and found.states == 5


def test_what_the_search_reads_of_the_tree_leaves_it_as_it_is():
    """The tree's copy is a tree of its own with the same contents; a match only looked at
    (`touch=False`) marks nothing, so the worker the next match names is unchanged; `holders`
    names every worker of the deepest node, not only the last to use it."""
    tree = ApproxTree()
    tree.insert(pack([1, 2, 3, 4]), 0, 1.0)
    tree.insert(pack([1, 2, 3, 9]), 1, 2.0)
    tree.insert(pack([1, 2, 3]), 2, 0.5)
    copied = copy.deepcopy(tree)
    copied.insert(pack([7, 7]), 3, 3.0)
    assert 3 not in tree.tenant_size and copied.holders(pack([7, 7])) == (2, frozenset({3}))
    assert tree.holders(pack([1, 2, 3, 5])) == (3, frozenset({0, 1, 2}))
    assert tree.match(pack([1, 2, 3, 5]), 9.0, touch=False) == (3, 1)  # the last user, 2.0
    assert tree.match(pack([1, 2, 3, 4]), 9.0) == (4, 0)  # marks worker 0's path at 9.0
    assert tree.match(pack([1, 2, 3, 5]), 9.5) == (3, 0)
    assert copied.match(pack([1, 2, 3, 5]), 9.5) == (3, 1)  # the copy was not marked
    assert shared_units(pack([1, 2, 3, 4]), pack([1, 2, 9])) == 2
