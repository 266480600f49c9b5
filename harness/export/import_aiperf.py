"""aiperf 0.13's per-request output (`profile_export.jsonl`, one record a request: `metadata` with
the request id, conversation, turn and nanosecond timestamps; `metrics` with each measured value
and its unit; the usage's `usage_prompt_cache_read_tokens` is the server's cached-token count) as
a request table, and the run's facts from `profile_export_aiperf.json` beside it (duration, model,
dataset, aiperf version). Records are checked strictly: a truncated or foreign line is one line
naming the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from harness.config.errors import BadInput

RECORDS = "profile_export.jsonl"
AGGREGATE = "profile_export_aiperf.json"
READ_LIMIT = 1 << 30  # a client's per-request file: one GB is far beyond any run here


def read_json(path: Path, what: str) -> object:
    """A client's JSON file parsed; too large or not JSON is one line naming the file and `what`
    it should have been (e.g. "a guidellm report")."""
    if path.stat().st_size > READ_LIMIT:
        raise BadInput(f"{path}: larger than {READ_LIMIT} bytes; not {what} of a run here")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise BadInput(f"{path}: not JSON; not {what}, or truncated?") from None


class Imported(NamedTuple):
    """What an importer hands the run writer (harness/export/import_run.py)."""

    client: str
    client_version: str
    table: pd.DataFrame  # prompt/cached/output tokens, latencies (ms), arrival/finish (s)
    itls_ms: dict[str, list[float]]  # request id -> inter-token latencies
    duration_s: float
    failed: int
    facts: dict[str, object]  # model, URL, dataset, start time: into the manifest
    # What `request_id` is, for the join to the server's log (harness/export/join.py): "sent"
    # (the X-Request-Id the client sent), "server" (the reply's id, column `response_id`), "index" (appended to a
    # prefix the client does not save), "none" (the client names no request).
    ids: str = "none"


def _metric(metrics: dict, name: str, where: str, required: bool = True) -> object:
    entry = metrics.get(name)
    if entry is None:
        if required:
            raise BadInput(f"{where}: aiperf record has no metric {name!r}")
        return None
    if not isinstance(entry, dict) or "value" not in entry:
        raise BadInput(f"{where}: metric {name!r} is not an aiperf {{value, unit}} object")
    return entry["value"]


def _number(value: object, name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(f"{where}: {name} must be a number, got {value!r}")
    return float(value)


def parse_record(line: str, where: str) -> dict[str, object] | None:
    """One request row; None for a request that failed (it carries an error, no metrics)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{where}: not JSON ({exc.msg}); a truncated or foreign file?") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        raise BadInput(f"{where}: not an aiperf profile_export record (no metadata object)")
    meta, metrics = obj["metadata"], obj.get("metrics")
    if obj.get("error") or not isinstance(metrics, dict):
        return None
    start = _number(meta.get("request_start_ns"), "metadata.request_start_ns", where)
    end = _number(meta.get("request_end_ns"), "metadata.request_end_ns", where)
    cached = _metric(metrics, "usage_prompt_cache_read_tokens", where, required=False)
    prompt = _metric(metrics, "usage_prompt_tokens", where, required=False)
    if prompt is None:
        prompt = _metric(metrics, "input_sequence_length", where)
    itl = _metric(metrics, "inter_chunk_latency", where, required=False) or []
    return {
        "request_id": str(meta.get("x_request_id") or meta.get("x_correlation_id")),
        "session_id": meta.get("conversation_id"),
        "turn": int(meta.get("turn_index") or 0),
        "session_num": int(
            meta.get("session_num") or 0
        ),  # the dataset entry (trace line) it replays
        "start_ns": start,
        "end_ns": end,
        "prompt_tokens": int(_number(prompt, "prompt tokens", where)),
        "cached_tokens": None if cached is None else int(_number(cached, "cached tokens", where)),
        "output_tokens": int(
            _number(_metric(metrics, "output_sequence_length", where), "osl", where)
        ),
        "ttft_ms": _number(_metric(metrics, "time_to_first_token", where), "ttft", where),
        "e2el_ms": _number(_metric(metrics, "request_latency", where), "latency", where),
        "itls": [float(x) for x in itl] if isinstance(itl, list) else [],
    }


def read_records(path: Path) -> tuple[list[dict[str, object]], int]:
    """(successful rows, failed count) of a profile_export.jsonl."""
    if path.stat().st_size > READ_LIMIT:
        raise BadInput(
            f"{path}: larger than {READ_LIMIT} bytes; not an aiperf export of a run here"
        )
    rows, failed = [], 0
    with open(path, encoding="utf-8", errors="strict") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = parse_record(line, f"{path}:{line_no}")
            if row is None:
                failed += 1
            else:
                rows.append(row)
    if not rows:
        raise BadInput(f"{path}: no successful aiperf request records")
    return rows, failed


def _aggregate(folder: Path) -> dict:
    path = folder / AGGREGATE
    if not path.is_file():
        return {}
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise BadInput(f"{path}: not JSON; a truncated or foreign file?") from None
    return obj if isinstance(obj, dict) else {}


def timed_table(rows: list[dict[str, object]], per_second: float) -> tuple[pd.DataFrame, dict]:
    """Rows with `start_ns`/`end_ns` (in 1/per_second units) and `itls` as a request table timed
    from the first start, and the ITLs by request id."""
    t0 = min(float(r["start_ns"]) for r in rows)  # type: ignore[arg-type]
    table = pd.DataFrame(rows)
    table["arrival_s"] = (table.pop("start_ns") - t0) / per_second
    table["finish_s"] = (table.pop("end_ns") - t0) / per_second
    table["first_token_s"] = table["arrival_s"] + table["ttft_ms"] / 1e3
    outputs = table["output_tokens"].where(table["output_tokens"] > 1)
    table["tpot_ms"] = (table["e2el_ms"] - table["ttft_ms"]) / (outputs - 1)
    return table, dict(zip(table["request_id"], table.pop("itls")))


def import_aiperf(path: Path) -> Imported:
    """PATH is aiperf's artifact folder or its profile_export.jsonl."""
    records = path / RECORDS if path.is_dir() else path
    if not records.is_file():
        raise BadInput(f"{path}: no aiperf {RECORDS} there")
    rows, failed = read_records(records)
    agg = _aggregate(records.parent)
    table, itls = timed_table(rows, 1e9)
    duration = (agg.get("benchmark_duration") or {}).get("avg")
    if not isinstance(duration, (int, float)) or not np.isfinite(duration) or duration <= 0:
        duration = float(table["finish_s"].max())
    config = agg.get("input_config") or {}
    datasets = config.get("datasets") or [{}]
    models = ((config.get("models") or {}).get("items") or [{}])[0]
    facts = {
        "model": models.get("name"),
        "urls": (config.get("endpoint") or {}).get("urls"),
        "dataset": datasets[0],
        "start_time": agg.get("start_time"),
        "benchmark_id": agg.get("benchmark_id"),
        "records": str(records),
    }
    version = str(agg.get("aiperf_version") or "unknown")
    return Imported("aiperf", version, table, itls, float(duration), failed, facts, "sent")
