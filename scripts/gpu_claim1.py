"""Claim 1's GPU column: 0%-hit on/off pairs on the 8B shape, prefill-heavy and decode-heavy.

Runs harness.run.overhead's interleaved pairs (ABBA: on-off for even seeds, off-on for odd ones;
unique prompts, warm-up, flush, then the measured window through the run pipeline) for both
designs on the real executor, once per shape, and writes <out>/claim1.md with each design's
wall-clock on/off throughput ratio and its 95% t-interval on the log scale (docs/claims.md §5).
The claim holds on the device when the cost, 1 - ratio, has its interval's upper end below 1%.
--dry-run: model=tiny and tiny shapes on this CPU (every command of a GPU run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_table import ENGINE, MODEL_8B, model_init_override  # noqa: E402

from harness.run import overhead  # noqa: E402

SHAPES = {  # (prompts, prompt tokens, output tokens)
    "prefill-heavy": (32, 2048, 32),
    "decode-heavy": (32, 128, 512),
}
DRY_SHAPES = {"prefill-heavy": (4, 48, 4), "decode-heavy": (4, 8, 24)}


def shape_overrides(prompts: int, prompt_len: int, output_len: int, dry: bool) -> list[str]:
    model = ["model=tiny", "device=cpu"] if dry else [*MODEL_8B, *model_init_override(), *ENGINE]
    return [
        "executor=real",
        *model,
        f"workload.num_prompts={prompts}",
        f"workload.prompt_len={prompt_len}",
        f"workload.output_len={output_len}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=6, help="ABBA pairs per design and shape")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    if args.pairs < 3:
        print("error: --pairs must be >= 3 for an interval (docs/claims.md §5)", file=sys.stderr)
        return 2
    lines = [
        "| shape | design | pairs | on/off throughput (wall) | 95% interval | cost (1 - ratio) |",
        "|---|---|---|---|---|---|",
    ]
    for shape, sizes in (DRY_SHAPES if args.dry_run else SHAPES).items():
        runs, _ = overhead.run(args.pairs, shape_overrides(*sizes, args.dry_run))
        table = overhead.ratios(runs)
        args.out.mkdir(parents=True, exist_ok=True)
        runs.to_csv(args.out / f"claim1-{shape}-runs.csv", index=False)
        table.to_csv(args.out / f"claim1-{shape}-ratios.csv", index=False)
        for r in table[table["clock"] == "wall_s"].itertuples():
            lines.append(
                f"| {shape} | {r.engine} | {r.n_pairs} | {r.ratio:.4f} | [{r.ci_low:.4f}, "
                f"{r.ci_high:.4f}] | {1 - r.ratio:+.2%} (upper {1 - r.ci_low:+.2%}) |"
            )
    (args.out / "claim1.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
