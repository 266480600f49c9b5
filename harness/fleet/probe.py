"""Read-only probes of a replica's cache: how many leading prompt tokens it truly holds now.

`kv_aware`, `cached_now`, the oracles and `dualmap` route on these. A probe must not change what it looks
at, so it asks the cache's `PrefixPeek` capability (engines/cache/protocol.py), which each design
implements its own way (APC: a lookup that leaves no trace; radix: a walk of the tree without
splitting or stamping).
"""

from __future__ import annotations

from collections.abc import Sequence as Ids
from typing import TYPE_CHECKING

from engines.cache.protocol import HostPrefixPeek, PrefixCache, PrefixPeek
from engines.sequence import Sequence

if TYPE_CHECKING:  # policies.py imports this module
    from harness.fleet.policies import FleetView, Routed


def cached_prefix_tokens(
    cache: PrefixCache,
    prompt_ids: Ids[int],
    salt: str | None = None,
    lora_id: str | None = None,
    host: bool = False,
) -> int:
    """Leading tokens of the prompt the cache holds (no last-token cap: what is stored); with
    `host`, what its host tier holds past them counts too."""
    if not isinstance(cache, PrefixPeek):
        raise TypeError(f"no read-only probe for {cache.name!r}: it is no PrefixPeek")
    reader: HostPrefixPeek | None = None
    if host:
        if not isinstance(cache, HostPrefixPeek):
            raise TypeError(f"no host-tier probe for {cache.name!r}: it has no host tier to read")
        reader = cache
    seq = Sequence(
        seq_id="\0fleet-probe",
        token_ids=prompt_ids,  # type: ignore[arg-type]  # read only
        num_prompt_tokens=len(prompt_ids),
        max_new_tokens=1,
        salt=salt,
        lora_id=lora_id,
    )
    return reader.held_prefix_tokens(seq) if reader else cache.cached_prefix_tokens(seq)


def truly_cached(req: Routed, view: FleetView) -> list[int]:
    """Each replica's cached prefix of `req` in tokens: as the view was given it (workers in
    other processes), else probed from each replica's cache."""
    return cached_at(req, view, range(view.num_replicas))


def device_and_host(req: Routed, view: FleetView) -> list[tuple[int, int]]:
    """Each replica's cached prefix of `req` split by medium, (device tokens, host tokens past
    them), probed from the replicas' caches (a view with `host_tiers`: the in-process fleet)."""
    caches, prompt = _probed(req, view)
    split = []
    for cache in caches:
        device = cached_prefix_tokens(cache, prompt, req.salt, req.lora_id)
        held = cached_prefix_tokens(cache, prompt, req.salt, req.lora_id, host=True)
        split.append((device, held - device))
    return split


def cached_at(req: Routed, view: FleetView, replicas: Ids[int]) -> list[int]:
    """`truly_cached` of the given replicas only (a router that looks at two need probe two)."""
    if view.cached is not None:
        return [view.cached[i] for i in replicas]
    caches, prompt = _probed(req, view)
    return [
        cached_prefix_tokens(caches[i], prompt, req.salt, req.lora_id, view.host_tiers)
        for i in replicas
    ]


def _probed(req: Routed, view: FleetView) -> tuple[list[PrefixCache], Ids[int]]:
    """The replicas' caches and the token-id prompt a probe reads; a view without them (a real
    router's workers, a text prompt) is a caller's bug."""
    if view.caches is None or isinstance(req.prompt, str):
        raise ValueError("a precise router needs each replica's cache and token-id prompts")
    return view.caches, req.prompt
