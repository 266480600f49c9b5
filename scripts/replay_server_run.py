"""Replays a recorded server run's step-locked twin again, from its run directory alone.

    python scripts/replay_server_run.py RUN_DIR [engine.KNOB=VALUE ...]

Needs the run's tokens.jsonl (save_tokens=true), kv_events.jsonl and manifest.json. Prints how
many requests' cached tokens the twin matches and where its KV events first differ from the
server's; knob overrides (e.g. engine.async_scheduling=true) show which setting a difference
depends on. For n > 1 runs it replays sample 0's script for every sample.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pandas as pd
import yaml


def main(argv: list[str]) -> int:
    from engines.build import build_engine
    from engines.config import EngineConfig
    from harness.live_server import kv_events, steplock
    from harness.live_server.twin import _Context, twin_hardware
    from workloads.request import Request

    if not argv or not Path(argv[0]).is_dir():
        print("usage: replay_server_run.py RUN_DIR [engine.KNOB=VALUE ...]", file=sys.stderr)
        return 2
    run = Path(argv[0])
    for name in ("tokens.jsonl", kv_events.KV_EVENTS_FILE, "manifest.json"):
        if not (run / name).is_file():
            print(
                f"error: {run / name} is missing (needs save_tokens=true and KV events)",
                file=sys.stderr,
            )
            return 2
    manifest = json.loads((run / "manifest.json").read_text())
    server = manifest["server"]
    knobs = {
        k: v
        for k, v in server["twin_engine"].items()
        if k in {f.name for f in dataclasses.fields(EngineConfig)}
    }
    for arg in argv[1:]:
        key, _, value = arg.partition("=")
        knobs[key.removeprefix("engine.")] = yaml.safe_load(value)
    cfg = dataclasses.replace(EngineConfig(**knobs), decode_runs=False)
    rows = [json.loads(line) for line in (run / "tokens.jsonl").read_text().splitlines()]
    arrivals = {}
    for row in rows:
        rid = row["request_id"]
        parent = rid.split("_", 1)[1] if "_" in rid and rid.split("_", 1)[0].isdigit() else rid
        if parent in arrivals or not row["output_ids"]:
            continue
        req = Request(
            parent,
            tuple(row["prompt_ids"]),
            output_ids=tuple(row["output_ids"]),
            after=row.get("after"),
        )
        arrivals[parent] = steplock.Arrival(
            req, row["send_wall_s"], row["end_wall_s"], tuple(row.get("token_wall_s", ()))
        )
    twin = build_engine(
        cfg,
        _Context(server.get("max_model_len")),
        executor="simulated",
        hardware=twin_hardware(None),
    )
    batches = kv_events.read(run / kv_events.KV_EVENTS_FILE)
    done = steplock.replay(twin, list(arrivals.values()), batches, cfg.block_size)
    table = pd.read_parquet(run / "requests.parquet")
    measured = dict(zip(table["request_id"], table["cached_tokens"]))
    predicted = {r.request_id: r.cached_tokens for r in done.records}
    same = sum(1 for rid, c in predicted.items() if measured.get(rid) == c)
    print(f"requests matched: {same}/{len(predicted)}")
    for note in done.notes:  # e.g. a kv_events.jsonl that is not the server's steps in order
        print(f"note: {note}")
    print(json.dumps(steplock.compare(batches, done.twin_batches)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
