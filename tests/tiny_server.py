"""A tiny OpenAI-compatible completions server, run as its own process by tests that kill it.

`python tests/tiny_server.py PORT [TOKEN_DELAY_S]`: /health, /v1/models, /version, /metrics
(vllm:cache_config_info with block size 32 and the two prefix-cache counters at 0),
POST /reset_prefix_cache, and streamed POST /v1/completions that return `max_tokens` token ids
(prompt's last id + 1, + 2, ...) one chunk each, TOKEN_DELAY_S apart, with usage at the end.
It has no cache (cached_tokens 0): it exists so that a server can die mid-run in a test
without losing the shared vLLM server. Standard library only.
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "tiny-echo"
METRICS = (
    'vllm:cache_config_info{block_size="32",num_gpu_blocks="1025"} 1.0\n'
    'vllm:prefix_cache_queries_total{engine="0"} 0.0\n'
    'vllm:prefix_cache_hits_total{engine="0"} 0.0\n'
)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    token_delay_s = 0.02

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/v1/models":
            data = {"data": [{"id": MODEL, "max_model_len": 4096}]}
            self._send(200, json.dumps(data).encode())
        elif self.path == "/version":
            self._send(200, b'{"version": "tiny"}')
        elif self.path == "/metrics":
            self._send(200, METRICS.encode(), "text/plain")
        else:
            self._send(404, b'{"error": "not found"}')

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/reset_prefix_cache":
            self._send(200, b"")
            return
        if self.path != "/v1/completions":
            self._send(404, b'{"error": "not found"}')
            return
        prompt = list(body["prompt"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(int(body["max_tokens"])):
            time.sleep(self.token_delay_s)
            choice = {"index": 0, "text": "x", "token_ids": [(prompt[-1] + 1 + i) % 1000 + 20]}
            if i == 0:
                choice["prompt_token_ids"] = prompt
            self._chunk({"choices": [choice]})
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": int(body["max_tokens"]),
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        self._chunk({"choices": [], "usage": usage})
        self._write(b"data: [DONE]\n\n")
        self._write(b"")

    def _chunk(self, obj: dict) -> None:
        self._write(f"data: {json.dumps(obj)}\n\n".encode())

    def _write(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def main() -> None:
    port = int(sys.argv[1])
    if len(sys.argv) > 2:
        Handler.token_delay_s = float(sys.argv[2])
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
