"""Replay whole Mooncake traces through the simulated executor, both engines, three KV capacities.

    python scripts/replay_traces.py [--hardware h100_llama3_70b_fp8] [--traces conversation synthetic]

Every run is `python -m harness workload=mooncake_<trace> workload.max_requests=null
executor=simulated hardware=<preset> engine=<apc|radix> engine.kv_capacity_tokens=<C>` (trace
timestamps, every request), so results land in the harness's normal files under
results/replay/<stamp>/. Capacities are multiples of what the preset's HBM holds after the weights
(x1, x4, x16; the larger ones stand for an added host-memory tier). Reports per run: wall time,
the engine loop's own time, peak RSS of the child, hit rate, TTFT, throughput.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness_child import ROOT, hardware_override, run_harness  # noqa: E402

sys.path.insert(0, str(ROOT))

from engines.cache import DESIGNS  # noqa: E402  (every design by default)

# Upstream-like GPU serving budgets, equal for both engines (docs/benchmarking.md §2): vLLM V1's online
# default chunk of 8192 tokens (SGLang's chunked_prefill_size on 80 GB cards), 256 running requests.
ENGINE_KNOBS = ("engine.max_num_batched_tokens=8192", "engine.max_num_seqs=256")
# Mooncake prompts reach 126k (conversation) and 191k (synthetic) tokens; the cost model, not the
# token model, prices them, so the token model's context limit is lifted.
MODEL_KNOBS = ("model.max_position_embeddings=262144",)
SUMMARY_FIELDS = (
    "status",
    "completed",
    "duration",
    "hit_rate",
    "ideal_hit_rate",
    "theoretical_hit_rate_capped",
    "median_ttft_ms",
    "p90_ttft_ms",
    "median_tpot_ms",
    "request_throughput",
    "output_throughput",
    "evictions",
    "num_steps",
    "cache_bookkeeping_ms",
    "wall_s",
)


def kv_capacity_of(hardware: str) -> int:
    """KV tokens the preset's HBM holds after the weights (HardwareConfig.kv_capacity_tokens)."""
    from hydra import compose, initialize_config_dir

    from engines.simulate.cost_model import HardwareConfig
    from harness.config.schema import to_schema

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        hw = to_schema(compose(f"hardware/{hardware}")["hardware"], HardwareConfig)
    return hw.kv_capacity_tokens()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hardware", default="h100_llama3_70b_fp8")
    ap.add_argument("--traces", nargs="+", default=["conversation", "synthetic"])
    ap.add_argument("--engines", nargs="+", default=DESIGNS.names())
    ap.add_argument(
        "--multipliers", nargs="+", type=int, default=[1, 4, 16], help="x HBM KV capacity"
    )
    ap.add_argument("--max-requests", default="null", help="null = every request")
    ap.add_argument("--slowdown", type=float, default=1.0, help="arrival = timestamp * slowdown")
    ap.add_argument(
        "--bound-granularities",
        default="512",
        help="granularities of the runner's hit-rate bounds ('all' = unrestricted; at g=1 a whole "
        "trace needs ~25 GB and minutes, see the report)",
    )
    ap.add_argument("overrides", nargs="*", help="extra harness overrides for every run")
    args = ap.parse_args()

    base = kv_capacity_of(args.hardware)
    # Multiples of 512 tokens: valid for APC blocks of 16 and radix pages of 1 alike.
    capacities = [base * m // 512 * 512 for m in args.multipliers]
    bounds = (
        None
        if args.bound_granularities == "all"
        else [int(g) for g in args.bound_granularities.split(",")]
    )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = ROOT / "results/replay" / stamp
    rows = []
    print(
        f"hardware {args.hardware}: HBM holds {base:,} KV tokens; capacities {capacities}",
        flush=True,
    )
    for trace in args.traces:
        for engine in args.engines:
            for capacity in capacities:
                overrides = [
                    f"workload=mooncake_{trace}",
                    f"workload.max_requests={args.max_requests}",
                    f"workload.slowdown={args.slowdown}",
                    "executor=simulated",
                    hardware_override(args.hardware),
                    f"engine={engine}",
                    f"engine.kv_capacity_tokens={capacity}",
                    *ENGINE_KNOBS,
                    *MODEL_KNOBS,
                    "label=replay_traces",
                    f"hydra.run.dir={out_dir}/{trace}-{engine}-kv{capacity}",
                    *args.overrides,
                ]
                run = run_harness(overrides, bound_granularities=bounds)
                row = {
                    "trace": trace,
                    "engine": engine,
                    "kv_capacity_tokens": capacity,
                    "kv_capacity_blocks_512": capacity // 512,
                    "child_wall_s": run.wall_s,
                    "peak_rss_mib": run.peak_rss_mib,
                    "returncode": run.returncode,
                }
                summary = run.summary or {}
                row.update({k: summary.get(k) for k in SUMMARY_FIELDS})
                if run.summary is None:
                    row["stderr_tail"] = run.stderr_tail
                rows.append(row)
                print(_line(row), flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {
        "hardware": args.hardware,
        "hbm_kv_tokens": base,
        "slowdown": args.slowdown,
        "engine_knobs": list(ENGINE_KNOBS),
        "bound_granularities": bounds,
        "rows": rows,
    }
    (out_dir / "replay.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {out_dir / 'replay.json'}")


def _line(r: dict) -> str:
    def num(key: str, fmt: str) -> str:
        value = r.get(key)
        return "-" if value is None else format(value, fmt)

    return (
        f"{r['trace']:12s} {r['engine']:5s} kv {r['kv_capacity_tokens']:>9,d} "
        f"({r['kv_capacity_blocks_512']:>5d} x512) | wall {r['child_wall_s']:6.1f} s "
        f"(engine {num('wall_s', '6.1f')} s) rss {num('peak_rss_mib', '7.0f')} MiB | "
        f"hit {num('hit_rate', '.4f')} | TTFT med {num('median_ttft_ms', '.0f')} ms | "
        f"out {num('output_throughput', '.0f')} tok/s | sim duration {num('duration', '.0f')} s | "
        f"status {r.get('status')}"
    )


if __name__ == "__main__":
    main()
