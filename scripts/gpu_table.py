"""End-to-end table of the GPU check: each run on the real executor beside `executor=simulated` on
the matching hardware preset (TTFT, TPOT, duration, real / simulated), one harness process a run.

Rows (Llama-3.1-8B shape, bf16, random weights; kv 262,144 tokens, 256 sequences, 8,192-token
budget, burst): system_prompt 16 x 8 (2,048 + 128, 128 out), multiturn 10 users x 5 rounds (1,000 +
2,000, 100-token answers), unique 32 x 2,048 (32 out) with caching on and off; apc and radix each at
its default page (16 / 1) and swapped. The most telling rows run first: rows not started before
--budget-s are listed as skipped. --dry-run: model=tiny and tiny workloads on CPU (every command of
a GPU run, with figures that mean nothing). Writes <out>/table.md, table.csv, table.json and every
run's folder under <out>/runs/.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HARDWARE = {"h200": "h200_llama3_8b_bf16", "h100": "h100_llama3_8b_bf16"}
# The Llama-3.1-8B shape (config.json of meta-llama/Llama-3.1-8B) on random weights.
MODEL_8B = (
    "model=tiny", "model.name=llama3.1-8b-shape", "model.vocab_size=128256",
    "model.hidden_size=4096", "model.intermediate_size=14336", "model.num_layers=32",
    "model.num_heads=32", "model.num_kv_heads=8", "model.head_dim=128",
    "model.rope_theta=500000.0", "model.max_position_embeddings=131072",
    "model.tie_word_embeddings=false", "model.dtype=bfloat16",
)  # fmt: skip
ENGINE = ("engine.kv_capacity_tokens=262144", "engine.max_num_seqs=256",
          "engine.max_num_batched_tokens=8192")  # fmt: skip
WORKLOADS = {
    "system_prompt": ("workload.num_groups=16", "workload.prompts_per_group=8",
                      "workload.system_prompt_len=2048", "workload.question_len=128",
                      "workload.output_len=128"),
    "multiturn": ("workload.num_users=10", "workload.num_rounds=5",
                  "workload.system_prompt_len=1000", "workload.user_history_len=2000",
                  "workload.answer_len=100"),
    "unique": ("workload.num_prompts=32", "workload.prompt_len=2048", "workload.output_len=32"),
}  # fmt: skip
DRY_WORKLOADS = {
    "system_prompt": ("workload.num_groups=2", "workload.prompts_per_group=2",
                      "workload.system_prompt_len=48", "workload.question_len=8",
                      "workload.output_len=4"),
    "multiturn": ("workload.num_users=2", "workload.num_rounds=2",
                  "workload.system_prompt_len=32", "workload.user_history_len=16",
                  "workload.question_len=8", "workload.answer_len=4"),
    "unique": ("workload.num_prompts=4", "workload.prompt_len=48", "workload.output_len=4"),
}  # fmt: skip
METRICS = ("mean_ttft_ms", "mean_tpot_ms", "duration")


@dataclass(frozen=True)
class RowSpec:
    workload: str
    engine: str
    page: int
    caching: bool

    @property
    def name(self) -> str:
        return (
            f"{self.workload}-{self.engine}-page{self.page}-cache{'on' if self.caching else 'off'}"
        )


def row_specs() -> list[RowSpec]:
    """Default pages first (the comparison as shipped), then the swapped pages (the page-size
    effect), then caching off; system_prompt leads every group."""
    rows = []
    default_page = default_pages()
    for swapped in (False, True):
        for workload in WORKLOADS:
            for engine, page in default_page.items():
                other = 1 if page == 16 else 16
                rows.append(RowSpec(workload, engine, other if swapped else page, True))
    rows += [RowSpec("unique", e, p, False) for e, p in default_page.items()]
    rows += [RowSpec("unique", e, 1 if p == 16 else 16, False) for e, p in default_page.items()]
    return rows


def default_pages() -> dict[str, int]:
    """Each registered cache design at its preset's block or page size (engines/cache DESIGNS)."""
    sys.path.insert(0, str(ROOT))
    from engines.cache import designs

    return {d.name: d.block_size for d in designs()}


def model_init_override() -> list[str]:
    """`model.init_device=target` where this checkout has it (random weights drawn on the GPU in a
    second instead of minutes on its CPU); nothing otherwise."""
    sys.path.insert(0, str(ROOT))
    from engines.model.config import ModelConfig

    return ["model.init_device=target"] if "init_device" in ModelConfig.__dataclass_fields__ else []


def overrides(spec: RowSpec, executor: str, args: argparse.Namespace) -> list[str]:
    workloads = DRY_WORKLOADS if args.dry_run else WORKLOADS
    model = ["model=tiny"] if args.dry_run else [*MODEL_8B, *model_init_override()]
    out = [
        f"workload={spec.workload}",
        *workloads[spec.workload],
        f"engine={spec.engine}",
        f"engine.block_size={spec.page}",
        f"engine.prefix_caching={str(spec.caching).lower()}",
        *model,
        f"executor={executor}",
        f"seed={args.seed}",
    ]
    if not args.dry_run:
        out += ENGINE
    if executor == "simulated":
        out += [f"hardware={args.hardware}", "device=cpu"]
    elif args.dry_run:
        out += ["device=cpu"]
    return out


def run_one(spec: RowSpec, executor: str, args: argparse.Namespace) -> dict[str, Any]:
    run_dir = args.out / "runs" / f"{spec.name}-{executor}"
    cmd = [sys.executable, "-m", "harness", *overrides(spec, executor, args)]
    cmd.append(f"hydra.run.dir={run_dir}")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    if executor == "simulated":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the cost model never touches the GPU
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.run_timeout_s
        )
        rc, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, log = 124, f"timed out after {exc.timeout} s"
    wall_s = time.perf_counter() - start
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")
    (run_dir / "output.txt").write_text(log)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if rc == 0 and summary_path.exists() else {}
    status = "ok" if summary else f"failed (exit {rc}, see {run_dir / 'output.txt'})"
    return {"status": status, "process_wall_s": round(wall_s, 1), **summary}


def ratio(real: Any, sim: Any) -> float | None:
    if not isinstance(real, (int, float)) or not isinstance(sim, (int, float)) or not sim:
        return None
    return round(real / sim, 3)


def build_row(spec: RowSpec, real: dict[str, Any], sim: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {**asdict(spec), "real_status": real["status"]}
    row["sim_status"] = sim["status"]
    for key in METRICS:
        row[f"{key}_real"] = real.get(key)
        row[f"{key}_sim"] = sim.get(key)
        row[f"{key}_ratio"] = ratio(real.get(key), sim.get(key))
    for key in ("hit_rate", "cache_bookkeeping_ms", "num_preemptions"):
        row[f"{key}_real"] = real.get(key)
        row[f"{key}_sim"] = sim.get(key)
    return row


def format_markdown(rows: list[dict[str, Any]], header: str) -> str:
    def f(x: Any, spec: str = ",.1f") -> str:
        return "–" if not isinstance(x, (int, float)) else format(x, spec)

    lines = [
        header,
        "",
        "| workload | engine | page | caching | TTFT ms real / sim | x | TPOT ms real / sim | x "
        "| duration s real / sim | x | hit rate real / sim | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        status = "ok" if r["real_status"] == r["sim_status"] == "ok" else (
            f"real: {r['real_status']}; sim: {r['sim_status']}"
        )  # fmt: skip
        lines.append(
            f"| {r['workload']} | {r['engine']} | {r['page']} | {'on' if r['caching'] else 'off'} "
            f"| {f(r['mean_ttft_ms_real'])} / {f(r['mean_ttft_ms_sim'])} | {f(r['mean_ttft_ms_ratio'], '.2f')} "
            f"| {f(r['mean_tpot_ms_real'], '.2f')} / {f(r['mean_tpot_ms_sim'], '.2f')} | {f(r['mean_tpot_ms_ratio'], '.2f')} "
            f"| {f(r['duration_real'], '.2f')} / {f(r['duration_sim'], '.2f')} | {f(r['duration_ratio'], '.2f')} "
            f"| {f(r['hit_rate_real'], '.3f')} / {f(r['hit_rate_sim'], '.3f')} | {status} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument(
        "--hardware", default=None, help="simulated preset (default: from GPU name)"
    )
    parser.add_argument("--dry-run", action="store_true", help="model=tiny, tiny workloads, CPU")
    parser.add_argument("--limit", type=int, default=None, help="only the first N rows")
    parser.add_argument("--budget-s", type=float, default=300.0, help="no real run starts later")
    parser.add_argument("--run-timeout-s", type=float, default=240.0)
    parser.add_argument("--sim-workers", type=int, default=4, help="simulated runs in parallel")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.hardware is None:
        args.hardware = HARDWARE["h200"]
        if not args.dry_run:
            import torch

            name = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
            args.hardware = HARDWARE["h100" if "H100" in name else "h200"]
    specs = row_specs()[: args.limit]
    args.out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    start = time.perf_counter()
    # The simulated runs (CPU only, in parallel) finish before the first real run starts: the real
    # executor's host path is part of what is measured, so nothing else runs beside it.
    with ThreadPoolExecutor(max_workers=args.sim_workers) as pool:
        sims = dict(zip(specs, pool.map(lambda spec: run_one(spec, "simulated", args), specs)))
    for spec in specs:
        if time.perf_counter() - start > args.budget_s:
            real = {"status": f"skipped (budget {args.budget_s:.0f} s spent)"}
        else:
            real = run_one(spec, "real", args)
        row = build_row(spec, real, sims[spec])
        results.append(row)
        print(f"{spec.name}: TTFT x{row['mean_ttft_ms_ratio']} TPOT x{row['mean_tpot_ms_ratio']} "
              f"duration x{row['duration_ratio']} ({row['real_status']})", flush=True)  # fmt: skip
    header = f"End-to-end, real vs executor=simulated hardware={args.hardware}" + (
        " (DRY RUN: model=tiny on CPU; the figures mean nothing)" if args.dry_run else ""
    )
    (args.out / "table.md").write_text(format_markdown(results, header))
    (args.out / "table.json").write_text(json.dumps(results, indent=2) + "\n")
    with (args.out / "table.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(results[0]) if results else ["workload"])
        writer.writeheader()
        writer.writerows(results)
    print(format_markdown(results, header))
    failed = [r for r in results if "failed" in r["real_status"] or r["sim_status"] != "ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
