"""The fixed streams the real-router checks use (scripts/fleet_twin_scores.py, the live tests):
groups of prompts sharing a prefix, interleaved, as text or token ids, and for kv_aware the
prefixes placed on their workers beforehand (token ids, or text the router has a worker
tokenise); for cache_aware one-at-a-time decisions that spread, the groups placed through the
router by a first wave sent at once (`spread_stream`). A run of the pipeline routes its workload
instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.fleet.policies import Routed

# The placement wave's output length: long enough that the wave's requests are all still in
# flight when its last one is routed (2 shared cores: a few ms to route, ~10 ms a token)
PLACEMENT_TOKENS = 32


@dataclass(frozen=True)
class Waves:
    """A stream in its own waves (each sent at once, the next when it is answered) rather than
    in waves of one width, and the output length of the requests that do not take the default."""

    waves: list[list[Routed]]
    max_tokens: dict[str, int]


def text_stream(num_groups: int, per_group: int, seed: int = 0) -> list[Routed]:
    """Text prompts: groups sharing a long prefix of words, each with its own question; the
    groups interleaved (g0 g1 ... g0 g1 ...) so prefix-aware routing has work to do."""
    import random

    rng = random.Random(seed)
    words = [f"w{k}" for k in range(500)]
    prefixes = [" ".join(rng.choices(words, k=60)) for _ in range(num_groups)]
    out = []
    for i in range(per_group):
        for g in range(num_groups):
            question = " ".join(rng.choices(words, k=8))
            out.append(Routed(f"g{g}-q{i}", f"{prefixes[g]} Q: {question}", session_id=f"s{g}"))
    return out


def token_stream(num_groups: int, per_group: int, seed: int = 0) -> list[Routed]:
    """Token-id prompts (vllm-router's kv_aware reads them as sent; a text prompt it has a worker
    tokenise, placed_text_stream): groups sharing a 64-token prefix, each with its own 8-token
    question, interleaved like text_stream."""
    import random

    rng = random.Random(seed)
    prefixes = [[rng.randrange(100, 40_000) for _ in range(64)] for _ in range(num_groups)]
    out = []
    for i in range(per_group):
        for g in range(num_groups):
            question = [rng.randrange(100, 40_000) for _ in range(8)]
            out.append(Routed(f"g{g}-q{i}", (*prefixes[g], *question), session_id=f"s{g}"))
    return out


def streams(
    policy: str, num_groups: int, per_group: int, num_workers: int
) -> tuple[list[Routed], list[tuple[int, Routed]]]:
    """The stream a policy is checked on, and the requests sent straight to a worker first.
    kv_aware gets token ids, and each group's prefix placed on worker g mod N beforehand: only a
    router that reads the workers' real caches sends every group where its prefix already is."""
    if policy != "kv_aware":
        return text_stream(num_groups, per_group), []
    stream = token_stream(num_groups, per_group)
    warm = [
        (g % num_workers, Routed(f"warm-g{g}", (*stream[g].prompt[:64], 1, 2, 3)))
        for g in range(num_groups)
    ]
    return stream, warm


def placed_text_stream(
    num_groups: int, per_group: int, num_workers: int, shift: int = 0
) -> tuple[list[Routed], list[tuple[int, Routed]]]:
    """Text prompts for kv_aware (vllm-router 0.1.17 has a worker tokenise a text prompt, then
    hashes the ids; docs/fleet.md §5): text_stream's groups (another seed, request ids `tG-qI`),
    each group's first prompt sent straight to worker (g + shift) mod N beforehand, the other
    `per_group` through the router."""
    import dataclasses

    groups = text_stream(num_groups, per_group + 1, seed=1)
    named = [dataclasses.replace(r, request_id=f"t{r.request_id}") for r in groups]
    warm = [((g + shift) % num_workers, named[g]) for g in range(num_groups)]
    return named[num_groups:], warm


def load_stream(
    num_workers: int, prefix_lens: tuple[int, ...], width: int, seed: int = 0
) -> tuple[list[Routed], list[tuple[int, Routed]]]:
    """A stream where in-flight load moves vllm-router's kv_aware decisions (sent in waves of
    `width`): wave w is `width` requests of group w, whose prefix of prefix_lens[w] token ids is
    placed on worker w mod N beforehand. A short prefix saves less than a few requests in flight
    cost, so the wave spills onto other workers; a long one keeps the whole wave."""
    import random

    rng = random.Random(seed)
    stream: list[Routed] = []
    warm = []
    for g, size in enumerate(prefix_lens):
        prefix = [rng.randrange(100, 40_000) for _ in range(size)]
        warm.append((g % num_workers, Routed(f"warm-g{g}", (*prefix, 1, 2, 3))))
        for i in range(width):
            question = [rng.randrange(100, 40_000) for _ in range(8)]
            stream.append(Routed(f"g{g}-q{i}", (*prefix, *question), session_id=f"s{g}"))
    return stream, warm


def spread_stream(num_groups: int, per_group: int) -> tuple[list[Routed], Waves]:
    """A stream on which cache_aware's one-at-a-time decisions spread: text_stream's groups, the
    first prompt of each sent through the router at once with long outputs (the placement wave:
    every prompt cold and all in flight together, each goes to the least loaded worker, so the
    groups spread over the workers), then the rest one at a time, groups interleaved. Each of
    those shares its group's prefix well above the cache threshold (~0.9 of its characters
    or tokens), so it goes to the worker whose tree holds the group."""
    stream = text_stream(num_groups, per_group)
    placement, rest = stream[:num_groups], stream[num_groups:]
    waves = [placement, *([r] for r in rest)]
    return stream, Waves(waves, {r.request_id: PLACEMENT_TOKENS for r in placement})
