"""A host tier's transfers priced in time (engines/host_link.py, docs/tiers.md §7): vLLM's rule
(the step waits for its loads) and HiCache's (loads stream layer by layer under the forward), the
bytes each way per request, and stores that never delay a step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engines.cache.tiers import LOAD_BEFORE_STEP, LOAD_LAYERWISE, Transfers
from engines.host_link import HostLinkPricing, layered_step_s
from engines.sequence import Sequence
from tests.tier_streams import TICKS, Prompts, send, tier_engine, tiers

# 4 layers x 2 KV heads x 8 dims x 2 bytes x (K and V): 256 bytes a token over a 1 MB/s link
LINK = replace(
    TICKS,
    name="ticks_link",
    num_layers=4,
    num_kv_heads=2,
    head_dim=8,
    kv_bytes_per_element=2.0,
    host_link_bandwidth=1e6,
)
BYTES_PER_TOKEN = 256
OUT = (101, 102, 103, 104)


def seq(rid: str) -> Sequence:
    return Sequence(rid, [1, 2, 3], 3, 4)


def test_the_layer_pipeline_hides_the_shorter_side_but_one_layer():
    assert layered_step_s(compute_s=8.0, load_s=4.0, num_layers=4) == 9.0  # compute + 1 load part
    assert layered_step_s(compute_s=4.0, load_s=8.0, num_layers=4) == 9.0  # load + 1 layer
    assert layered_step_s(compute_s=4.0, load_s=0.0, num_layers=4) == 4.0


def test_before_step_loads_queue_on_the_link_and_the_step_waits_for_all_of_them():
    link = HostLinkPricing(100.0, 2.0, LOAD_BEFORE_STEP, num_layers=4)
    a, b = seq("a"), seq("b")
    step = link.step(0.0, 1.0, Transfers([(a, 100), (b, 50)], []))
    assert (a.host_load_bytes, b.host_load_bytes) == (200, 100)
    assert (a.host_load_s, b.host_load_s) == (2.0, 3.0)  # b waits behind a on the link
    assert step == 4.0
    assert link.figures().load_stall_s == 3.0


def test_layerwise_loads_overlap_the_forward():
    link = HostLinkPricing(100.0, 2.0, LOAD_LAYERWISE, num_layers=4)
    assert link.step(0.0, 8.0, Transfers([(seq("a"), 200)], [])) == 9.0
    assert link.figures().load_stall_s == 1.0


def test_stores_never_delay_a_step_and_their_backlog_is_reported():
    link = HostLinkPricing(100.0, 2.0, LOAD_BEFORE_STEP, num_layers=4)
    assert link.step(0.0, 1.0, Transfers([], [(seq("a"), 150), (None, 50)])) == 1.0  # 4 s
    assert link.step(1.0, 1.0, Transfers([], [])) == 1.0
    figures = link.figures()
    assert (figures.store_bytes, figures.max_store_backlog_s) == (400, 4.0)


@pytest.mark.parametrize(
    ("cache", "host", "bigger"), [("apc", 288, "wait"), ("radix", 299, "pipe")]
)
def test_a_host_hit_costs_its_bytes_over_the_link(cache, host, bigger):
    # The same stream priced with and without the link: only the host hit's TTFT grows.
    ttft = {}
    for hardware in (TICKS, LINK):
        prompts = Prompts()
        # SGLang's non-overlap loop: under overlap a1's finish (its insert and write-through)
        # is processed after its row, so its stores are in the run's figures, not in its row
        # (docs/tiers.md §7)
        engine = tier_engine(cache, tokens=4096, hardware=hardware, plain=True)
        a = prompts.tokens(300)
        send(engine, "a1", a, OUT)
        for i in range(3):
            send(engine, f"f{i}", prompts.tokens(300), OUT)
        rec = send(engine, "a2", a, OUT)
        assert tiers(rec) == (0, host)
        ttft[hardware.name] = rec.first_token_s - rec.arrival_s
        if hardware is LINK:
            load_s = host * BYTES_PER_TOKEN / 1e6
            assert rec.host_load_bytes == host * BYTES_PER_TOKEN
            assert rec.host_load_s == pytest.approx(load_s)
            first = next(r for r in engine.records if r.request_id == "a1")
            assert first.host_store_bytes > 0 and first.host_load_bytes == 0
    extra = ttft["ticks_link"] - ttft["ticks"]
    load_s = host * BYTES_PER_TOKEN / 1e6
    if bigger == "wait":  # vLLM: the whole load before the step
        assert extra == pytest.approx(load_s)
    else:  # HiCache: the load streams under a step of 0.01 s: all but one layer's compute shows
        assert extra == pytest.approx(load_s + 0.01 / 4 - 0.01)
