"""The real-server column's client side (harness/claims/server.py) against a stand-in vLLM.

The stand-in (aiohttp, in a thread) streams completions the way vLLM 0.32 does, with usage and
cached tokens from a block-granular prefix store (salted per `cache_salt`, or none at all for a
caching-off server), and records how many requests it had in flight at once. The real server's
numbers are tests/test_real_server.py's; here: the lines' form, the burst sent at once, claim 7
with two servers, failures as lines, and the launch flags for a caching-off server.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from harness.claims.__main__ import main
from harness.claims.server import FULL, QUICK, server_column
from harness.server.launch import VllmLaunch, free_port

BLOCK = 32


@dataclass
class FakeVllm:
    caching: bool = True
    hold_s: float = 0.05  # each request stays in flight this long
    store: set[tuple] = field(default_factory=set)
    in_flight: int = 0
    peak: int = 0
    bodies: list[dict] = field(default_factory=list)

    def cached(self, prompt: list[int], salt: object) -> int:
        """Leading full blocks already stored (the last prompt token is always computed)."""
        if not self.caching:
            return 0
        blocks = (len(prompt) - 1) // BLOCK
        keys = [(salt, tuple(prompt[: (i + 1) * BLOCK])) for i in range(blocks)]
        hit = 0
        while hit < blocks and keys[hit] in self.store:
            hit += 1
        self.store.update(keys)  # allocated blocks are matchable at once, as in vLLM
        return hit * BLOCK

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        prompt, n, length = body["prompt"], body.get("n", 1), body["max_tokens"]
        if n > 1 and body.get("temperature", 1.0) == 0.0:
            return web.json_response({"error": {"message": "n must be 1 when greedy"}}, status=400)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        cached = self.cached(prompt, body.get("cache_salt"))
        await asyncio.sleep(self.hold_s)
        self.in_flight -= 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(n):
            ids = [(sum(prompt) + 7 * j + i) % 30000 for j in range(length)]
            chunk = {"choices": [{"index": i, "text": f"<{ids[0]}>", "token_ids": ids}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": n * length,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=f'vllm:cache_config_info{{block_size="{BLOCK}"}} 1.0\n')


@pytest.fixture
def serve() -> Iterator:
    """serve(fake) -> its URL; every server started is stopped at the end."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runners = []

    def start(fake: FakeVllm) -> str:
        app = web.Application()
        app.router.add_post("/v1/completions", fake.completions)
        app.router.add_get("/metrics", fake.metrics)
        runner = web.AppRunner(app)
        port = free_port()

        async def up() -> None:
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()

        asyncio.run_coroutine_threadsafe(up(), loop).result(10)
        runners.append(runner)
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_quick_column_lines_and_the_burst_in_flight_at_once(serve):
    fake = FakeVllm()
    column = server_column(serve(fake), quick=True)
    assert sorted(column) == sorted(QUICK)
    assert column[2] == "112 shared tokens, block 32: 96 cached (block-aligned)"
    assert column[9] == "512 shared tokens: same tenant 512 cached, other tenant 0 cached"
    assert column[10].startswith("burst of 8 sharing 512 tokens: 7 of 8 hit the prefix (cached [")
    assert fake.peak == 8  # the burst's 8 requests were in flight together
    assert all(b["ignore_eos"] and b["min_tokens"] == b["max_tokens"] for b in fake.bodies)
    assert all("model" not in b for b in fake.bodies)


def test_full_column_claim_7_compares_two_servers(serve):
    on, off = FakeVllm(), FakeVllm(caching=False)
    column = server_column(serve(on), quick=False, off_url=serve(off), model="m")
    assert sorted(column) == sorted(FULL)
    assert column[7] == (
        "6/6 greedy 64-token outputs identical, caching on vs off (caching on: 5 of 6 prompts "
        "had cached tokens; caching off: 0 cached tokens reported)"
    )
    assert column[12] == "n=4 on a fresh 1,024-token prompt: 0 cached tokens reported"
    assert {b["model"] for b in on.bodies + off.bodies} == {"m"}
    assert {len(b["prompt"]) for b in off.bodies} == {272}


def test_claim_7_without_a_caching_off_server_says_so(serve):
    column = server_column(serve(FakeVllm()), quick=False)
    assert column[7].startswith("not run: needs a second server started with prefix caching off")


def test_a_second_run_on_the_same_server_sends_fresh_prompts(serve):
    url = serve(FakeVllm())
    server_column(url, quick=True)
    again = server_column(url, quick=True)
    assert again[9].endswith("other tenant 0 cached")  # not the first run's tenant-b blocks
    assert " 7 of 8 hit" in again[10]


def test_failures_are_the_claims_lines(serve):
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    column = server_column(down, quick=True)
    assert all(line.startswith("failed on the server: ") for line in column.values()), column
    assert "Cannot connect" in column[9] or "refused" in column[9].lower(), column[9]
    column = server_column(serve(FakeVllm()), quick=False, off_url=down)
    assert column[7].startswith("failed on the server: caching-off server: no reply: "), column[7]
    assert column[2].endswith("(block-aligned)")


def test_an_http_refusal_is_the_claims_line(serve, monkeypatch):
    import harness.claims.server as server

    async def greedy_n4(on, rng):  # n > 1 greedy: the stand-in refuses it as vLLM does
        await on.complete([1, 2, 3], n=4)
        return "unreachable"

    monkeypatch.setattr(server, "_parallel", greedy_n4)
    column = server_column(serve(FakeVllm()), quick=False)
    assert column[12] == "failed on the server: HTTP 400: n must be 1 when greedy"


def test_server_off_needs_server(capsys, tmp_path):
    assert main(["--out", str(tmp_path / "c"), "--server-off", "http://127.0.0.1:1"]) == 2
    assert "--server-off needs --server" in capsys.readouterr().err


def test_the_run_passes_server_off_and_records_it(tmp_path, monkeypatch):
    import harness.claims.__main__ as cli
    from harness.claims.record import Row

    calls = []

    def measured(claim, ctx):
        row = Row(claim.number, claim.statement, "", "", "", "", "1", "holds", "", 0.0)
        return row, None

    def column(url, quick, off_url=None, model=None):
        calls.append((url, quick, off_url))
        return {7: "6/6 identical"}

    monkeypatch.setattr(cli, "check_claim", measured)
    monkeypatch.setattr(cli, "server_column", column)
    on, off = "http://127.0.0.1:8011", "http://127.0.0.1:8012"
    out = tmp_path / "c"
    assert main(["--out", str(out), "--only", "outputs", "--server", on, "--server-off", off]) == 0
    assert calls == [(on, False, off)]
    assert f"--server {on} --server-off {off}" in (out / "claims.md").read_text()


def test_launch_flags_for_a_caching_off_server():
    py = Path("python")
    assert "--enable-prefix-caching" in VllmLaunch().argv(py)
    off = VllmLaunch(prefix_caching=False).argv(py)
    assert "--no-enable-prefix-caching" in off and "--enable-prefix-caching" not in off
    assert "--enable-prompt-tokens-details" in off  # the off server still reports 0 cached
