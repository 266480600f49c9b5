"""`engine.overlap`: SGLang 0.5.23's overlap event loop, hand-made cases with their counts.

The counts are the ones measured by driving upstream's own `event_loop_overlap` in-process (forward
scripted): a prompt prefilled in step k is matchable from step k+1 without overlap and k+2 with
it; of a chunked prompt only the last chunk is late. Prompts: a 512-token shared prefix and a
64-token suffix whose first token differs per request (so nothing past the prefix is shared).
"""

from __future__ import annotations

import numpy as np
import pytest

from engines.batch import run_batch
from engines.config import EngineConfig
from engines.errors import BadInput
from engines.request import CompletionRequest, GenerationRequest
from engines.sched.sglang import SglangScheduler
from tests.sglang_reference import Config, pressure, run_prefixbench
from tests.stepwise import request, run_steps, step_engine

RNG = np.random.default_rng(51)
PREFIX = RNG.integers(100, 1000, 512).tolist()
LONG = RNG.integers(100, 1000, 3000).tolist()
SHARED = [
    request(f"r{i:02d}", PREFIX + [1 + i] + RNG.integers(100, 1000, 63).tolist()) for i in range(32)
]


def radix(overlap: bool, chunk: int = 8192, **fields):
    return step_engine(
        cache="radix",
        block_size=1,
        max_num_batched_tokens=chunk,
        overlap=overlap,
        **fields,
    )


@pytest.mark.parametrize(("overlap", "cached"), [(False, 511), (True, 0)])
def test_identical_prompts_one_iteration_apart(overlap, cached):
    got = run_steps(radix(overlap), [[request("a", PREFIX)], [request("b", PREFIX)]])
    assert got == {"a": 0, "b": cached}


@pytest.mark.parametrize(("overlap", "cached"), [(False, 2999), (True, 2048)])
def test_only_the_last_chunk_is_late(overlap, cached):
    """3,000 tokens at chunk 1,024 (chunks in steps 0, 1, 2), the twin joins before step 3: the
    first two chunks were committed when steps 1 and 2 were formed, the last one is not yet."""
    joins = [[request("a", LONG)], [], [], [request("b", LONG)]]
    assert run_steps(radix(overlap, chunk=1024), joins)["b"] == cached


@pytest.mark.parametrize(
    ("chunk", "overlap", "total"),
    [(8192, False, 8704), (8192, True, 2176), (2048, False, 14336), (2048, True, 12992)],
)
def test_burst_of_32_sharing_a_prefix(chunk, overlap, total):
    """Ideal 31 x 512 = 15,872. At chunk 8,192 the first round admits 14 whole prompts and cuts
    the 15th after 128 tokens; that chunk is committed when the next round forms, so under
    overlap the other 17 match its 128 tokens, not the 14 prompts still being processed."""
    assert sum(run_steps(radix(overlap, chunk=chunk), [SHARED]).values()) == total


@pytest.mark.parametrize(("overlap", "total"), [(False, 15872), (True, 15360)])
def test_one_request_per_iteration(overlap, total):
    """Under overlap only the second request misses: it is formed before the first's result."""
    assert sum(run_steps(radix(overlap), [[r] for r in SHARED]).values()) == total


@pytest.mark.parametrize("overlap", [False, True])
def test_hash_cache_under_sglang_scheduler_is_matchable_at_allocation(overlap):
    """APC caches a prompt's full blocks when it allocates them, so the overlap's late processing
    delays no hit (the commit it delays is a no-op); it still delays releases."""
    engine = step_engine(
        cache="apc", scheduler="sglang", block_size=16, max_num_batched_tokens=8192, overlap=overlap
    )
    got = run_steps(engine, [[request("a", PREFIX)], [request("b", PREFIX)]])
    assert got == {"a": 0, "b": 496}


def test_a_finishing_request_leaves_the_next_decode_and_is_released_after_it_formed():
    """A request finishing in step k: without overlap it is released after step k. With overlap
    step k+1 is formed first, and SGLang 0.5.23 leaves it out of that decode (its in-flight token
    finishes it by length: `_reqs_finishing_inflight`), so it gets no slot there; the release
    after that formation inserts what it computed, its last token (no KV) not included."""
    held, usage = {}, {}
    for overlap in (False, True):
        engine = radix(overlap, decode_runs=False)
        engine.add_request(request("a", PREFIX[:100], max_new=2), 0.0)
        engine.add_request(request("b", PREFIX[200:300], max_new=6), 0.0)
        engine.step()  # prefill both
        engine.step()  # decode: a samples its last token and finishes
        held[overlap] = engine.cache.usage().evictable
        engine.step()  # decode: b only
        assert [rid for rid, _ in (engine.loop.step_log or [])[2].scheduled] == ["b"]
        usage[overlap] = engine.cache.usage()
    assert held == {False: 101, True: 0}  # a: 100 + 1, released once its result is processed
    assert usage[False].evictable == usage[True].evictable == 101
    assert usage[False].protected == usage[True].protected == 102  # b: 100 + 2 decodes


def test_idle_processes_the_kept_result():
    """After the last step the engine idles: the kept result is processed then, so the cache
    can be flushed and a later request matches."""
    engine = radix(True)
    run_steps(engine, [[request("a", PREFIX)]])
    sched = engine.loop.scheduler
    assert isinstance(sched, SglangScheduler) and sched.in_flight == frozenset()
    assert run_steps(engine, [[request("b", PREFIX)]])["b"] == 511
    assert engine.cache.reset()


def test_overlap_is_a_boolean_of_the_sglang_scheduler():
    with pytest.raises(BadInput, match="engine.overlap must be true or false"):
        EngineConfig(cache="radix", overlap="yes").validate()
    with pytest.raises(BadInput, match="engine.overlap is a knob of the sglang design"):
        EngineConfig(cache="apc", overlap=False).validate()  # vLLM's scheduler has no such loop
    assert EngineConfig(cache="radix").overlap is True  # upstream's default on a GPU


def _pressure_stream(seed: int) -> list[GenerationRequest]:
    """Poisson arrivals on three system prompts, outputs long enough to force retractions."""
    rng = np.random.default_rng(seed)
    systems = [rng.integers(100, 1000, int(rng.integers(20, 200))).tolist() for _ in range(3)]
    out, t = [], 0.0
    for i in range(24):
        prompt = systems[int(rng.integers(0, 3))] + rng.integers(100, 1000, 40).tolist()
        n = int(rng.integers(1, 100))
        t += float(rng.exponential(0.01))
        script = tuple(rng.integers(100, 1000, n).tolist())
        out.append(GenerationRequest(f"r{i:02d}", tuple(prompt), n, script, arrival_s=t))
    return out


@pytest.mark.parametrize(("cache", "block"), [("radix", 1), ("apc", 16)])
def test_retractions_under_overlap_keep_the_cache_whole(cache, block):
    """Tight KV (512 tokens, 16 seats): retractions happen, every integrity check holds after
    every step, every request ends with its scripted output, and decode runs change nothing."""
    got = []
    for runs in (True, False):
        engine = step_engine(
            cache=cache,
            scheduler="sglang",
            block_size=block,
            kv_capacity_tokens=512,
            max_num_seqs=16,
            max_num_batched_tokens=256,
            overlap=True,
            decode_runs=runs,
            debug_checks=True,
        )
        reqs = _pressure_stream(3)
        recs = sorted(run_batch(engine, reqs), key=lambda r: r.request_id)
        assert [tuple(r.output_ids) for r in recs] == [q.scripted_output_ids for q in reqs]
        # a token dropped at retraction and sampled again is emitted once
        assert all(len(r.token_times_s) == r.output_tokens for r in recs)
        got.append([(r.request_id, r.cached_tokens, r.num_preemptions) for r in recs])
    assert got[0] == got[1]
    assert sum(p for _, _, p in got[0]) >= 1


def test_a_request_sent_at_a_finish_is_formed_after_that_finish_is_processed():
    """Closed loop: B is sent when A finishes (step 7) while C keeps the engine busy. Upstream
    reports A's finish only when it processes it, after step 8 was formed: B reaches step 9 and
    matches A's prompt and output, 107 tokens in both loops (step 8's decode left A out, so its
    last token has no KV in either)."""
    prompt = PREFIX[:100]
    got = {}
    for overlap in (False, True):
        engine = radix(overlap, decode_runs=False)
        engine.add_request(request("c", list(range(2000, 2050)), max_new=40), 0.0)
        engine.add_request(request("a", prompt, max_new=8), 0.0)
        out = engine.step()
        while not any(r.request_id == "a" for r in out.finished):
            out = engine.step()
        engine.add_request(request("b", prompt + list(range(900, 908)) + [5, 6, 7]), out.end_s)
        while engine.has_work:
            engine.step()
        engine.idle()
        steps = [[rid for rid, _ in rec.scheduled] for rec in engine.loop.step_log or []]
        first = next(i for i, ids in enumerate(steps) if "b" in ids)
        got[overlap] = (first, {r.request_id: r.cached_tokens for r in engine.records}["b"])
    assert got == {False: (8, 107), True: (9, 107)}


@pytest.mark.parametrize("overlap", [False, True])
def test_parallel_samples_wait_for_their_prefix_request_to_be_processed(overlap):
    """SGLang's front stage sends the n samples when the prefix request has finished: under
    overlap that is when its result is processed, so every sample reuses the prompt."""
    engine = radix(overlap)
    scripts = tuple((i + 1,) * 5 for i in range(4))
    engine.submit(CompletionRequest("p", PREFIX[:100], 5, n=4, scripted_output_ids=scripts), 0.0)
    while engine.has_work:
        engine.step()
    engine.idle()
    assert [r.cached_tokens for r in engine.records] == [99] * 4


@pytest.mark.parametrize(
    ("overlap", "prefills", "decodes"),
    [(False, [(343, 40), (489, 256), (490, 1)], 60), (True, [(351, 40), (501, 256), (502, 1)], 61)],
)
def test_a_retracted_request_as_upstream_re_prefills_it(overlap, prefills, decodes):
    """The pressure seed-3 burst (tests/sglang_reference.py) retracts q21 once; its rows as SGLang
    0.5.23's own loops ran them. Plain: the re-prefill covers its prompt and every output (257
    tokens past no match, the last chunk one token, an extend batch). Overlap: the token in flight
    when it was retracted is dropped and sampled again, so the re-prefill is the same 257 tokens
    and the request takes one decode more (61 against 60 for 62 outputs)."""
    specs = pressure(3, False)
    got = run_prefixbench(Config(chunk=256, kv_tokens=512, max_running=16), overlap, specs)
    assert got["requests"]["q21"]["retractions"] == 1
    assert got["requests"]["q21"]["output"] == next(s["output"] for s in specs if s["rid"] == "q21")
    rows = [
        (s["iteration"], s["kind"], n) for s in got["steps"] for rid, n in s["rows"] if rid == "q21"
    ]
    assert [(i, n) for i, kind, n in rows if kind == "prefill"] == prefills
    assert sum(kind == "decode" for _, kind, _ in rows) == decodes
    assert all(kind in ("prefill", "decode") for _, kind, _ in rows)
