"""The built-in server's request log (`request_log=FILE`): a line per finished completion with
the server's id, the client's X-Request-Id and the cached tokens the reply's usage reported, for a
streamed and a whole reply; what `harness.report --import ... --server-log` joins on."""

from __future__ import annotations

import json

import httpx

from harness.builtin_server.server import InProcessServer, compose_config, prepare
from tests.serve_process import TINY

PROMPT = list(range(1, 49))  # three 16-token blocks


def test_each_finished_completion_is_a_line_with_the_clients_id(tmp_path):
    log = tmp_path / "requests.jsonl"
    cfg = compose_config([*TINY, f"request_log={log}"])
    with InProcessServer(prepare(cfg)) as server:
        body = {"prompt": PROMPT, "max_tokens": 3}
        first = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()
        stream = {**body, "stream": True, "stream_options": {"include_usage": True}}
        headers = {"X-Request-Id": "client-7"}
        with httpx.stream(
            "POST", f"{server.url}/v1/completions", json=stream, headers=headers, timeout=60
        ) as reply:
            chunks = [ln for ln in reply.iter_lines() if ln.startswith("data: {")]
    usage = json.loads(chunks[-1][len("data: ") :])["usage"]
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["client_request_id"] for r in rows] == [None, "client-7"]
    assert rows[0]["request_id"] == first["id"] and rows[0]["cached_tokens"] == 0
    assert rows[1]["cached_tokens"] == usage["prompt_tokens_details"]["cached_tokens"] > 0
    assert [r["prompt_tokens"] for r in rows] == [48, 48]
    assert [r["output_tokens"] for r in rows] == [3, 3]
    assert all(r["arrival_unix_s"] <= r["finish_unix_s"] for r in rows)
