"""inference-perf 0.7's per-request report (`per_request_lifecycle_metrics.json`, written with
`report.request_lifecycle.per_request: true`: a list of requests with monotonic `start_time` /
`end_time` in seconds, `info.response_metrics.output_token_times`, `output_tokens` and the
server's `usage` with `prompt_tokens_details.cached_tokens`) as a request table; `config.yaml`
beside it names the server and model. A request carries no id: the row is named by the server's
completion id when its first streamed chunk holds one, else by its position."""

from __future__ import annotations

import json
from pathlib import Path

from harness.config.errors import BadInput
from harness.export.import_aiperf import Imported, read_json, timed_table

REPORT = "per_request_lifecycle_metrics.json"


def _number(value: object, name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(f"{where}: {name} must be a number, got {value!r}")
    return float(value)


def _completion_id(metrics: dict, index: int) -> str:
    chunks = metrics.get("response_chunks") or []
    try:
        first = json.loads(chunks[0]) if chunks else {}
    except (TypeError, ValueError):
        first = {}
    return (
        str(first.get("id")) if isinstance(first, dict) and first.get("id") else f"request-{index}"
    )


def request_row(req: object, index: int, where: str) -> dict[str, object] | None:
    """One row; None for a request that failed (it carries an error)."""
    if (
        not isinstance(req, dict)
        or "start_time" not in req
        or not isinstance(req.get("info"), dict)
    ):
        raise BadInput(f"{where}: not an inference-perf request record")
    if req.get("error"):
        return None
    info = req["info"]
    metrics = info.get("response_metrics")
    if not isinstance(metrics, dict):
        raise BadInput(f"{where}: no info.response_metrics")
    start = _number(req["start_time"], "start_time", where)
    end = _number(req.get("end_time"), "end_time", where)
    times = [
        _number(t, "output_token_times", where) for t in metrics.get("output_token_times") or []
    ]
    usage = metrics.get("server_usage") if isinstance(metrics.get("server_usage"), dict) else {}
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    prompt = usage.get("prompt_tokens") if usage else info.get("input_tokens")
    reply_id = _completion_id(metrics, index)
    return {
        "request_id": reply_id,
        "response_id": reply_id,  # the server's log names the reply's id
        "session_id": None,
        "turn": 0,
        "start_ns": start,
        "end_ns": end,
        "prompt_tokens": int(_number(prompt, "prompt tokens", where)),
        "cached_tokens": None if cached is None else int(_number(cached, "cached tokens", where)),
        "output_tokens": int(_number(metrics.get("output_tokens"), "output_tokens", where)),
        "ttft_ms": (times[0] - start) * 1e3 if times else float("nan"),
        "e2el_ms": (end - start) * 1e3,
        "itls": [(b - a) * 1e3 for a, b in zip(times, times[1:])],
    }


def _load(path: Path) -> list:
    obj = read_json(path, "an inference-perf report")
    if not isinstance(obj, list):
        raise BadInput(f"{path}: not an inference-perf per-request report (expected a list)")
    return obj


def _server(folder: Path) -> dict:
    """The `server` block of the config.yaml inference-perf saves beside its reports."""
    path = folder / "config.yaml"
    if not path.is_file():
        return {}
    import yaml

    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        raise BadInput(f"{path}: not YAML; a truncated or foreign file?") from None
    server = config.get("server") if isinstance(config, dict) else None
    return server if isinstance(server, dict) else {}


def import_inference_perf(path: Path) -> Imported:
    """PATH is inference-perf's local storage folder or its per-request report."""
    report = path / REPORT if path.is_dir() else path
    if not report.is_file():
        raise BadInput(
            f"{path}: no inference-perf {REPORT} there (report.request_lifecycle.per_request: true)"
        )
    records = _load(report)
    parsed = [request_row(r, i, f"{report}: request {i}") for i, r in enumerate(records)]
    rows = [r for r in parsed if r is not None]
    if not rows:
        raise BadInput(f"{report}: no successful inference-perf requests")
    table, itls = timed_table(rows, 1.0)
    server = _server(report.parent)
    facts: dict[str, object] = {
        "model": server.get("model_name"),
        "urls": [server.get("base_url")],
        "dataset": {},
        "records": str(report),
    }
    duration = float(table["finish_s"].max())  # from the first start: the report has no window
    failed = len(parsed) - len(rows)
    # the report does not name inference-perf's version (tested here with 0.7.0)
    return Imported("inference-perf", "unknown", table, itls, duration, failed, facts, "server")
