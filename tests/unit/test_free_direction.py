"""engine.free_direction=head_first: the counterfactual control for vLLM's tail-first freeing
(claim 8). A table freed head first queues its head for eviction first, so the shared head is
what unrelated requests take; tail-first (upstream) keeps it."""

from __future__ import annotations

import pytest

from engines.cache.apc import ApcCache
from engines.config import EngineConfig
from engines.errors import BadInput
from tests.unit.test_apc_invariants import BASE, S, free, prefill, queue, table


def _cache(head_first: bool) -> ApcCache:
    return ApcCache(5, 16, free_order="v024", head_first=head_first)


def test_head_first_queues_the_head_first():
    cache = _cache(head_first=True)
    a = S("a", BASE[:48])
    prefill(cache, a)
    free(cache, a)
    assert queue(cache) == [4, 1, 2, 3]


@pytest.mark.parametrize("head_first,hit,blocks", [(False, 32, [1, 2, 4]), (True, 0, None)])
def test_only_tail_first_keeps_the_shared_head(head_first, hit, blocks):
    cache = _cache(head_first)
    a = S("a", BASE[:48])
    prefill(cache, a)
    free(cache, a)
    u1, u2 = S("u1", range(5000, 5016)), S("u2", range(6000, 6016))
    prefill(cache, u1)
    prefill(cache, u2)
    free(cache, u1)
    free(cache, u2)
    again = S("a2", BASE[:48])
    assert prefill(cache, again) == hit
    if blocks is not None:
        assert table(cache, again) == blocks


def test_free_direction_is_an_apc_knob():
    with pytest.raises(BadInput, match="free_direction"):
        EngineConfig(cache="radix", free_direction="head_first").validate()
    with pytest.raises(BadInput, match="free_direction"):
        EngineConfig(cache="apc", free_direction="sideways").validate()
