"""Time whole-trace replays: wall time and peak RSS of each (trace, engine) run, one child each.

    python scripts/bench_trace.py [--traces conversation synthetic] [--engines apc radix]
                                  [--kv-capacity-tokens 1791488] [--repeats 1]
                                  [--decode-runs on|off|both]

Every run is the trace_h100 suite's setting (conf/suite/trace_h100.yaml: H100 / Llama-3.3-70B fp8
roofline, 8,192-token chunks, 256 running, 8x slowdown, bounds at 512 only) through
`python -m harness` in a child process, so peak RSS is the replay's own (getrusage of the child).
Prints per run: the child's wall time (imports, trace expansion, replay, bounds, files), its CPU
time and the machine's steal time meanwhile (on a shared VM wall time exceeds CPU time by what
the hypervisor gives other guests; on an idle machine they agree), the engine loop's own time
(`wall_s` of summary.json), peak RSS, and a digest of every request's cached tokens,
preemptions, recomputed tokens and simulated times, so two code versions can be compared request
by request. With --repeats > 1 the runs of each arm interleave (A, B, A, B) and
the median is reported. Writes JSON to results/bench_trace/<stamp>/bench.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness_child import ROOT, run_harness  # noqa: E402

sys.path.insert(0, str(ROOT))
from engines.cache import DESIGNS  # noqa: E402  (every design by default)

# conf/suite/trace_h100.yaml (and its _synthetic variant's context), one capacity, one arm.
SUITE_KNOBS = {
    "conversation": ("workload=mooncake_conversation", "model.max_position_embeddings=131072"),
    "synthetic": ("workload=mooncake_synthetic", "model.max_position_embeddings=262144"),
}
HARDWARE, SLOWDOWN = "h100_llama3_70b_fp8", 8.0
COMMON_KNOBS = (
    "workload.max_requests=null",
    "executor=simulated",
    f"hardware={HARDWARE}",
    f"load.slowdown={SLOWDOWN}",
    "engine.max_num_batched_tokens=8192",
    "engine.max_num_seqs=256",
)
# Outcome columns of requests.parquet that must not change between code versions.
PINNED_COLUMNS = (
    "request_id",
    "cached_tokens",
    "num_preemptions",
    "recomputed_tokens",
    "scheduled_s",
    "first_token_s",
    "finish_s",
)


def outcome_digest(run_dir: Path) -> str | None:
    """sha1 over every request's pinned outcome columns (bit-exact floats), in table order."""
    import pandas as pd

    path = run_dir / "requests.parquet"
    if not path.exists():
        return None
    df = pd.read_parquet(path, columns=list(PINNED_COLUMNS))
    h = hashlib.sha1()
    for row in df.itertuples(index=False):
        h.update(repr(tuple(row)).encode())
    return h.hexdigest()[:16]


def run_one(
    trace: str, engine: str, capacity: int, out_dir: Path, rep: int, runs: bool = True
) -> dict:
    run_dir = out_dir / f"{trace}-{engine}-kv{capacity}-{'runs' if runs else 'steps'}-r{rep}"
    overrides = [
        *SUITE_KNOBS[trace],
        *COMMON_KNOBS,
        f"engine={engine}",
        f"engine.kv_capacity_tokens={capacity}",
        f"engine.decode_runs={str(runs).lower()}",
        f"hydra.run.dir={run_dir}",
    ]
    run = run_harness(overrides, bound_granularities=[512])
    summary = run.summary or {}
    return {
        "trace": trace,
        "engine": engine,
        "kv_capacity_tokens": capacity,
        "repeat": rep,
        "decode_runs": runs,
        "child_wall_s": run.wall_s,
        "child_cpu_s": run.cpu_s,
        "steal_s": run.steal_s,
        "engine_wall_s": summary.get("wall_s"),
        "peak_rss_mib": run.peak_rss_mib,
        "status": summary.get("status"),
        "completed": summary.get("completed"),
        "hit_rate": summary.get("hit_rate"),
        "evictions": summary.get("evictions"),
        "num_steps": summary.get("num_steps"),
        "median_ttft_ms": summary.get("median_ttft_ms"),
        "p99_ttft_ms": summary.get("p99_ttft_ms"),
        "duration": summary.get("duration"),
        "cache_bookkeeping_ms": summary.get("cache_bookkeeping_ms"),
        "digest": outcome_digest(run_dir),
        "stderr_tail": None if run.returncode == 0 else run.stderr_tail,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--traces", nargs="+", default=["conversation", "synthetic"], choices=list(SUITE_KNOBS)
    )
    ap.add_argument("--engines", nargs="+", default=DESIGNS.names())
    ap.add_argument(
        "--kv-capacity-tokens",
        type=int,
        nargs="+",
        default=[1_791_488],
        help="one or more; the trace_h100 suite sweeps 447488 1791488 7167488",
    )
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument(
        "--decode-runs",
        choices=["on", "off", "both"],
        default="on",
        help="engine.decode_runs; `both` interleaves the two per arm (same digests expected)",
    )
    args = ap.parse_args()
    out_dir = ROOT / "results/bench_trace" / time.strftime("%Y%m%d-%H%M%S")
    modes = {"on": [True], "off": [False], "both": [True, False]}[args.decode_runs]
    arms = [
        (t, e, c, m)
        for t in args.traces
        for c in args.kv_capacity_tokens
        for e in args.engines
        for m in modes
    ]
    rows = []
    for rep in range(args.repeats):  # interleaved: every arm once per repeat
        for trace, engine, capacity, runs in arms:
            row = run_one(trace, engine, capacity, out_dir, rep, runs)
            rows.append(row)
            print(_line(row), flush=True)
    if args.repeats > 1:
        for trace, engine, capacity, runs in arms:
            arm = (trace, engine, capacity, runs)
            mine = [
                r
                for r in rows
                if (r["trace"], r["engine"], r["kv_capacity_tokens"], r["decode_runs"]) == arm
            ]
            wall = statistics.median(r["child_wall_s"] for r in mine)
            cpu = statistics.median(r["child_cpu_s"] for r in mine)
            rss = statistics.median(r["peak_rss_mib"] or 0.0 for r in mine)
            mode = "runs" if runs else "steps"
            print(
                f"median {trace:12s} {engine:5s} kv {capacity:,d} {mode:5s} wall {wall:6.1f} s  "
                f"cpu {cpu:6.1f} s  rss {rss:7.0f} MiB"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.json").write_text(json.dumps({"rows": rows}, indent=1))
    write_table(rows, out_dir / "trace_h100.csv")
    print(
        f"wrote {out_dir / 'bench.json'} and trace_h100.csv (`python -m harness.report {out_dir}` draws them)"
    )


# results/reference/trace_h100.csv: one row per run, the outcome and what it cost.
TABLE_COLUMNS = (
    "workload",
    "hardware",
    "slowdown",
    "kv_capacity_tokens",
    "engine",
    "completed",
    "child_wall_s",
    "engine_wall_s",
    "peak_rss_mib",
    "hit_rate",
    "median_ttft_ms",
    "p99_ttft_ms",
    "duration",
    "cache_bookkeeping_ms",
)


def write_table(rows: list[dict], path: Path) -> None:
    import pandas as pd

    table = pd.DataFrame(
        {
            "workload": f"mooncake_{r['trace']}",
            "hardware": HARDWARE,
            "slowdown": SLOWDOWN,
            **{k: r.get(k) for k in TABLE_COLUMNS[3:]},
        }
        for r in rows
    )
    decimals = {k: 1 for k in TABLE_COLUMNS[6:]} | {"hit_rate": 4}
    table.round(decimals).to_csv(path, index=False)


def _line(r: dict) -> str:
    engine_s = r["engine_wall_s"]
    rss = r["peak_rss_mib"]
    steal = "" if r["steal_s"] is None else f", machine steal {r['steal_s']:.1f} s"
    return (
        f"{r['trace']:12s} {r['engine']:5s} {'runs' if r['decode_runs'] else 'steps':5s} "
        f"kv {r['kv_capacity_tokens']:,d} | "
        f"wall {r['child_wall_s']:6.1f} s (cpu {r['child_cpu_s']:.1f} s{steal}; "
        f"engine loop {'-' if engine_s is None else f'{engine_s:.1f}'} s) | "
        f"peak rss {'-' if rss is None else f'{rss:.0f}'} MiB | steps {r['num_steps']} | "
        f"evictions {r['evictions']} | hit {r['hit_rate']} | digest {r['digest']} | {r['status']}"
        + (f"\n  {r['stderr_tail']}" if r["stderr_tail"] else "")
    )


if __name__ == "__main__":
    main()
