"""`python -m harness.builtin_server`: the OpenAI API over the built-in engines, on the tiny model.

Servers run in-process (uvicorn in a thread on a free port of 127.0.0.1), one per engine for the
module; the SIGTERM and command-line tests start a process, since a process is what they test.
Every test draws its own prompts, so the cache state earlier tests leave never matches them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from engines.batch import run_batch
from engines.build import build_engine
from engines.request import GenerationRequest
from harness.builtin_server import protocol
from harness.builtin_server.metrics import parse as parse_metrics
from harness.builtin_server.protocol import ApiError
from harness.builtin_server.server import InProcessServer, compose_config, free_port, prepare
from harness.builtin_server.step_log import StepEntry, StepLog
from harness.builtin_server.text import Detokenizer, load_codec

ROOT = Path(__file__).resolve().parents[2]
TINY = ["model=tiny", "device=cpu", "engine.backend=torch", "engine.kv_capacity_tokens=4096"]
ENGINES = ("apc", "radix")
VOCAB = 1024


@pytest.fixture(scope="module")
def servers():
    """One running server per engine, started on first use, stopped with the module."""
    running: dict[str, InProcessServer] = {}

    def get(engine: str) -> httpx.Client:
        """A client of a server whose cache was just flushed (a random first token of this
        test's prompts could match an earlier test's otherwise)."""
        if engine not in running:
            cfg = compose_config([f"engine={engine}", *TINY])
            running[engine] = InProcessServer(prepare(cfg)).__enter__()
        client = httpx.Client(base_url=running[engine].url, timeout=60)
        assert client.post("/reset_prefix_cache").status_code == 200
        return client

    yield get
    for server in running.values():
        server.__exit__(None, None, None)


def prompts(seed: int, count: int, length: int, prefix: int = 0) -> list[list[int]]:
    """`count` random prompts of `length` tokens, the first `prefix` of them shared."""
    rng = np.random.default_rng(seed)
    shared = rng.integers(1, VOCAB, prefix).tolist()
    return [shared + rng.integers(1, VOCAB, length - prefix).tolist() for _ in range(count)]


def complete(client: httpx.Client, prompt, max_tokens: int = 4, **fields) -> dict:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    reply = client.post("/v1/completions", json={**body, "return_token_ids": True, **fields})
    assert reply.status_code == 200, reply.text
    return reply.json()


def cached(reply: dict) -> int:
    return reply["usage"]["prompt_tokens_details"]["cached_tokens"]


def metrics(client: httpx.Client) -> dict[str, float]:
    reply = client.get("/metrics")
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    return parse_metrics(reply.text)


def sse_events(lines) -> list:
    """The JSON payloads of an SSE stream, "[DONE]" as a string."""
    out = []
    for line in lines:
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def first_data(lines) -> str:
    """Read up to the first SSE data line of `lines`, which stays open for the rest."""
    for line in lines:
        if line.startswith("data: "):
            return line
    raise AssertionError("the stream ended before any data")


# ---------------------------------------------------------------------------- streaming


def test_streamed_chunks_are_in_order_and_complete(servers):
    client = servers("radix")
    prompt = prompts(1, 1, 30)[0]
    whole = complete(client, prompt, max_tokens=7, n=2)
    body = {
        "model": "tiny",
        "prompt": prompt,
        "max_tokens": 7,
        "n": 2,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }
    with client.stream("POST", "/v1/completions", json=body) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        events = sse_events(reply.iter_lines())
    assert events[-1] == "[DONE]"
    usage_chunk, chunks = events[-2], events[:-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 14
    assert usage_chunk["usage"]["prompt_tokens"] == 30
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert [len(c["token_ids"]) for c in mine] == [1] * 7  # one token a step, in order
        assert [c["finish_reason"] for c in mine] == [None] * 6 + ["length"]
        assert mine[0]["prompt_token_ids"] == prompt
        assert all("prompt_token_ids" not in c for c in mine[1:])
        streamed = [t for c in mine for t in c["token_ids"]]
        assert streamed == whole["choices"][index]["token_ids"]
    assert all(c["usage"] is None and c["object"] == "text_completion" for c in chunks)
    assert len({c["id"] for c in events[:-1]}) == 1


def test_n_samples_go_through_the_engines_fan_out(servers):
    client = servers("apc")
    since = len(client.get("/step_log").json()["steps"])
    before = metrics(client)
    reply = complete(client, prompts(9, 1, 69)[0], max_tokens=3, n=3)
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2]
    assert all(len(c["token_ids"]) == 3 for c in reply["choices"])
    first = client.get("/step_log", params={"since": since}).json()["steps"][0]
    rid = reply["id"]
    assert [r for r, _ in first["requests"]] == [f"{i}_{rid}" for i in range(3)]  # vLLM's ids
    # Samples 1 and 2 reuse sample 0's four full blocks, allocated in the same step (APC).
    hits = metrics(client)["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    assert hits == 2 * 64 and cached(reply) == 64  # the final output's, as vLLM reports it


# ---------------------------------------------------------------------------- cache


@pytest.mark.parametrize("engine", ENGINES)
def test_cached_tokens_on_a_shared_prefix_and_metrics_deltas(servers, engine):
    client = servers(engine)
    first, second, third = prompts(2, 3, 49, prefix=40)
    before = metrics(client)
    replies = [complete(client, p) for p in (first, second, third)]
    # apc caches whole blocks of 16 (32 of the 40 shared tokens), radix every token.
    expect = 32 if engine == "apc" else 40
    assert [cached(r) for r in replies] == [0, expect, expect]
    after = metrics(client)
    delta = {k: after[k] - before[k] for k in after}
    assert delta["vllm:prefix_cache_hits_total"] == sum(cached(r) for r in replies)
    assert delta["sglang:cached_tokens_total"] == delta["vllm:prefix_cache_hits_total"]
    assert delta["vllm:prompt_tokens_total"] == 3 * 49
    assert delta["vllm:generation_tokens_total"] == 3 * 4
    assert after["vllm:num_requests_running"] == after["vllm:num_requests_waiting"] == 0
    assert after["vllm:kv_cache_usage_perc"] == 0.0


@pytest.mark.parametrize(
    ("engine", "route"), [("apc", "/reset_prefix_cache"), ("radix", "/flush_cache")]
)
def test_reset_then_a_probe_misses_and_reset_is_refused_while_kv_is_held(servers, engine, route):
    client = servers(engine)
    probe = prompts(3, 1, 40)[0]
    complete(client, probe)
    assert cached(complete(client, probe)) > 0
    body = {"model": "tiny", "prompt": prompts(4, 1, 20)[0], "max_tokens": 400, "stream": True}
    with client.stream("POST", "/v1/completions", json=body) as reply:
        lines = reply.iter_lines()  # kept: closing it would close the connection
        first_data(lines)
        for path in ("/reset_prefix_cache", "/flush_cache"):
            refused = client.post(path)
            assert refused.status_code in (400, 409) and "hold KV" in refused.text
        events = sse_events(lines)
    assert events[-1] == "[DONE]"
    assert client.post(route).status_code == 200
    assert cached(complete(client, probe)) == 0


def test_a_disconnected_client_frees_its_kv(servers):
    client = servers("apc")
    body = {"model": "tiny", "prompt": prompts(5, 1, 20)[0], "max_tokens": 2000, "stream": True}
    generated = metrics(client)["vllm:generation_tokens_total"]
    with client.stream("POST", "/v1/completions", json=body) as reply:
        lines = reply.iter_lines()
        first_data(lines)
        assert metrics(client)["vllm:num_requests_running"] == 1
    # Leaving the block closes the connection mid-stream: the request is aborted.
    deadline = time.monotonic() + 20
    while metrics(client)["vllm:num_requests_running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    after = metrics(client)
    assert after["vllm:num_requests_running"] == 0 and after["vllm:kv_cache_usage_perc"] == 0.0
    assert after["vllm:generation_tokens_total"] - generated < 2000  # it stopped early
    assert client.post("/reset_prefix_cache").status_code == 200  # nothing holds KV


# ---------------------------------------------------------------------------- concurrency


LONG = 400


def test_a_burst_of_64_requests_completes_with_continuous_batching(servers):
    client = servers("apc")
    url = str(client.base_url)
    lengths = [1 + i % 12 for i in range(63)]
    burst = prompts(6, 63, 12)
    since = len(client.get("/step_log").json()["steps"])

    async def run() -> tuple[list[int], list[dict]]:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as ac:
            body = {"model": "tiny", "prompt": prompts(7, 1, 12)[0], "max_tokens": LONG}
            # A long request decodes while the burst arrives (long enough to outlast sending it).
            async with ac.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
                lines = r.aiter_lines()
                async for line in lines:
                    if line.startswith("data: "):
                        break
                sends = [
                    ac.post("/v1/completions", json={**body, "prompt": p, "max_tokens": n})
                    for p, n in zip(burst, lengths)
                ]
                replies = await asyncio.gather(*sends)
                streamed = 1 + sum([1 async for line in lines if line.startswith("data: {")])
        return [streamed], [r.json() for r in replies]

    streamed, replies = asyncio.run(run())
    assert streamed == [LONG]
    assert [r["usage"]["completion_tokens"] for r in replies] == lengths
    steps = client.get("/step_log", params={"since": since}).json()["steps"]
    assert max(len(s["requests"]) for s in steps) > 1
    seen: set[str] = set()
    joined_while_decoding = False
    for step in steps:
        ids = {rid for rid, _ in step["requests"]}
        new = ids - seen
        if new and ids & seen:
            joined_while_decoding = True
        seen |= ids
    assert joined_while_decoding
    assert any(s["kind"] == "mixed" for s in steps)  # vLLM's scheduler: prefill beside decode
    assert client.get("/health").status_code == 200


def test_an_unknown_model_gets_404_as_from_vllm(servers):
    """vLLM 0.32 (OpenAIServingModels.check_model) answers a model it does not serve with 404."""
    reply = servers("radix").post("/v1/completions", json={"model": "gpt-4", "prompt": [1, 2, 3]})
    assert reply.status_code == 404
    error = reply.json()["error"]
    assert error["type"] == "NotFoundError" and error["param"] == "model" and error["code"] == 404


@pytest.mark.parametrize("engine", ENGINES)
def test_one_at_a_time_greedy_outputs_equal_the_in_process_engine(servers, engine):
    client = servers(engine)
    batch = prompts(8, 4, 37, prefix=20)
    sizes = [3, 9, 5, 6]
    replies = [complete(client, p, max_tokens=n) for p, n in zip(batch, sizes)]
    cfg = compose_config([f"engine={engine}", *TINY])
    engine_ = build_engine(cfg.engine, cfg.model, executor="real", device="cpu")
    records = []  # the same requests one at a time, from an empty cache as the server's

    for i, (p, n) in enumerate(zip(batch, sizes)):
        records += run_batch(engine_, [GenerationRequest(f"r{i}", tuple(p), n)])
    assert [r["choices"][0]["token_ids"] for r in replies] == [list(r.output_ids) for r in records]
    assert [cached(r) for r in replies] == [r.cached_tokens for r in records]


# ---------------------------------------------------------------------------- bad requests


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        ({"prompt": [1] * 4000, "max_tokens": 200}, "max_tokens"),
        ({"prompt": [1] * 5000}, "prompt"),
        ({"prompt": "text needs a tokenizer"}, "prompt"),
        ({"prompt": [1, 2, VOCAB]}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [1, 2], "temperature": 0.8}, "temperature"),
        ({"prompt": [1, 2], "max_tokens": 0}, "max_tokens"),
        ({"prompt": [1, 2], "n": True}, "n"),
        ({"prompt": [1, 2], "stream_options": {"include_usage": True}}, "stream_options"),
        ({"prompt": [1, 2], "max_tokens": 3, "min_tokens": 4}, "min_tokens"),
        ({"prompt": [1, 2], "stop": ["\n"]}, "stop"),
    ],
)
def test_bad_requests_get_400_with_an_openai_error_body(servers, body, param):
    client = servers("radix")
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}
    reply = client.post("/v1/completions", **kw)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["code"] == 400 and error["message"]
    assert client.get("/health").status_code == 200


def test_a_request_larger_than_the_kv_pool_gets_400():
    cfg = compose_config(["engine=apc", *TINY[:-1], "engine.kv_capacity_tokens=256"])
    with InProcessServer(prepare(cfg)) as server:
        client = httpx.Client(base_url=server.url, timeout=60)
        reply = client.post("/v1/completions", json={"prompt": [1] * 250, "max_tokens": 16})
        assert reply.status_code == 400 and "kv_capacity_tokens" in reply.json()["error"]["message"]
        assert complete(client, [1] * 20)["usage"]["completion_tokens"] == 4


def test_protocol_checks_fields_by_name():
    params = protocol.parse_completion({"prompt": [[5, 6]], "max_tokens": 2, "ignore_eos": True})
    assert params.prompt_ids == (5, 6) and params.ignore_eos and params.n == 1
    with pytest.raises(ApiError, match="batched prompts"):
        protocol.parse_completion({"prompt": ["a", "b"]})
    with pytest.raises(ApiError, match="stream must be true or false"):
        protocol.parse_completion({"prompt": [1], "stream": "yes"})


def test_the_step_log_file_holds_every_step(tmp_path):
    log = StepLog(size=2, path=str(tmp_path / "steps.jsonl"))
    for i in range(3):
        log.append(StepEntry(i, 0.1 * i, "mixed", [("a", 5 - i), ("b", 1)], []))
    log.close()
    lines = [json.loads(x) for x in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 1, 2] and lines[2]["requests"] == [["a", 3], ["b", 1]]
    assert [e.step for e in log.since(0)] == [1, 2] and [e.step for e in log.since(2)] == [2]


# ---------------------------------------------------------------------------- text


def test_text_prompts_on_the_smollm2_vocabulary():
    cfg = compose_config(["engine=radix", "model=smollm2-rand", *TINY[1:]])
    with InProcessServer(prepare(cfg)) as server:
        client = httpx.Client(base_url=server.url, timeout=60)
        text = "The capital of France is Paris, and the capital of Italy is"
        body = {"model": "smollm2-rand", "prompt": text, "max_tokens": 6, "return_token_ids": True}
        reply = client.post("/v1/completions", json=body).json()
        again = client.post("/v1/completions", json=body).json()
        # vLLM's /tokenize (vllm-router's cache_aware reads prompts through it): the same ids
        tokenized = client.post("/tokenize", json={"model": "smollm2-rand", "prompt": text})
        refused = [
            client.post("/tokenize", json={"messages": [{"role": "user", "content": text}]}),
            client.post("/tokenize", json={"prompt": [1, 2]}),
            client.post("/tokenize", json={"model": "other", "prompt": text}),
        ]
    codec = load_codec("smollm2-135m")
    choice = reply["choices"][0]
    assert tokenized.json() == {
        "count": len(choice["prompt_token_ids"]),
        "max_model_len": cfg.model.max_position_embeddings,
        "tokens": choice["prompt_token_ids"],
    }
    assert [r.status_code for r in refused] == [400, 400, 404]
    assert [r.json()["error"]["param"] for r in refused] == ["messages", "prompt", "model"]
    assert choice["prompt_token_ids"] == list(codec.encode(text))
    assert choice["text"] == codec.decode(choice["token_ids"]) and len(choice["token_ids"]) == 6
    assert cached(again) == len(choice["prompt_token_ids"]) - 1  # token-exact, last one computed


def test_detokenizer_holds_back_a_partial_character():
    codec = load_codec("smollm2-135m")
    ids = list(codec.encode("naïve 東京"))
    detok = Detokenizer(codec)
    deltas = [detok.add([t]) for t in ids]
    assert "".join(deltas) + detok.flush() == "naïve 東京"
    assert all("\ufffd" not in d for d in deltas)


# ---------------------------------------------------------------------------- the process


def _serve(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "harness.builtin_server", *args]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model=nope"], "unknown model 'nope'; valid: s, smollm2-135m, smollm2-rand, tiny"),
        (["port=70000"], "port must be an integer in [0, 65535], got 70000"),
        (["engine.block_size=0"], "engine.block_size must be a positive integer, got 0"),
        (["temperature=1"], "unknown field temperature; valid: "),
        (["port=BUSY"], "host/port: cannot listen on 127.0.0.1:"),
    ],
)
def test_bad_command_line_is_one_error_line_and_exit_2(args, message, capsys):
    from harness.builtin_server.__main__ import main

    with socket.socket() as busy:  # a port something else listens on
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main([a.replace("BUSY", str(port)) for a in args])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), err


def test_sigterm_with_requests_in_flight_ends_cleanly():
    port = free_port()
    proc = _serve(["engine=radix", *TINY, f"port={port}", "timeout_graceful_shutdown_s=1"])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.2)

        async def in_flight() -> list[str]:
            """Three long streams; SIGTERM once each has a token; how each stream ended."""
            started: list[int] = []
            async with httpx.AsyncClient(base_url=url, timeout=60) as ac:
                body = {"prompt": [1, 2, 3], "max_tokens": 3000, "stream": True}

                async def one(i: int) -> str:
                    last = ""
                    try:
                        async with ac.stream("POST", "/v1/completions", json=body) as r:
                            async for line in r.aiter_lines():
                                last = line or last
                                if line.startswith("data: {") and i not in started:
                                    started.append(i)
                                    if len(started) == 3:
                                        proc.send_signal(signal.SIGTERM)
                    except httpx.TransportError:
                        return "closed"
                    return last

                return await asyncio.gather(*(one(i) for i in range(3)))

        endings = asyncio.run(in_flight())
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Traceback" not in out
    # Each stream ended with [DONE]: the ones cut off by the shutdown after an error event.
    assert endings == ["data: [DONE]"] * 3
