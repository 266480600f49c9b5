"""Claim 26: HiCache gives up to 6x throughput and 80% lower TTFT on multi-turn chat (SGLang's
HiCache blog, bench_multiturn with 80 clients x 10 rounds).

radix (SGLang's tree) with and without its host tier, at the same device tokens, on the shape of
the `tiers_multiturn` suite (docs/tiers.md §8.2): each user's next turn is sent when its answer
ends, a 1,024-token system prompt, 2,048 tokens of history per user, 512-token questions and
256-token answers, Llama-3.1-8B on one simulated H100 with 65,536 device tokens and 4x that on the
host for 40 users x 8 rounds (the suite), and the blog's 80 clients x 10 rounds with the capacities
scaled with the users (the suite's device and host tokens per user). apc with vLLM's CPU tier is
beside it at the same tokens.
"""

from __future__ import annotations

from harness.claims.arms import GPU_BUDGETS, RADIX
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, undecided
from harness.claims.tier_arms import DESIGNS, OFF, ON, TierRun, arm_label, tier_arm

FOLDER = "26-tier_multiturn"
THROUGHPUT, TTFT = 6.0, 5.0  # the blog's factors: 6x throughput, 80% lower TTFT = 5x lower
HALF = 2.0  # under half of both factors at every setting is "does not hold"
SUITE_USERS, SUITE_DEVICE = 40, 65536  # tiers_multiturn: device tokens for its 40 users
SHAPE = (
    "executor=simulated",
    "hardware=h100_llama3_8b_bf16",
    "workload=multiturn",
    "workload.system_prompt_len=1024",
    "workload.user_history_len=2048",
    "workload.question_len=512",
    "workload.answer_len=256",
    "model.max_position_embeddings=32768",
    *GPU_BUDGETS,
)


def measure(ctx: Context) -> Finding:
    settings: tuple[tuple[int, int], ...] = ctx.size(((10, 4),), ((40, 8), (80, 10)))
    cells = {s: _cell(ctx, s[0], s[1]) for s in settings}
    gains = {s: _gains(cells[s], RADIX) for s in settings}
    return Finding(
        setup=_setup(settings),
        measured="per setting and design, tier off and on: hit rate (host part), total token "
        "throughput and mean TTFT; the tier's gain as throughput on / off and TTFT off / on (the "
        "same tokens run in both arms, so every throughput measure gives the same ratio); the "
        "blog's figures beside",
        result="; ".join(_text(s, cells[s]) for s in settings)
        + f" (published: up to {THROUGHPUT:g}x throughput and 80% lower TTFT, SGLang with HiCache "
        "against without, bench_multiturn 80 clients x 10 rounds on a GPU)",
        verdict=_verdict(gains),
        figure=Figure(
            "Multi-turn chat: what the host tier gives, tier on over off",
            "gain (x)",
            {
                f"{u} users x {r} rounds": {
                    f"{d} {what}": g
                    for d in DESIGNS
                    for what, g in zip(("throughput", "TTFT"), _gains(cells[(u, r)], d))
                }
                for u, r in settings
            },
            reference=THROUGHPUT,
            reference_label=f"blog's {THROUGHPUT:g}x throughput",
        ),
        details=[
            {"users": u, "rounds": r, "device_tokens": device(u), **_runs(cells[(u, r)])}
            for u, r in settings
        ],
    )


def device(users: int) -> int:
    """Device tokens for `users`: the suite's per user (16,384 for 10, 131,072 for 80)."""
    return SUITE_DEVICE * users // SUITE_USERS


def _cell(ctx: Context, users: int, rounds: int) -> dict[tuple[str, str], TierRun]:
    runs = {}
    for design in DESIGNS:
        for state, host in ((OFF, 0), (ON, 4 * device(users))):
            overrides = (
                *SHAPE,
                f"workload.num_users={users}",
                f"workload.num_rounds={rounds}",
                f"engine.kv_capacity_tokens={device(users)}",
                *tier_arm(design, host),
            )
            name = f"{users}x{rounds}-{design}-{'on' if state == ON else 'off'}"
            runs[(design, state)] = TierRun.of(ctx.run(FOLDER, name, overrides))
    return runs


def _gains(cell: dict[tuple[str, str], TierRun], design: str) -> tuple[float, float]:
    """(throughput on / off, mean TTFT off / on) of the design's tier."""
    off, on = cell[(design, OFF)], cell[(design, ON)]
    return on.throughput / off.throughput, off.mean_ttft_ms / on.mean_ttft_ms


def _text(setting: tuple[int, int], cell: dict[tuple[str, str], TierRun]) -> str:
    parts = []
    for design in DESIGNS:
        off, on = cell[(design, OFF)], cell[(design, ON)]
        tput, ttft = _gains(cell, design)
        parts.append(
            f"{arm_label(design, ON)}: hits {off.hit_rate:.1%} -> {on.hit_rate:.1%} ({on.host_hit_rate:.1%} "
            f"from the host), throughput {off.throughput:,.0f} -> {on.throughput:,.0f} tok/s "
            f"({tput:.2f}x), mean TTFT {off.mean_ttft_ms / 1e3:,.2f} -> {on.mean_ttft_ms / 1e3:,.2f} "
            f"s ({1 - 1 / ttft:.0%} lower, {ttft:.2f}x)"
        )
    return f"{setting[0]} users x {setting[1]} rounds: " + "; ".join(parts)


def _verdict(gains: dict[tuple[int, int], tuple[float, float]]) -> str:
    """Each published figure is an "up to": reached at some setting, or below half of it at
    every one, or between."""
    best = (max(g[0] for g in gains.values()), max(g[1] for g in gains.values()))
    states = [
        "reached" if b >= claimed else "under half" if b < claimed / HALF else "between"
        for b, claimed in zip(best, (THROUGHPUT, TTFT))
    ]
    if states == ["reached", "reached"]:
        return HOLDS
    if states == ["under half", "under half"]:
        return FAILS
    return undecided(
        f"throughput {best[0]:.2f}x ({states[0]} {THROUGHPUT:g}x), TTFT {best[1]:.2f}x lower "
        f"({states[1]} {TTFT:g}x)"
    )


def _runs(cell: dict[tuple[str, str], TierRun]) -> dict[str, object]:
    return {arm_label(d, s): run.__dict__ for (d, s), run in cell.items()}


def _setup(settings: tuple[tuple[int, int], ...]) -> str:
    shown = " and ".join(
        f"{u} users x {r} rounds ({device(u):,} device and {4 * device(u):,} host tokens)"
        for u, r in settings
    )
    return (
        f"multiturn (the tiers_multiturn suite's shape: 1,024-token system prompt, 2,048 tokens of "
        f"history per user, 512-token questions, 256-token answers, each user's next turn sent when "
        f"its answer ends) at {shown} (the blog: 80 clients x 10 rounds); simulated H100 "
        f"Llama-3.1-8B, capacities the suite's per user (host link 50 GB/s one way); radix with and without HiCache (write_through, page 1), apc with and "
        f"without vLLM's CPU tier beside; deterministic (one seed: fixed lengths, the simulated "
        f"times do not depend on the tokens)"
    )


CLAIM = Claim(
    26,
    "tier_multiturn",
    "SGLang's hierarchical cache (HiCache) gives up to 6x throughput and 80% lower TTFT on "
    "multi-turn chat.",
    "LMSYS blog on SGLang HiCache, 2025 (bench_multiturn, 80 clients x 10 rounds, against SGLang "
    "without HiCache); SGLang 0.5.23 --enable-hierarchical-cache (mem_cache/hiradix_cache.py)",
    "Decided on radix with HiCache against radix without it, same device tokens; apc with vLLM's CPU "
    "tier beside. Both figures are 'up to': throughput on / off and mean TTFT off / on (80% lower "
    "is 5x) are taken at their best setting. Holds when both reach the published figures (6x and "
    "5x); does not hold when both stay under half of them (3x and 2.5x, i.e. 60% lower) at every "
    "setting; undecided otherwise, naming each. Deterministic runs: exact values, no interval.",
    measure,
)
