"""Round robin's worker order learned from waves sent at once: each wave tells which workers took
its slots of the cycle, not in what order; the twin keeps every (order, position) that explains
all waves so far, and its prediction of a wave is learned once they all give it the same
workers (harness/routers/rr_cycles.py, harness/routers/learned.py)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from harness.fleet.policies import FleetView, Routed
from harness.routers.learned import LearnedRoundRobin
from harness.routers.rr_cycles import Cycles, observed


class Router:
    """A round robin over `order` from slot `start`, taking a wave's requests in a random
    arrival order: each request's worker, in send order."""

    def __init__(self, order: list[int], start: int, rng: random.Random) -> None:
        self.order, self.slot, self.rng = order, start, rng

    def wave(self, width: int) -> list[int]:
        slots = [self.order[(self.slot + k) % len(self.order)] for k in range(width)]
        self.rng.shuffle(slots)  # the arrival order: the k-th to arrive takes the k-th slot
        self.slot += width
        return slots

    def future(self) -> list[int]:
        return [self.order[(self.slot + k) % len(self.order)] for k in range(len(self.order))]


def _wave(twin: LearnedRoundRobin, actuals: list[int]) -> tuple[bool, list[int]]:
    """(learned, predicted workers in send order) of one wave, then the twin taught it."""
    learned = twin.certain_for(len(actuals))
    predicted = [twin.choose(Routed(f"r{k}", "p"), FleetView([0] * twin.n)) for k in actuals]
    if len(actuals) == 1:
        twin.learn(actuals[0])
    else:
        twin.learn_wave(actuals)
    return learned, predicted


def test_a_wave_is_keyed_by_its_workers_beyond_whole_turns():
    assert observed(3, [2, 0]) == 0b101
    assert observed(3, [0, 1, 2, 1]) == 0b010  # one turn, then worker 1
    assert observed(3, [0, 0]) is None  # worker 0 twice within a turn: not round robin
    assert observed(4, [0, 1, 2, 0, 1, 2]) is None  # a turn short of worker 3
    assert Cycles.every(3).window(0, 6).tolist() == [0] * 6  # whole turns tell nothing
    assert len(Cycles.every(8)) == 40_320


def test_hand_made_waves_at_3_workers():
    """Order 2, 0, 1: the warm-up goes to 2, so a wave of 2 takes {0, 1} whatever order remains
    (learned); the next wave of 2 takes {2, x}: two orders disagree (a guess), and its answer
    leaves one."""
    twin = LearnedRoundRobin(3)
    assert _wave(twin, [2]) == (False, [0])  # the warm-up: anything goes; the lowest is guessed
    assert len(twin.cycles) == 2
    learned, predicted = _wave(twin, [1, 0])
    assert learned and sorted(predicted) == [0, 1]
    assert len(twin.cycles) == 2  # {0, 1} in either order
    learned, predicted = _wave(twin, [0, 2])  # slots 3 and 4: 2 then 0
    assert not learned and sorted(predicted) == [0, 2]  # the lowest order, 2 0 1, guessed right
    assert twin.complete and twin.order == [2, 0, 1]
    assert twin.facts() == {
        "worker_order": [2, 0, 1],
        "order_source": "waves",
        "order_candidates": 1,
        "wave_widths": [1, 2],
        "waves_taught": 3,
        "learned_after_waves": 3,
        "position_lost": 0,
    }
    assert _wave(twin, [1, 2]) == (True, [1, 2])  # slots 5 and 6, in send order as it happens


def test_waves_at_4_workers_of_2_tell_the_pairs_only():
    """Waves of 2 after a warm-up of 1 at 4 workers cover slots (1, 2), (3, 0), (1, 2), ...: the
    first tells the pair (3, 0) too, the order within each pair is never told, and need not be:
    every later wave is predicted."""
    twin = LearnedRoundRobin(4)
    router = Router([3, 1, 0, 2], 0, random.Random(1))
    _wave(twin, router.wave(1))
    for _ in range(6):
        _wave(twin, router.wave(2))
    assert twin.certain_for(2) and not twin.complete
    assert twin.order == [3]  # slot 1 is 1 or 0: waves of 2 cannot tell
    assert twin.facts()["learned_after_waves"] == 2  # the warm-up and the first wave of 2
    assert twin.facts()["order_candidates"] == 2


@pytest.mark.parametrize("n", [3, 4, 8])
@pytest.mark.parametrize("width", [2, 4, 16])
def test_simulated_waves_keep_the_true_cycle_and_score_only_right_workers(n: int, width: int):
    """Random orders, start slots and arrival orders: the router's own future stays a candidate,
    every wave predicted as learned gets the router's workers (its per-request misses are arrival
    order alone), and once settled every later wave is learned."""
    rng = random.Random(n * 100 + width)
    for _ in range(6):
        order = rng.sample(range(n), n)
        router = Router(order, rng.randrange(n), rng)
        twin = LearnedRoundRobin(n)
        _wave(twin, router.wave(1))  # the warm-up, as drive_router sends it
        guesses = 0
        for _ in range(2 * n + 2):
            actuals = router.wave(width)
            settled = twin.learned_after
            learned, predicted = _wave(twin, actuals)
            assert router.future() in twin.cycles.rows.tolist()
            if learned:
                assert Counter(predicted) == Counter(actuals)
            else:
                assert settled is None  # once settled, never a guess again
                guesses += 1
        assert twin.certain_for(width)  # learned by then at every size and width here
        last = twin.facts()["learned_after_waves"]
        assert isinstance(last, int) and last <= guesses + 2  # the warm-up, the guesses, one more
        assert twin.facts()["position_lost"] == 0
        if width % n == 0:  # whole turns: every wave is each worker width / n times
            assert guesses == 0


@pytest.mark.parametrize("n", [3, 4, 8])
def test_one_at_a_time_leaves_a_guess_per_unseen_slot_but_the_last(n: int):
    rng = random.Random(n)
    order = rng.sample(range(n), n)
    router = Router(order, rng.randrange(n), rng)
    twin = LearnedRoundRobin(n)
    _wave(twin, router.wave(1))
    guesses = 0
    for _ in range(3 * n):
        actual = router.wave(1)
        learned, predicted = _wave(twin, actual)
        guesses += not learned
        assert not learned or predicted == actual
    assert guesses == max(n - 2, 0)
    first = order.index(router.order[(router.slot - 3 * n - 1) % n])
    assert twin.facts() == {
        "worker_order": order[first:] + order[:first],
        "order_source": "decisions",
    }


def test_a_wave_no_candidate_explains_resynchronises_on_the_orders_held():
    """A router whose position moved without us (a turn spent before the warm-up, as
    vllm-router's round robin did): the order is kept, the position found again."""
    twin = LearnedRoundRobin(3, [0, 1, 2])
    _wave(twin, [1])  # the order's first slot was 0: the position moved
    assert twin.complete and twin.order == [0, 1, 2]
    assert _wave(twin, [0, 2]) == (True, [2, 0])
    assert _wave(twin, [1, 2]) == (True, [1, 2])
