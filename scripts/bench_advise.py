"""The cost of `python -m harness.advise` on 1,000 prompts (issue 46's budget: <= 2 min, --quick
<= 20 s on the 2-core CPU), measured in this process: wall time and this process's CPU time.

The traffic is written here, seeded: 10 system prompts of ~400 tokens, sessions of 1-4 turns
(each turn the previous prompt plus a ~30-word question), 32 output tokens, no arrival times,
1,000 lines in all (~750 k prompt tokens with the SmolLM2 tokenizer).

    python scripts/bench_advise.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import tempfile
import time
from pathlib import Path

WORDS = ("why", "how", "does", "the", "bike", "chain", "code", "review", "ticket", "reset")


def write_traffic(path: Path, num: int = 1000, seed: int = 0) -> Path:
    rng = random.Random(seed)
    systems = [
        f"You are assistant number {k} for team {k % 7}. "
        + " ".join(f"rule{k}-{j}: be concise and cite the manual section {j}." for j in range(40))
        for k in range(10)
    ]
    lines: list[str] = []
    session = 0
    while len(lines) < num:
        prompt, session = rng.choice(systems), session + 1
        for turn in range(rng.randint(1, 4)):
            if len(lines) >= num:
                break
            question = " ".join(rng.choice(WORDS) for _ in range(30))
            prompt += f" User question {session}-{turn}: {question}"
            line = {"prompt": prompt, "output_len": 32, "session": f"s{session}"}
            lines.append(json.dumps(line))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None, help="advice folder parent (default: a temp dir)")
    args = parser.parse_args()
    from harness.advise.__main__ import advise

    out = Path(args.out or tempfile.mkdtemp(prefix="bench-advise-"))
    traffic = write_traffic(out / "prompts_1000.jsonl")
    argv = ["workload=prompts", f"workload.path={traffic}", "--out", str(out), "--name", "advice"]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        code = advise([*argv, *(["--quick"] if args.quick else [])])
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    runs = sum(1 for _ in (out / "advice" / "runs").glob("*/*/summary.json")) if code == 0 else 0
    print(
        json.dumps(
            {
                "quick": args.quick,
                "exit": code,
                "runs": runs,
                "wall_s": round(wall, 1),
                "cpu_s": round(cpu, 1),
                "advice": str(out / "advice" / "advice.md"),
            }
        )
    )


if __name__ == "__main__":
    main()
