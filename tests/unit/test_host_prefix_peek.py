"""The HostPrefixPeek capability: what a replica's device and host tier hold together, read
without a trace (docs/fleet.md §2, `fleet.index_host_tier`). A prompt pushed out of a 640-token
device by fillers is still in the host tier: the device probe reads 0, the host-aware one its
whole stored part, and probing changes none of what the next admission of it finds."""

from __future__ import annotations

import pytest

from engines.cache.protocol import HostPrefixPeek
from harness.fleet.probe import cached_prefix_tokens
from tests.tier_streams import Prompts, send, tier_engine, tiers

OUT = (101, 102, 103, 104)
# apc: 18 complete 16-token blocks of 300 are offloaded; radix (page 1): every token is written
# to the host; admission caps both below the prompt's last token
HELD = {"apc": 288, "radix": 300}
HIT = {"apc": 288, "radix": 299}


def _evicted(cache: str, probe: bool) -> tuple[object, tuple[int, ...]]:
    prompts = Prompts()
    engine = tier_engine(cache, tokens=4096)
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    for i in range(3):
        send(engine, f"f{i}", prompts.tokens(300), OUT)
    if probe:
        assert cached_prefix_tokens(engine.cache, a) == 0  # the device let it go
        for _ in range(2):  # twice: a probe leaves nothing a second one would see
            assert cached_prefix_tokens(engine.cache, a, host=True) == HELD[cache]
    return engine, a


@pytest.mark.parametrize("cache", ["apc", "radix"])
def test_the_host_aware_probe_reads_the_tier_and_leaves_no_trace(cache):
    probed, a = _evicted(cache, probe=True)
    plain, _ = _evicted(cache, probe=False)
    assert isinstance(probed.cache, HostPrefixPeek)
    before = probed.cache.stats()
    assert before == plain.cache.stats()  # probing counted no query, no hit
    assert tiers(send(probed, "a2", a, OUT)) == tiers(send(plain, "a2", a, OUT)) == (0, HIT[cache])


def test_a_cache_without_a_tier_has_no_host_probe():
    engine = tier_engine("apc", tokens=0)
    assert not isinstance(engine.cache, HostPrefixPeek)
    with pytest.raises(TypeError, match="no host tier"):
        cached_prefix_tokens(engine.cache, (1, 2, 3), host=True)
