"""SGLang 0.5.23's benchmark client output (`python -m sglang.bench_serving --output-file F
--output-details`: a JSON line per run appended to F, with the run's aggregates and, per request in
send order, `input_lens`, `output_lens`, `ttfts` and `itls` in seconds and `errors`; with
`--cache-report` also `cached_tokens` and `cached_tokens_details`) as a request table. The newest
run (the last line) is imported. The client keeps no start times and sends no request id: a row's
arrival is unknown and its latency is its TTFT plus its token gaps."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from harness.config.errors import BadInput
from harness.export.import_aiperf import READ_LIMIT, Imported
from harness.export.import_vllm_bench import finite_number

DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "errors")


def last_run(path: Path) -> tuple[dict, int]:
    """The file's last JSON line with its per-request lists checked, and how many runs it holds."""
    if path.stat().st_size > READ_LIMIT:
        raise BadInput(f"{path}: larger than {READ_LIMIT} bytes; not an SGLang bench result here")
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not lines:
        raise BadInput(f"{path}: empty; not an SGLang bench_serving output file")
    try:
        obj = json.loads(lines[-1])
    except ValueError:
        raise BadInput(f"{path}:{len(lines)}: not JSON; a truncated or foreign file?") from None
    if not isinstance(obj, dict) or "backend" not in obj:
        raise BadInput(f"{path}:{len(lines)}: not an SGLang bench_serving result (no backend)")
    missing = [k for k in DETAILED if not isinstance(obj.get(k), list)]
    if missing:
        raise BadInput(
            f"{path}:{len(lines)}: no per-request {', '.join(missing)}; run bench_serving with "
            "--output-details"
        )
    if len({len(obj[k]) for k in DETAILED}) != 1:
        raise BadInput(f"{path}:{len(lines)}: the per-request lists differ in length")
    return obj, len(lines)


def _cached(obj: dict, i: int, where: str) -> int | None:
    """The client's cached tokens where the server told it (SGLang's `sglext` details); None
    otherwise: without them the client records 0, which would read as a miss."""
    details = obj.get("cached_tokens_details")
    counts = obj.get("cached_tokens")
    if not isinstance(details, list) or not isinstance(counts, list) or i >= len(counts):
        return None
    if not isinstance(details[i], dict):
        return None
    return int(finite_number(counts[i], "cached_tokens", where))


def request_row(obj: dict, i: int, where: str) -> dict[str, object] | None:
    if obj["errors"][i]:
        return None
    ttft = finite_number(obj["ttfts"][i], "ttfts", where)
    gaps = obj["itls"][i]
    if not isinstance(gaps, list):
        raise BadInput(f"{where}: itls must be a list of seconds")
    itls = [finite_number(x, "itls", where) * 1e3 for x in gaps]
    return {
        "request_id": str(i),  # send order: the client names no request
        "session_id": None,
        "turn": 0,
        "arrival_s": float("nan"),  # the client keeps no start times
        "finish_s": float("nan"),
        "first_token_s": float("nan"),
        "prompt_tokens": int(finite_number(obj["input_lens"][i], "input_lens", where)),
        "cached_tokens": _cached(obj, i, where),
        "output_tokens": int(finite_number(obj["output_lens"][i], "output_lens", where)),
        "ttft_ms": ttft * 1e3,
        "e2el_ms": ttft * 1e3 + sum(itls),
        "itls": itls,
    }


def import_sglang_bench(path: Path) -> Imported:
    """PATH is bench_serving's `--output-file`."""
    if not path.is_file():
        raise BadInput(f"{path}: no SGLang bench_serving output file there")
    obj, runs = last_run(path)
    where = f"{path}:{runs}"
    parsed = [request_row(obj, i, f"{where}: request {i}") for i in range(len(obj["errors"]))]
    rows = [r for r in parsed if r is not None]
    if not rows:
        raise BadInput(f"{where}: no successful SGLang bench_serving requests")
    table = pd.DataFrame(rows)
    outputs = table["output_tokens"].where(table["output_tokens"] > 1)
    table["tpot_ms"] = (table["e2el_ms"] - table["ttft_ms"]) / (outputs - 1)
    itls = dict(zip(table["request_id"], table.pop("itls")))
    duration = finite_number(obj.get("duration"), "duration", where)
    facts: dict[str, object] = {
        "model": None,  # the result does not name the model
        "urls": [],
        "dataset": {"name": obj.get("dataset_name")},
        "backend": obj.get("backend"),
        "tag": obj.get("tag"),
        "runs_in_file": runs,
        "records": str(path),
    }
    failed = len(parsed) - len(rows)
    # the result does not name SGLang's version (tested here with SGLang 0.5.23's client)
    return Imported("sglang-bench", "unknown", table, itls, duration, failed, facts)
