"""Claim 27: a host tier costs throughput when nothing is reused (llm-d's tiered prefix-cache guide:
-12.3% throughput on gpt-oss-120b at 5 QPS with the CPU tier on).

A stream with no shared token (workload=unique: every prompt stored, none ever hit) on the
simulated H100 Llama-3.1-8B preset, each design's shipped pairing with its host tier off and on.
Two loads: one burst (saturating, so throughput can move) and Poisson arrivals at about 0.9 of
what the burst achieves. The simulated cost can only come from the host link: loads (there are
none) and stores, which run off the critical path (docs/tiers.md §7.1), so the rule's outcome is
open only in what the link's store queue does; the project's real executor copies for real
(docs/tiers.md §8.4, `tiers_overhead`), which this claim does not run.
"""

from __future__ import annotations

from harness.claims.arms import GPU_BUDGETS
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, UNSURE, Claim, Figure, Finding, sum_up
from harness.claims.strength import ABOVE, BELOW, STRADDLES, describe, interval, side
from harness.claims.tier_arms import DESIGNS, OFF, ON, TierRun, arm_label, tier_arm

FOLDER = "27-tier_cost"
COST = 0.01  # the tier costs throughput at a load when 1 - on/off lies wholly at or above 1%
PUBLISHED = -0.123  # llm-d: throughput change with the CPU tier on, gpt-oss-120b at 5 QPS
STATE = {ABOVE: HOLDS, BELOW: FAILS, STRADDLES: UNSURE}
DEVICE = 426784  # the H100 8B preset's KV tokens (harness/claims/arms.py H100_8B)
BURST, POISSON = "burst", "Poisson"
RATE = 22.0  # req/s: about 0.9 of the burst's request throughput at 256 prompts (24.2 req/s)


def measure(ctx: Context) -> Finding:
    prompts = ctx.size(32, 256)
    seeds = range(3)
    loads = {BURST: (), POISSON: ("load.mode=poisson", f"load.rate={RATE}")}
    runs = {
        (d, load, state, seed): _run(ctx, d, load, extra, state, seed, prompts)
        for d in DESIGNS
        for load, extra in loads.items()
        for state in (OFF, ON)
        for seed in seeds
    }
    costs = {
        (d, load): [
            1 - runs[(d, load, ON, s)].throughput / runs[(d, load, OFF, s)].throughput
            for s in seeds
        ]
        for d in DESIGNS
        for load in loads
    }
    cis = {k: interval(v) for k, v in costs.items()}
    verdict = sum_up(
        "the design and load",
        {f"{d} {load}": STATE[side(ci, COST)] for (d, load), ci in cis.items()},
    )
    return Finding(
        setup=_setup(prompts, len(seeds)),
        measured="per design and load: hit rate (must be 0), total token throughput and mean TTFT "
        "with the tier off and on, the throughput cost 1 - on/off per seed with its 95% t-interval, "
        "what the tier stored and the link's largest store backlog; llm-d's published change beside",
        result="; ".join(_text(runs, cis, d, load, seeds) for d in DESIGNS for load in loads)
        + f" (published: {PUBLISHED:+.1%} throughput with the CPU tier, gpt-oss-120b at 5 QPS, "
        "llm-d's guide)",
        verdict=verdict,
        figure=Figure(
            "Throughput cost of a host tier that is never hit",
            "cost, 1 - on/off (%)",
            {f"{d} {load}": {"measured": 100 * ci.mean} for (d, load), ci in cis.items()},
            reference=-100 * PUBLISHED,
            reference_label=f"llm-d {-PUBLISHED:.1%}",
        ),
        details=[
            {"design": d, "load": load, "cost_per_seed": costs[(d, load)]} for d, load in costs
        ],
        interval="; ".join(
            f"cost (1 - on/off) {d} {load} {describe(ci, 100, '%')} against {100 * COST:.0f}%"
            for (d, load), ci in cis.items()
        ),
    )


def _run(
    ctx: Context,
    design: str,
    load: str,
    extra: tuple[str, ...],
    state: str,
    seed: int,
    prompts: int,
) -> TierRun:
    overrides = (
        "executor=simulated",
        "hardware=h100_llama3_8b_bf16",
        "workload=unique",
        f"workload.num_prompts={prompts}",
        "workload.prompt_len=1024",
        "workload.output_len=128",
        f"engine.kv_capacity_tokens={DEVICE}",
        *GPU_BUDGETS,
        *tier_arm(design, 4 * DEVICE if state == ON else 0),
        *extra,
        f"seed={seed}",
    )
    name = f"{design}-{load}-{'on' if state == ON else 'off'}-seed{seed}"
    run = TierRun.of(ctx.run(FOLDER, name, overrides))
    if run.hit_rate != 0:  # the claim is about a stream with nothing to reuse
        raise RuntimeError(f"claims run {FOLDER}/{name}: hit rate {run.hit_rate}, expected 0")
    return run


def _text(runs: dict, cis: dict, design: str, load: str, seeds: range) -> str:
    off = [runs[(design, load, OFF, s)] for s in seeds]
    on = [runs[(design, load, ON, s)] for s in seeds]

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    return (
        f"{design} {load}: throughput {mean([r.throughput for r in off]):,.0f} -> "
        f"{mean([r.throughput for r in on]):,.0f} tok/s, mean TTFT "
        f"{mean([r.mean_ttft_ms for r in off]):,.1f} -> {mean([r.mean_ttft_ms for r in on]):,.1f} "
        f"ms; cost {describe(cis[(design, load)], 100, '%')}; {arm_label(design, ON)} stored "
        f"{mean([r.stored_gb for r in on]):,.1f} GB, largest store backlog "
        f"{max(r.max_store_backlog_s for r in on):.2f} s, load stall "
        f"{max(r.load_stall_s for r in on):.2f} s"
    )


def _setup(prompts: int, seeds: int) -> str:
    return (
        f"unique workload ({prompts} prompts of 1,024 tokens, 128 out, no token shared: hit rate 0, "
        f"checked), one burst and Poisson {RATE:g} req/s, {seeds} seeds each (the burst is "
        f"deterministic in the seed; Poisson draws its arrivals from it); simulated H100 "
        f"Llama-3.1-8B (KV {DEVICE:,} tokens, host link 50 GB/s one way); each design's pairing "
        f"with a host tier of {4 * DEVICE:,} tokens off and on (vLLM's CPU tier stores every prompt "
        "chunk, HiCache writes every finished request through); llm-d measured gpt-oss-120b, which "
        "has no preset here"
    )


CLAIM = Claim(
    27,
    "tier_cost",
    "A host (CPU) KV tier costs throughput when nothing is reused.",
    "llm-d tiered prefix-cache guide (gpt-oss-120b, 5 QPS, vLLM with its CPU offloading "
    "connector: -12.3% throughput with the tier on); vLLM 0.33 OffloadingConnector, SGLang 0.5.23 "
    "HiCache write_through",
    "Per design and load, the throughput cost 1 - (tier on / tier off) over 3 paired seeds: holds "
    "at a cell when its 95% t-interval lies wholly at or above 1%; does not hold when wholly below; "
    "undecided when it straddles; 'depends on the design and load' when one cell holds and another "
    "does not. The hit rate must be 0 in every run. Simulated: the only cost the model has is the "
    "host link (stores queue off the critical path), not the connector's CPU work or store fences.",
    measure,
)
