"""`python -m harness.advise --server URL` against a built-in server (model tiny, apc, uvicorn in a
thread of this process): the server's measured hit rate and its twin's agreement are set beside
the designs' under each arrival pattern; an unreachable server is one line and exit 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from harness.advise.__main__ import main
from harness.builtin_server.server import InProcessServer, compose_config, prepare
from harness.live_server.launch import free_port

KNOBS = ["model=tiny", "device=cpu", "engine=apc", "engine.backend=torch"]
KNOBS += ["engine.kv_capacity_tokens=16384", "engine.max_num_batched_tokens=8192"]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    served = InProcessServer(prepare(compose_config(KNOBS))).__enter__()
    yield served.url
    served.__exit__(None, None, None)


def _traffic(path: Path) -> Path:
    rng = np.random.default_rng(5)
    prefix = [int(i) for i in rng.integers(1, 1024, size=96)]
    lines = [
        {"prompt_ids": prefix + [int(i) for i in rng.integers(1, 1024, size=9)], "output_len": 4}
        for _ in range(6)
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def test_the_servers_hit_rate_stands_beside_the_designs(server, tokenizer, tmp_path, capsys):
    traffic = _traffic(tmp_path / "t.jsonl")
    argv = ["workload=prompts", f"workload.path={traffic}", "model=tiny", "--quick"]
    argv += [f"server.tokenizer={tokenizer}", "server.max_num_batched_tokens=8192"]
    with pytest.raises(SystemExit) as done:
        main([*argv, "--out", str(tmp_path), "--name", "a", "--server", server])
    out, err = capsys.readouterr()
    assert done.value.code == 0, err
    section = out.split("## Your server", 1)[1].split("\n## ", 1)[0]
    burst, poisson = [ln for ln in section.splitlines() if ln.startswith("- ")]
    assert burst.startswith("- one burst: measured hit rate ") and "apc " in burst
    assert poisson.startswith("- Poisson ") and "the server's burst throughput" in poisson
    assert "its twin (built-in apc) predicted" in burst
    assert (tmp_path / "a" / "server" / "burst" / "summary.json").is_file()


def test_an_unreachable_server_is_one_line_and_exit_2(tmp_path, capsys):
    traffic = _traffic(tmp_path / "t.jsonl")
    url = f"http://127.0.0.1:{free_port()}"
    argv = ["workload=prompts", f"workload.path={traffic}", "model=tiny", "--quick"]
    with pytest.raises(SystemExit) as done:
        main([*argv, "--out", str(tmp_path / "out"), "--server", url])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --server {url}: "), err
    assert not any((tmp_path / "out").iterdir()) if (tmp_path / "out").exists() else True
