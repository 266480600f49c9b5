"""DualMap on hand-made streams: two candidates from two hashes of the prompt's prefix (shared by
prompts with that prefix, spread over the fleet, never both the same replica); the candidate with
the longer cached prefix while its estimated TTFT meets the SLO; else the candidate estimated
sooner (the load fallback); never a replica outside the pair."""

from __future__ import annotations

import random

import pytest

from harness.fleet.config import FleetConfig
from harness.fleet.dualmap import DualMap, DualMapHot
from harness.fleet.policies import FleetView, Routed

# SLO 1 s at 1,000 prefill tokens/s: a candidate is within the SLO with under 1,000 tokens to go
CFG = FleetConfig(
    replicas=8, dualmap_prefix_tokens=16, dualmap_slo_s=1.0, dualmap_prefill_tokens_per_s=1000.0
)


def prompt(group: int, tail: int, prefix: int = 16, tail_len: int = 8) -> list[int]:
    return [1000 * (group + 1) + k for k in range(prefix)] + [7 * tail + k for k in range(tail_len)]


def view(n: int, cached: list[int], pending: list[list[int]] | None = None) -> FleetView:
    """`pending[i]`: the lengths of the prompts in flight at replica i."""
    lengths = pending or [[] for _ in range(n)]
    return FleetView(
        [len(p) for p in lengths], cached=cached, pending=[[[0] * k for k in p] for p in lengths]
    )


def test_candidates_hash_the_prefix_and_spread():
    router = DualMap(CFG)
    pairs = {g: router.candidates(prompt(g, 0), 8) for g in range(200)}
    for g in range(5):  # the tail past the hashed prefix does not move a prompt's pair
        assert all(router.candidates(prompt(g, t), 8) == pairs[g] for t in range(1, 6))
    assert all(a != b for a, b in pairs.values())  # two distinct candidates
    firsts = {a for a, _ in pairs.values()}
    seconds = {b for _, b in pairs.values()}
    assert firsts == seconds == set(range(8))  # both hashes spread over the whole fleet
    # independent hashes: the second is not a function of the first
    by_first: dict[int, set[int]] = {}
    for a, b in pairs.values():
        by_first.setdefault(a, set()).add(b)
    assert all(len(s) > 2 for s in by_first.values())
    assert DualMap(CFG).candidates(prompt(3, 0), 8) == pairs[3]  # deterministic
    assert DualMap(CFG).candidates(prompt(3, 0), 1) == (0, 0)  # one replica: no choice


def test_affinity_wins_within_the_slo_even_when_more_loaded():
    router = DualMap(CFG)
    req = Routed("r", prompt(0, 1))  # 24 tokens
    a, b = router.candidates(req.prompt, 8)
    cached = [0] * 8
    cached[b] = 16  # the second candidate holds the prefix
    pending = [[] for _ in range(8)]
    pending[b] = [300, 300]  # busier than the first, still within the SLO: 608 tokens to go
    assert router.choose(req, view(8, cached, pending)) == b
    assert router.last is not None and router.last.affinity == b and not router.last.fallback


def test_the_slo_fallback_takes_the_candidate_estimated_sooner():
    router = DualMap(CFG)
    req = Routed("r", prompt(0, 1))
    a, b = router.candidates(req.prompt, 8)
    cached = [0] * 8
    cached[b] = 16
    pending = [[] for _ in range(8)]
    pending[b] = [600, 600]  # 1,208 tokens to go at b: 1.208 s, past the 1 s SLO
    pending[a] = [500]  # 524 at a, uncached: within it
    assert router.choose(req, view(8, cached, pending)) == a
    assert router.last is not None and router.last.affinity == b and router.last.fallback
    # both past the SLO: still the sooner one, never a third replica
    pending[a] = [2000]
    assert router.choose(req, view(8, cached, pending)) == b
    assert router.last is not None and not router.last.fallback


def test_a_cold_prompt_takes_the_less_loaded_candidate():
    router = DualMap(CFG)
    req = Routed("r", prompt(5, 0))
    a, b = router.candidates(req.prompt, 8)
    pending = [[] for _ in range(8)]
    pending[a] = [40]
    assert router.choose(req, view(8, [0] * 8, pending)) == b
    pending[b] = [80]
    assert router.choose(req, view(8, [0] * 8, pending)) == a


def test_a_replica_outside_the_pair_is_never_chosen():
    """Unlike kv_aware, the cache of a replica the hashes did not name is not looked at."""
    router = DualMap(CFG)
    rng = random.Random(11)
    for g in range(100):
        req = Routed(f"r{g}", prompt(g, g))
        pair = router.candidates(req.prompt, 8)
        cached = [rng.choice([0, 8, 16, 24]) for _ in range(8)]
        pending = [[rng.randrange(1, 900) for _ in range(rng.randrange(3))] for _ in range(8)]
        assert router.choose(req, view(8, cached, pending)) in pair


def test_a_stream_of_groups_stays_on_each_groups_pair():
    """Requests finishing before the next: each group's prompts go to one of its two candidates,
    the second and later to where the first left the prefix."""
    router = DualMap(CFG)
    held: dict[int, set[int]] = {}  # replica -> groups whose prefix it holds
    for t in range(4):
        for g in range(6):
            req = Routed(f"g{g}t{t}", prompt(g, t))
            cached = [16 if g in held.get(i, set()) else 0 for i in range(8)]
            i = router.choose(req, view(8, cached))
            assert i in router.candidates(req.prompt, 8)
            if t > 0:
                assert g in held.get(i, set())  # affinity: back where the prefix is
            held.setdefault(i, set()).add(g)


def test_dualmap_needs_the_prompts_in_flight():
    with pytest.raises(ValueError, match="prompts in flight"):
        DualMap(CFG).choose(Routed("r", prompt(0, 0)), FleetView([0] * 8, cached=[0] * 8))


def test_a_hot_prefix_is_hashed_whole_and_spreads_only_when_asked():
    """Half the stream shares one prefix: a pair could take only 2/8 of the fleet's work. With
    dualmap_hot (share 0.25) that prefix is hot once it took over a quarter of the recent requests,
    and its prompts then hash whole, onto many pairs; under dualmap all stay on its one pair."""

    def places(hot_share: float) -> set[int]:
        kind = DualMapHot if hot_share else DualMap
        router = kind(
            FleetConfig(replicas=8, dualmap_prefix_tokens=16, dualmap_hot_share=hot_share)
        )
        out: set[int] = set()
        for t in range(200):
            req = Routed(f"r{t}", prompt(0 if t % 2 else 100 + t, t))
            i = router.choose(req, view(8, [0] * 8))
            if t % 2:
                out.add(i)
        return out

    pair = set(DualMap(CFG).candidates(prompt(0, 0), 8))
    assert places(0.0) <= pair
    assert len(places(0.25)) >= 6
    # a cold prefix (1 request in 200) is never hot: its pair is the prefix's
    router = DualMapHot(FleetConfig(replicas=8, dualmap_prefix_tokens=16, dualmap_hot_share=0.25))
    for t in range(100):
        router.choose(Routed(f"h{t}", prompt(0, t)), view(8, [0] * 8))
    cold = Routed("c", prompt(7, 0))
    router.choose(cold, view(8, [0] * 8))
    assert router.last is not None
    assert router.last.candidates == router.candidates(cold.prompt, 8)
    assert router.last.candidates != router.candidates(cold.prompt, 8, hot=True)
