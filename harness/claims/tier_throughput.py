"""Claim 28: with a high CPU hit rate, the CPU tier gives up to 9x throughput (vLLM's KV offloading
blog: H100, Llama-3.1-8B, concurrent requests, GPU prefix caching off).

Two passes of one prompt file, token ids, 1 output token each: the first sends N unique prompts
at once and fills the host tier; long after it ends, the second sends N prompts at once, a share h
of them repeats of the first pass (the CPU hit rate) and the rest fresh. The device cache holds a
quarter of a pass, so by the time the second pass reaches a repeat its blocks have left the device
(the blog's GPU prefix caching off; the device hits are reported). Throughput is the second pass's
tokens over its span, tier on over tier off (the control recomputes every repeat).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from harness.claims.arms import APC, GPU_BUDGETS, RADIX
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, undecided
from harness.claims.tier_arms import DESIGNS, OFF, ON, TIER_NAME, tier_arm

FOLDER = "28-tier_throughput"
CLAIMED = 9.0
GAP_S = 3600.0  # the second pass's arrival: long after the first has finished and been stored
PRESET = (
    "executor=simulated",
    "hardware=h100_llama3_8b_bf16",
    "model.max_position_embeddings=32768",
    *GPU_BUDGETS,
)


def measure(ctx: Context) -> Finding:
    prompts, length = ctx.size((8, 2048), (64, 8192))
    shares = ctx.size((0.5, 1.0), (0.0, 0.25, 0.5, 0.75, 1.0))
    cells = {(d, h): _cell(ctx, d, h, prompts, length) for h in shares for d in DESIGNS}
    best = max(cells[(APC, h)]["ratio"] for h in shares)
    return Finding(
        setup=_setup(prompts, length, shares),
        measured="per CPU hit rate (share of the second pass repeating the first) and design: the "
        "second pass's token throughput with the tier off and on, their ratio, its host and device "
        "hit rates; the blog's figure beside",
        result="; ".join(_text(cells[(d, h)], d, h) for h in shares for d in DESIGNS)
        + f" (published: up to {CLAIMED:g}x throughput at a high CPU hit rate, vLLM's connector "
        "on an H100)",
        verdict=_verdict(best),
        figure=Figure(
            "Second pass throughput, tier on over off, by CPU hit rate",
            "throughput on / off (x)",
            {
                f"{h:.0%} repeats": {TIER_NAME[d]: cells[(d, h)]["ratio"] for d in DESIGNS}
                for h in shares
            },
            reference=CLAIMED,
            reference_label=f"blog's {CLAIMED:g}x",
        ),
        details=[{"design": d, "share": h, **cells[(d, h)]} for h in shares for d in DESIGNS],
    )


def _stream(ctx: Context, share: float, prompts: int, length: int) -> str:
    """Pass one: `prompts` fresh prompts at 0 s; pass two at GAP_S: the first `share` of them
    again, then fresh ones. One draw (seed 0)."""
    rng = np.random.default_rng(0)
    first = [rng.integers(1, 30000, length).tolist() for _ in range(prompts)]
    repeats = round(share * prompts)
    second = first[:repeats] + [
        rng.integers(1, 30000, length).tolist() for _ in range(prompts - repeats)
    ]
    lines = [{"prompt_ids": p, "output_len": 1, "arrival_s": 0.0} for p in first]
    lines += [{"prompt_ids": p, "output_len": 1, "arrival_s": GAP_S} for p in second]
    path = ctx.out_dir / "runs" / FOLDER / "streams" / f"{prompts}x{length}-{share:g}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return str(path.resolve())


def _cell(ctx: Context, design: str, share: float, prompts: int, length: int) -> dict[str, float]:
    stream = _stream(ctx, share, prompts, length)
    device = prompts * length // 4
    passes = {}
    for state, host in ((OFF, 0), (ON, 2 * prompts * length)):
        overrides = (
            *PRESET,
            "workload=prompts",
            f"workload.path={stream}",
            f"engine.kv_capacity_tokens={device}",
            *tier_arm(design, host),
        )
        name = f"{share:g}-{design}-{'on' if state == ON else 'off'}"
        rows = ctx.run(FOLDER, name, overrides).requests
        passes[state] = rows[rows["arrival_s"] >= GAP_S]
    off, on = (_throughput(passes[s]) for s in (OFF, ON))
    second = passes[ON]
    prompt_tokens = float(second["prompt_tokens"].sum())
    return {
        "throughput_off": off,
        "throughput_on": on,
        "ratio": on / off,
        "host_hit_rate": float(second["host_cached_tokens"].sum()) / prompt_tokens,
        "device_hit_rate": float((second["cached_tokens"] - second["host_cached_tokens"]).sum())
        / prompt_tokens,
    }


def _throughput(rows: pd.DataFrame) -> float:
    """Tokens in and out over the pass's span, its first arrival to its last finish."""
    tokens = float(rows["prompt_tokens"].sum() + rows["output_tokens"].sum())
    return tokens / float(rows["finish_s"].max() - rows["arrival_s"].min())


def _text(cell: dict[str, float], design: str, share: float) -> str:
    return (
        f"{design} {share:.0%} repeats: {cell['throughput_off']:,.0f} -> "
        f"{cell['throughput_on']:,.0f} tok/s ({cell['ratio']:.2f}x; host hits "
        f"{cell['host_hit_rate']:.1%}, device {cell['device_hit_rate']:.1%})"
    )


def _verdict(best: float) -> str:
    if best >= CLAIMED:
        return HOLDS
    if best < CLAIMED / 2:
        return FAILS
    return undecided(f"best {best:.2f}x, between {CLAIMED / 2:g}x and {CLAIMED:g}x")


def _setup(prompts: int, length: int, shares: tuple[float, ...]) -> str:
    return (
        f"two passes of {prompts} prompts of {length:,} tokens (1 output token each), each pass "
        f"sent at once, the second {GAP_S:,.0f} s after the first; in the second a share of "
        f"{', '.join(f'{h:.0%}' for h in shares)} repeats the first pass (the CPU hit rate), the "
        f"rest fresh; simulated H100 Llama-3.1-8B (host link 50 GB/s one way), device cache "
        f"{prompts * length // 4:,} tokens (a quarter of a pass), host tier {2 * prompts * length:,}; "
        f"{APC} + {TIER_NAME[APC]} and {RADIX} + {TIER_NAME[RADIX]}, each tier off (the control: "
        "repeats recomputed) and on; throughput over the second pass's span; deterministic (one "
        "draw of the prompts, seed 0); the blog's prompt and output lengths are not restated here"
    )


CLAIM = Claim(
    28,
    "tier_throughput",
    "At a high CPU hit rate, offloading KV to the CPU tier gives up to 9x throughput on concurrent "
    "requests.",
    "vLLM blog 'Inside vLLM's new KV offloading connector' (H100, Llama-3.1-8B, GPU prefix caching "
    "off); vLLM 0.33 OffloadingConnector",
    "Decided on apc + CPU tier (vLLM's offloading connector: the blog's engine), radix + HiCache "
    "beside: the second "
    "pass's throughput with the tier on over off, at its best CPU hit rate ('up to'). Holds when it "
    "reaches 9x; does not hold when it stays under 4.5x at every hit rate; undecided in between. "
    "Device hits of the second pass are reported. Deterministic runs: exact values, no interval.",
    measure,
)
