"""guidellm 0.8's report (`benchmarks.json`: `metadata.guidellm_version`, and per benchmark its
requests, `successful` / `errored` / `incomplete`, each with prompt, cached and output tokens,
TTFT, latency and start/end times in seconds) as a request table. A file holding a sweep of
several benchmarks imports its first one (the count is kept in the manifest)."""

from __future__ import annotations

from pathlib import Path

from harness.config.errors import BadInput
from harness.export.import_aiperf import Imported, read_json, timed_table

REPORT = "benchmarks.json"


def _number(obj: dict, key: str, where: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(f"{where}: {key} must be a number, got {value!r}")
    return float(value)


def request_row(req: object, where: str) -> dict[str, object]:
    if not isinstance(req, dict):
        raise BadInput(f"{where}: not a guidellm request record")
    info = req.get("info")
    info = info if isinstance(info, dict) else {}
    cached = req.get("cached_tokens")
    return {
        "request_id": str(req.get("request_id")),
        "response_id": req.get("response_id"),  # the reply's id: the server's log names it
        "session_id": info.get("conversation_id"),
        "turn": int(info.get("turn_index") or 0),
        "start_ns": _number(req, "request_start_time", where),
        "end_ns": _number(req, "request_end_time", where),
        "prompt_tokens": int(_number(req, "prompt_tokens", where)),
        "cached_tokens": None if cached is None else int(_number(req, "cached_tokens", where)),
        "output_tokens": int(_number(req, "output_tokens", where)),
        "ttft_ms": _number(req, "time_to_first_token_ms", where),
        "e2el_ms": _number(req, "request_latency", where) * 1e3,
        "itls": [],  # guidellm keeps each request's mean ITL only, not the gaps
    }


def _load(path: Path) -> dict:
    obj = read_json(path, "a guidellm report")
    if not isinstance(obj, dict):
        raise BadInput(f"{path}: not a guidellm report (expected a JSON object)")
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "guidellm_version" not in meta:
        raise BadInput(f"{path}: not a guidellm report (no metadata.guidellm_version)")
    if not isinstance(obj.get("benchmarks"), list) or not obj["benchmarks"]:
        raise BadInput(f"{path}: a guidellm report without benchmarks")
    return obj


def import_guidellm(path: Path) -> Imported:
    """PATH is guidellm's output folder or its benchmarks.json."""
    report = path / REPORT if path.is_dir() else path
    if not report.is_file():
        raise BadInput(f"{path}: no guidellm {REPORT} there")
    obj = _load(report)
    bench = obj["benchmarks"][0]
    requests = bench.get("requests") if isinstance(bench, dict) else None
    if not isinstance(requests, dict) or not isinstance(requests.get("successful"), list):
        raise BadInput(f"{report}: benchmark 0 has no requests.successful list")
    rows = [
        request_row(r, f"{report}: benchmarks[0].requests.successful[{i}]")
        for i, r in enumerate(requests["successful"])
    ]
    if not rows:
        raise BadInput(f"{report}: no successful guidellm requests")
    failed = sum(len(requests.get(k) or []) for k in ("errored", "incomplete"))
    table, itls = timed_table(rows, 1.0)
    duration = bench.get("duration")
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or duration <= 0:
        duration = float(table["finish_s"].max())
    backend = (bench.get("config") or {}).get("backend")
    backend = backend if isinstance(backend, dict) else {}
    facts = {
        "model": backend.get("model"),
        "urls": [backend.get("target")],
        "dataset": {},
        "start_time": bench.get("start_time"),
        "benchmarks_in_file": len(obj["benchmarks"]),
        "records": str(report),
    }
    version = str(obj["metadata"]["guidellm_version"])
    return Imported("guidellm", version, table, itls, float(duration), failed, facts, "server")
