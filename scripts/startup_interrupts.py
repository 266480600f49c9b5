"""Interrupt many starts of the two entry points and count how each ended.

    python scripts/startup_interrupts.py [--starts 80] [--seed 0] [--min-s 0.05] [--max-s 6]

Each start of `python -m harness.builtin_server` (a real tokenizer's model on CPU) gets SIGINT or
SIGTERM after a delay drawn from [min-s, max-s]; each start of `python -m harness` (the tiny
one-request run the tests use) the same, with the run folder in a temporary directory. A start
ends well when it ends as the entry point's docstring promises: one line and exit 130 while
starting, exit 0 once the server says it serves, 130 with a run's own `error:` line once a run
began (0 if it finished first); never a traceback, a signal death or an abort. The per-entry counts, and each other ending in
full, are printed. One test per entry point samples three delays (tests/live/test_serve_cli.py,
tests/live/test_run_signals.py); this is the repeated check, to run under load as well.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVE = [
    "model=smollm2-rand",
    "device=cpu",
    "engine.backend=torch",
    "engine.kv_capacity_tokens=4096",
]
RUN = ["workload=system_prompt", "workload.num_groups=2", "workload.prompts_per_group=3"]
RUN += ["workload.system_prompt_len=48", "workload.question_len=8", "workload.output_len=4"]
RUN += ["model=tiny", "engine.kv_capacity_tokens=4096", "warmup.num_requests=1"]


def _serve_ok(code: int, err: str) -> bool:
    if "serving" in err:
        return code == 0
    return code == 130 and err.strip().splitlines() == [
        "interrupted while starting; nothing was served"
    ]


def _run_ok(code: int, err: str) -> bool:
    """130 with one `error:` line last (start-up's, or the run's naming its rows), or 0: done."""
    lines = [line for line in err.splitlines() if line.strip()]
    return code == 0 or (code == 130 and bool(lines) and lines[-1].startswith("error: "))


def one_start(
    entry: str, delay_s: float, sig: signal.Signals, env: dict[str, str]
) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as tmp:
        args = [*SERVE, "port=0"] if entry == "serve" else [*RUN, f"hydra.run.dir={tmp}/run"]
        module = "harness.builtin_server" if entry == "serve" else "harness"
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(delay_s)
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            return False, "did not end within 180 s of the signal"
    ok = "Traceback" not in err and (_serve_ok if entry == "serve" else _run_ok)(
        proc.returncode, err
    )
    return ok, f"{sig.name} at {delay_s:.2f} s: exit {proc.returncode}, stderr tail {err[-600:]!r}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=80, help="starts per entry point")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-s", type=float, default=0.05)
    parser.add_argument("--max-s", type=float, default=6.0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    for entry in ("serve", "run"):
        counts: Counter[bool] = Counter()
        for _ in range(args.starts):
            sig = rng.choice([signal.SIGINT, signal.SIGTERM])
            ok, what = one_start(entry, rng.uniform(args.min_s, args.max_s), sig, env)
            counts[ok] += 1
            if not ok:
                print(f"{entry}: {what}", flush=True)
        print(f"{entry}: {counts[True]} of {args.starts} ended as promised", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
