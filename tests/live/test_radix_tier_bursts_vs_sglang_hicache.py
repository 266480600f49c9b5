"""radix with a host tier against SGLang 0.5.23's own HiCache server under bursts: after a warm
history sent one request at a time (shared heads, then fillers that push them off the device),
several requests sharing those heads are sent at once, and every request's device and host cached
tokens must equal the project's engine in the loop SGLang runs on this CPU (overlap, blocking
forward) given the same arrivals (docs/tiers.md §3.5.1).

The arrivals: which burst requests formed each prefill batch is read from the server's own log
(each batch's `#new-seq` and prompt tokens; a burst's prompts have lengths whose sums identify
the members), and the engine receives each batch's members right before the step that forms it.
Opt-in (marker `sglang`, skipped without .venv-sglang, CI too, like the one-at-a-time test);
one server per case: three write policies with a 1 GB host pool, write_back with one that evicts.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from itertools import combinations
from pathlib import Path
from typing import NamedTuple

import pytest

from engines.build import build_engine
from engines.cache.tiers import HostTierConfig
from engines.config import EngineConfig
from engines.model.presets import PRESETS
from engines.request import GenerationRequest
from tests.live.sglang_hicache import VENV_PYTHON, generate, hicache_server, host_pool_tokens
from tests.tier_streams import TICKS, Prompts, send, tiers

pytestmark = pytest.mark.sglang

KV_TOKENS = 1200  # device tokens on both sides
CHUNK = 4096  # --chunked-prefill-size; engine.max_num_batched_tokens
OUT = 4
ROUNDS = 3  # each round: a fresh warm history and two bursts
PREFILL = re.compile(
    r"Prefill batch.*?#new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+),.*?"
    r"#running-req: (\d+),"
)

Req = tuple[str, tuple[int, ...], int]  # request id, prompt, max new tokens


class Served(NamedTuple):
    rid: str
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    split: tuple[int, int]  # SGLang's (device, host) cached tokens


SendOne = Callable[[str, tuple[int, ...], int], Served]
SendBurst = Callable[[list[Req]], list[Served]]


class Event(NamedTuple):
    """One request alone, or a burst as the server's prefill batches formed it."""

    batches: list[list[Served]]
    alone: bool = False
    running: tuple[int, ...] = (0,)  # requests in the server's running batch as each formed


def sized(p: Prompts, bases: list[tuple[int, ...]], base_len: int) -> list[tuple[int, ...]]:
    """Each base with a fresh tail to `base_len + 2^i - 1` tokens: within one size, every set of
    a burst's prompts has its own token total, so a prefill batch's total names its members."""
    return [base + p.tokens(base_len + 2**i - 1 - len(base)) for i, base in enumerate(bases)]


def burst_a(p: Prompts, heads: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Six prompts: two on each of the first two heads, one on the third, one fresh."""
    return sized(p, [heads[0], heads[0], heads[1], heads[1], heads[2], p.tokens(150)], 170)


def round_events(p: Prompts, tag: str, one: SendOne, burst: SendBurst) -> None:
    """A warm history then two bursts: A on heads the device evicted, B (right after A's
    replies) on A's conversations, A's heads and the fourth head."""
    heads = [p.tokens(150) for _ in range(4)]
    for i, head in enumerate(heads):
        one(f"{tag}w{i}", head + p.tokens(20), OUT)
    for i in range(4):  # fillers: 1,400 tokens, more than the device holds
        one(f"{tag}f{i}", p.tokens(350), OUT)
    replies = burst([(f"{tag}A{i}", prompt, OUT) for i, prompt in enumerate(burst_a(p, heads))])
    convs = [replies[0].prompt + replies[0].output, replies[2].prompt + replies[2].output]
    b = sized(p, [*convs, heads[1], heads[3]], 220)
    burst([(f"{tag}B{i}", prompt, OUT) for i, prompt in enumerate(b)])


def members(batches: list[tuple[int, int]], reqs: list[Req]) -> list[list[int]]:
    """Each prefill batch's members (indices into `reqs`): the unique set of not yet placed
    requests of that size whose prompts add up to the batch's tokens."""
    left = list(range(len(reqs)))
    out = []
    for size, tokens in batches:
        fits = [c for c in combinations(left, size) if sum(len(reqs[i][1]) for i in c) == tokens]
        if len(fits) != 1:
            raise AssertionError(f"batch {size} x {tokens} tokens: {len(fits)} candidates")
        out.append(list(fits[0]))
        left = [i for i in left if i not in fits[0]]
    if left:
        raise AssertionError(f"requests {left} in no prefill batch the log shows")
    return out


def run_server(
    write_policy: str, log: Path, host_ratio: float | None
) -> tuple[list[Event], list[list[int]]]:
    """Every round on SGLang's server; the events and each burst's batch sizes."""
    events: list[Event] = []
    sizes: list[list[int]] = []
    extra = ("--chunked-prefill-size", str(CHUNK))
    with hicache_server(KV_TOKENS, write_policy, log, host_ratio, extra) as url:

        def one(rid: str, prompt: tuple[int, ...], n: int) -> Served:
            reply = generate(url, prompt, n)
            served = Served(rid, prompt, reply.output_ids, (reply.device, reply.host))
            events.append(Event([[served]], alone=True))
            return served

        def burst(reqs: list[Req]) -> list[Served]:
            log_from = len(log.read_text(errors="replace"))
            replies: list[Served | None] = [None] * len(reqs)

            def send_one(i: int) -> None:
                rid, prompt, n = reqs[i]
                reply = generate(url, prompt, n)
                replies[i] = Served(rid, prompt, reply.output_ids, (reply.device, reply.host))

            threads = [threading.Thread(target=send_one, args=(i,)) for i in range(len(reqs))]
            for t in threads:
                t.start()
                time.sleep(0.002)  # send order = arrival order, as far as the client can
            for t in threads:
                t.join()
            time.sleep(0.5)  # the scheduler's log lines reach the file
            lines = PREFILL.findall(log.read_text(errors="replace")[log_from:])
            found = [(int(s), int(new) + int(hit)) for s, new, hit, _ in lines]
            done = [r for r in replies if r is not None]
            groups = [[done[i] for i in group] for group in members(found, reqs)]
            events.append(Event(groups, running=tuple(int(line[3]) for line in lines)))
            sizes.append([s for s, _ in found])
            return done

        for r in range(ROUNDS):
            round_events(Prompts(100 + r), f"r{r}", one, burst)
    return events, sizes


def engine_for(write_policy: str, host_tokens: int):
    cfg = EngineConfig(
        cache="radix",
        block_size=1,
        kv_capacity_tokens=KV_TOKENS,
        max_num_batched_tokens=CHUNK,
        backend="torch",
        host_tier=HostTierConfig(tokens=host_tokens, write_policy=write_policy),
        overlap=True,
        overlap_blocking_forward=True,  # SGLang on CPU: its forward blocks the launch
        decode_runs=False,  # one step per call: batches are fed step by step
    )
    cfg.validate()
    return build_engine(
        cfg, PRESETS.get("tiny"), executor="simulated", device="cpu", hardware=TICKS
    )


def replay(engine, events: list[Event]) -> dict[str, tuple[int, int]]:
    """The same events on the engine: a lone request run alone; a burst's batches received one
    per step, each right before the step that forms it."""
    for event in events:
        if event.alone:
            s = event.batches[0][0]
            send(engine, s.rid, s.prompt, s.output)
            continue
        for j, batch in enumerate(event.batches):
            if j:
                engine.step()  # the batch before it
            # a batch the server formed with fewer requests running came after more decode
            # steps (its members arrived later): run them first
            while engine.has_work and len(engine.loop.running) > event.running[j]:
                engine.step()
            now = engine.clock.now()
            for s in batch:
                engine.add_request(
                    GenerationRequest(
                        request_id=s.rid,
                        prompt_ids=s.prompt,
                        max_new_tokens=len(s.output),
                        scripted_output_ids=s.output,
                    ),
                    now,
                )
        while engine.has_work:
            engine.step()
        engine.idle()
    return {r.request_id: tiers(r) for r in engine.records}


# a 1 GB host pool (never full), and under write_back one of the device's size (--hicache-ratio 1:
# 1,201 tokens), which each round's warm history overflows
@pytest.mark.parametrize(
    ("write_policy", "host_ratio"),
    [
        ("write_through", None),
        ("write_back", None),
        ("write_through_selective", None),
        ("write_back", 1.0),
    ],
)
def test_bursts_per_request_tiers_equal_sglangs_hicache(write_policy, host_ratio, tmp_path):
    if not VENV_PYTHON.exists():
        pytest.skip("SGLang is opt-in: run `bash scripts/setup_sglang.sh` to make .venv-sglang")
    log = tmp_path / "sglang.log"
    events, sizes = run_server(write_policy, log, host_ratio)
    ours = replay(engine_for(write_policy, host_pool_tokens(log)), events)
    theirs = {s.rid: s.split for e in events for b in e.batches for s in b}
    bursts = [s.rid for e in events if not e.alone for b in e.batches for s in b]
    exact = sum(ours[rid] == theirs[rid] for rid in bursts)
    print(
        f"{write_policy}: prefill batches per burst {sizes}; burst requests exact {exact}/"
        f"{len(bursts)}; device/host ours {_totals(ours, bursts)} sglang {_totals(theirs, bursts)}"
    )
    assert ours == theirs, ", ".join(
        f"{rid} ours {ours[rid]} sglang {theirs[rid]}" for rid in ours if ours[rid] != theirs[rid]
    )
    if write_policy != "write_through_selective" and host_ratio is None:
        # the bursts loaded from the host, and a request sharing a head loaded earlier in the
        # same burst (its batch, or one formed before the load's result) hit it on the device
        assert all(theirs[f"r{r}A0"][1] and theirs[f"r{r}A1"] == (150, 0) for r in range(ROUNDS))


def _totals(split: dict[str, tuple[int, int]], rids: list[str]) -> tuple[int, int]:
    return sum(split[r][0] for r in rids), sum(split[r][1] for r in rids)
