"""A client's imported rows joined to the built-in server's request log (`request_log=FILE`,
harness/builtin_server/request_log.py) by request id, so the run carries the server's prompt,
cached and output tokens beside the client's timing. How a row is found depends on what the
client records (`Imported.ids`): the X-Request-Id it sent (aiperf), the index it appended to a
request-id prefix it does not save (vLLM's bench), or the reply's own id (`response_id`: guidellm,
inference-perf)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from harness.config.errors import BadInput
from harness.export.import_aiperf import READ_LIMIT, Imported

SERVER_COLUMNS = ("server_request_id", "server_prompt_tokens", "server_cached_tokens")


class ServerRow(NamedTuple):
    request_id: str
    client_request_id: str | None
    prompt_tokens: int
    cached_tokens: int


def _count(obj: dict, key: str, where: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadInput(f"{where}: {key} must be a count, got {value!r}")
    return value


def read_server_log(path: Path) -> list[ServerRow]:
    """The server's request log, strictly: a foreign or cut line is one line naming it."""
    if not path.is_file():
        raise BadInput(f"--server-log {path}: no such file (the server's request_log=FILE)")
    if path.stat().st_size > READ_LIMIT:
        raise BadInput(f"--server-log {path}: larger than {READ_LIMIT} bytes")
    rows = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                obj = json.loads(line)
            except ValueError:
                raise BadInput(f"{where}: not JSON; a truncated or foreign file?") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("request_id"), str):
                raise BadInput(f"{where}: not a prefixbench server request record")
            client = obj.get("client_request_id")
            rows.append(
                ServerRow(
                    obj["request_id"],
                    client if isinstance(client, str) else None,
                    _count(obj, "prompt_tokens", where),
                    _count(obj, "cached_tokens", where),
                )
            )
    return rows


def _splits(client_id: str) -> list[tuple[str, int]]:
    """Every (prefix, index) reading of an id ending in digits: a prefix may end in digits too
    ("run1" + "0" and "run" + "10" are both "run10")."""
    digits = len(client_id) - len(client_id.rstrip("0123456789"))
    return [
        (client_id[:k], int(client_id[k:])) for k in range(len(client_id) - digits, len(client_id))
    ]


def _indexed(rows: list[ServerRow], wanted: set[int]) -> dict[str, ServerRow]:
    """Index -> row under the one prefix whose ids cover `wanted` (the latest such prefix in the
    log when several runs left one)."""
    by_prefix: dict[str, dict[int, ServerRow]] = {}
    for row in rows:
        for prefix, index in _splits(row.client_request_id or ""):
            by_prefix.setdefault(prefix, {})[index] = row
    covering = [p for p, found in by_prefix.items() if wanted <= found.keys()]
    return {str(i): r for i, r in by_prefix[covering[-1]].items()} if covering else {}


def server_rows_for(imported: Imported, rows: list[ServerRow]) -> dict[str, ServerRow]:
    """The server's row for each of the client's `request_id`s that it can be matched to."""
    if imported.ids == "sent":
        return {r.client_request_id: r for r in rows if r.client_request_id is not None}
    if imported.ids == "server":
        return {r.request_id: r for r in rows}
    if imported.ids == "index":
        return _indexed(rows, {int(i) for i in imported.table["request_id"]})
    raise BadInput(
        f"--server-log: {imported.client}'s output names no request the server can recognise "
        "(it sends no request id); nothing to join"
    )


def join_server_log(imported: Imported, path: Path) -> tuple[Imported, dict[str, object]]:
    """The imported rows with the server's columns (`server_*`; cached tokens the client did not
    record taken from the server), and what the join found, for the manifest."""
    found = server_rows_for(imported, read_server_log(path))
    table = imported.table.copy()
    key = "response_id" if imported.ids == "server" else "request_id"
    matched = [found.get(str(rid)) for rid in table[key]]
    hits = sum(m is not None for m in matched)
    if not hits:
        raise BadInput(
            f"--server-log {path}: none of the {len(table)} {imported.client} requests is in it "
            "(another run's log?)"
        )
    table["server_request_id"] = [m.request_id if m else None for m in matched]
    table["server_prompt_tokens"] = pd.array(
        [m.prompt_tokens if m else None for m in matched], dtype="Int64"
    )
    table["server_cached_tokens"] = pd.array(
        [m.cached_tokens if m else None for m in matched], dtype="Int64"
    )
    client_cached = pd.Series(table["cached_tokens"].tolist(), index=table.index, dtype="Int64")
    table["cached_tokens"] = client_cached.fillna(table["server_cached_tokens"])
    facts = {
        "server_log": str(path),
        "join": imported.ids,
        "rows_joined": hits,
        "rows_not_in_log": len(table) - hits,
    }
    return imported._replace(table=table), facts
