"""kv_aware seeing host tiers weighs a token by where it is held, as llm-d's precise scorer
weighs a block by its medium (gpu 1.0, cpu 0.8 by default; `fleet.host_tier_weight`). Replica 0
holds a prompt only in its host tier (fillers pushed it off the device), replica 1 holds 250 of
its tokens on the device: at llm-d's 0.8 the device prefix wins, at 1.0 the longer host run does.
The project's references (cached_now) count both media alike."""

from __future__ import annotations

import pytest

from harness.fleet.config import FleetConfig
from harness.fleet.policies import CachedNow, FleetView, KvAware, Routed
from harness.fleet.probe import device_and_host
from tests.tier_streams import Prompts, send, tier_engine

OUT = (101, 102, 103, 104)
# apc: 18 complete 16-token blocks of the 300-token prompt offloaded, 15 of the 250 shared ones
# on replica 1's device; radix (page 1): every token
SPLIT = {"apc": [(0, 288), (240, 0)], "radix": [(0, 300), (250, 0)]}


def _view(cache: str) -> tuple[Routed, FleetView]:
    prompts = Prompts()
    a = prompts.tokens(300)
    host_only, on_device = tier_engine(cache, tokens=4096), tier_engine(cache, tokens=4096)
    send(host_only, "a1", a, OUT)
    for i in range(3):  # push `a` out of the 640-token device into the host tier
        send(host_only, f"f{i}", prompts.tokens(300), OUT)
    send(on_device, "b1", a[:250] + prompts.tokens(50), OUT)
    view = FleetView(loads=[0, 0], caches=[host_only.cache, on_device.cache], host_tiers=True)
    return Routed("a2", a), view


@pytest.mark.parametrize("cache", ["apc", "radix"])
def test_a_host_token_counts_its_medium_weight_in_kv_aware(cache):
    req, view = _view(cache)
    assert device_and_host(req, view) == SPLIT[cache]
    assert KvAware(FleetConfig(router="kv_aware")).choose(req, view) == 1  # llm-d's 0.8
    assert KvAware(FleetConfig(router="kv_aware", host_tier_weight=1.0)).choose(req, view) == 0
    assert CachedNow(FleetConfig(router="cached_now")).choose(req, view) == 0


def test_a_blind_kv_aware_reads_the_device_only():
    req, view = _view("apc")
    blind = FleetView(loads=view.loads, caches=view.caches)
    assert KvAware(FleetConfig(router="kv_aware", host_tier_weight=1.0)).choose(req, blind) == 1
