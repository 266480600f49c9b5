"""A request whose only obstacle is its host-tier load is served at once: the engine iterates
while the load is in flight (vLLM's engine core does), so a driver never waits for the next
arrival meanwhile (docs/tiers.md §2.4, engines/engine.py `_no_progress`)."""

from __future__ import annotations

from engines.batch import run_batch
from engines.request import GenerationRequest
from tests.tier_streams import Prompts, tier_engine, tiers

OUT = (101, 102, 103, 104)
GAP_S = 100.0  # far longer than any step of the TICKS hardware (10 ms each)


def _req(rid: str, prompt: tuple[int, ...], arrival_s: float) -> GenerationRequest:
    return GenerationRequest(
        request_id=rid,
        prompt_ids=prompt,
        max_new_tokens=len(OUT),
        scripted_output_ids=OUT,
        arrival_s=arrival_s,
    )


def test_a_host_hit_alone_on_the_engine_does_not_wait_for_the_next_arrival():
    prompts = Prompts()
    a = prompts.tokens(300)
    # a, then three fillers that push it out of the 640 device tokens into the host tier, then a
    # again alone (its host load is all it waits for), then a fresh request GAP_S later
    stream = [("a1", a), *((f"f{i}", prompts.tokens(300)) for i in range(3)), ("a2", a)]
    requests = [_req(rid, p, 10.0 * i) for i, (rid, p) in enumerate(stream)]
    late = 10.0 * len(stream) + GAP_S
    requests.append(_req("late", prompts.tokens(300), late))
    records = {r.request_id: r for r in run_batch(tier_engine(tokens=4096), requests)}
    a2 = records["a2"]
    assert tiers(a2) == (0, 288)  # a host hit: 18 complete blocks of 16 loaded
    assert a2.first_token_s - a2.arrival_s < 1.0  # a few steps, not the gap to the next arrival
    assert a2.finish_s < late


def test_the_steps_a_load_takes_report_progress_and_end_once_it_is_scheduled():
    prompts = Prompts()
    a = prompts.tokens(300)
    engine = tier_engine(tokens=4096)
    stream = [("a1", a), *((f"f{i}", prompts.tokens(300)) for i in range(3))]
    run_batch(engine, [_req(rid, p, 10.0 * i) for i, (rid, p) in enumerate(stream)])
    engine.add_request(_req("a2", a, engine.clock.now()), engine.clock.now())
    start_s = engine.clock.now()
    empty = 0
    while not (out := engine.step()).tokens:
        assert out.progressed and out.end_s == start_s  # the load moves on, the clock does not
        empty += 1
    # the step that starts the load and the step that completes it; then a2 runs
    assert empty == 2 and "a2" in out.tokens
