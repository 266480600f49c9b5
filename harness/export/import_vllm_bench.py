"""vLLM 0.33's benchmark client output (`vllm bench serve --save-result --save-detailed`: one JSON
object with the run's aggregates and, per request in send order, `input_lens`, `output_lens`,
`ttfts`, `itls` and `latencies` in seconds, `start_times` on the client's monotonic clock and
`errors`) as a request table. The file holds no cached tokens and no request ids: the client sends
`x-request-id: <prefix><index>` with a prefix it does not save, so a row is named by its index and
the server's log supplies the cached tokens (harness/export/join.py)."""

from __future__ import annotations

import math
from pathlib import Path

from harness.config.errors import BadInput
from harness.export.import_aiperf import Imported, read_json, timed_table

DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors")


def finite_number(value: object, name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadInput(f"{where}: {name} must be a finite number, got {value!r}")
    return float(value)


def load_result(path: Path, detailed: tuple[str, ...], client: str) -> dict:
    """The result object, its detailed lists checked to be lists of one length."""
    obj = read_json(path, f"a {client} result")
    if not isinstance(obj, dict):
        raise BadInput(f"{path}: not a {client} result (expected a JSON object)")
    missing = [k for k in detailed if not isinstance(obj.get(k), list)]
    if missing:
        raise BadInput(
            f"{path}: no per-request {', '.join(missing)}; not a {client} result with its "
            "per-request details"
        )
    lengths = {len(obj[k]) for k in detailed}
    if len(lengths) != 1:
        raise BadInput(f"{path}: the per-request lists differ in length ({sorted(lengths)})")
    return obj


def request_row(obj: dict, i: int, where: str) -> dict[str, object] | None:
    """Request `i`; None where it failed (a non-empty error)."""
    if obj["errors"][i]:
        return None
    ttft = finite_number(obj["ttfts"][i], "ttfts", where)
    latency = finite_number(obj["latencies"][i], "latencies", where)
    start = finite_number(obj["start_times"][i], "start_times", where)
    itls = obj["itls"][i]
    if not isinstance(itls, list):
        raise BadInput(f"{where}: itls must be a list of seconds")
    return {
        "request_id": str(i),  # the index the client appended to its request-id prefix
        "session_id": None,
        "turn": 0,
        "start_ns": start,
        "end_ns": start + latency,
        "prompt_tokens": int(finite_number(obj["input_lens"][i], "input_lens", where)),
        "cached_tokens": None,  # the client does not read the usage's cached tokens
        "output_tokens": int(finite_number(obj["output_lens"][i], "output_lens", where)),
        "ttft_ms": ttft * 1e3,
        "e2el_ms": latency * 1e3,
        "itls": [finite_number(x, "itls", where) * 1e3 for x in itls],
    }


def import_vllm_bench(path: Path) -> Imported:
    """PATH is the file `--save-result --save-detailed` wrote (`--result-filename`)."""
    if not path.is_file():
        raise BadInput(f"{path}: no vLLM bench serve result file there")
    obj = load_result(path, DETAILED, "vLLM bench serve")
    parsed = [request_row(obj, i, f"{path}: request {i}") for i in range(len(obj["errors"]))]
    rows = [r for r in parsed if r is not None]
    if not rows:
        raise BadInput(f"{path}: no successful vLLM bench serve requests")
    table, itls = timed_table(rows, 1.0)
    duration = obj.get("duration")
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or duration <= 0:
        duration = float(table["finish_s"].max())
    facts: dict[str, object] = {
        "model": obj.get("model_id"),
        "urls": [],  # the result does not keep the base URL
        "dataset": {},
        "start_time": obj.get("date"),
        "backend": obj.get("backend"),
        "request_rate": str(obj.get("request_rate")),  # inf is no JSON number
        "max_concurrency": obj.get("max_concurrency"),
        "records": str(path),
    }
    failed = len(parsed) - len(rows)
    # the result does not name vLLM's version (tested here with vLLM 0.33's client)
    return Imported("vllm-bench", "unknown", table, itls, float(duration), failed, facts, "index")
