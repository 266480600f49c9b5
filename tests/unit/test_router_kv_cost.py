"""vllm-router's kv_aware as the twin predicts it (harness/routers/kv_cost.py): each worker's
prefill work queued (new tokens plus those of its requests still before their first token)
times one plus its requests in flight, ties to the router's own order; the wave shapes
tests/live/test_fleet_real.py checks against the router, and decisions the router made
(tests/data/vllm_router_kv_load_waves.json, from its debug log, 2026-12-07)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.fleet.policies import FleetView, Routed
from harness.routers.kv_cost import VllmKvAware

WAVES = Path(__file__).resolve().parents[1] / "data" / "vllm_router_kv_load_waves.json"


def _wave(twin: VllmKvAware, prompt_len: int, cached: list[int], width: int) -> list[int]:
    """`width` requests of one prompt length sent at once, each seeing the ones before in flight."""
    return _sent_at_once(twin, [prompt_len] * width, cached)


def _sent_at_once(twin: VllmKvAware, prompts: list[int], cached: list[int]) -> list[int]:
    twin.begin_wave()
    loads = [0] * twin.n
    picks = []
    for i, length in enumerate(prompts):
        view = FleetView(list(loads), cached=[min(c, length) for c in cached])
        pick = twin.choose(Routed(f"r{i}", tuple(range(length))), view)
        loads[pick] += 1
        picks.append(pick)
    return picks


def test_one_at_a_time_the_fewest_new_tokens_win_and_ties_follow_the_routers_order():
    twin = VllmKvAware(3, order=[2, 0, 1])
    assert _wave(twin, 72, [0, 64, 0], 1) == [1]
    assert _wave(twin, 72, [0, 0, 0], 1) == [2]  # a cold prompt: the start log's first worker
    assert _wave(twin, 72, [64, 0, 64], 1) == [2]  # tied credit: the order again


def test_a_short_prefix_loses_part_of_its_wave_and_a_long_one_keeps_it():
    twin = VllmKvAware(3, order=[1, 2, 0])
    # 16 cached tokens: the owner's second request costs (8 + 8) x 2 = 32, more than a cold
    # worker's 24, so the two others take the next ones (the router's order); then the owner
    # again, the others' costs now (24 + 24) x 2
    assert _wave(twin, 24, [16, 0, 0], 4) == [0, 1, 2, 0]
    assert _wave(twin, 264, [256, 0, 0], 4) == [0, 0, 0, 0]


def test_equal_credit_spreads_least_loaded_first():
    twin = VllmKvAware(3, order=[2, 1, 0])
    assert _wave(twin, 72, [64, 64, 64], 6) == [2, 1, 0, 2, 1, 0]


def test_every_recorded_wave_of_16_is_predicted_in_the_routers_own_order():
    """17 waves of 16 (4 router starts): prefixes of 16 to 96 tokens on one worker, questions
    of one length and of mixed lengths (8 to 120 tokens); a fixed charge per request in flight
    predicted none of the mixed ones whole."""
    recorded = json.loads(WAVES.read_text())["waves"]
    assert len(recorded) == 17
    for wave in recorded:
        twin = VllmKvAware(3, order=wave["order"])
        cached = [wave["prefix"] if w == wave["owner"] else 0 for w in range(3)]
        assert _sent_at_once(twin, wave["prompts"], cached) == wave["workers"], wave["start"]


def test_a_decoding_request_still_weighs_but_its_prefill_no_longer_does():
    """Recorded: requests of one group sent one by one, each once the one before had its first
    token (all still decoding): 48 cached tokens of 56 kept 6 on the owner, whose 7th costs
    8 x 7 = 56, a tie with the cold workers that the router's order gave to worker 0."""
    twin = VllmKvAware(3, order=[0, 2, 1])
    loads = [0, 0, 0]
    picks = []
    for i in range(7):
        twin.begin_wave()  # its first token came back: no prefill of it pending
        pick = twin.choose(
            Routed(f"r{i}", tuple(range(56))), FleetView(list(loads), cached=[0, 48, 0])
        )
        loads[pick] += 1
        picks.append(pick)
    assert picks == [1, 1, 1, 1, 1, 1, 0]


def test_a_new_wave_forgets_the_pending_tokens_and_the_rule_is_recorded():
    twin = VllmKvAware(2, order=[0, 1])
    _wave(twin, 24, [16, 0], 2)
    assert twin.pending != [0, 0]
    twin.begin_wave()
    assert twin.pending == [0, 0]
    assert twin.facts()["worker_order"] == [0, 1]
