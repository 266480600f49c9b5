"""Issue 48: a run against an unreachable server names the start script of that server's kind
(server=sglang said `bash scripts/start_vllm.sh`). Connects to a closed loopback port."""

from __future__ import annotations

import pytest

from harness.builtin_server.server import free_port
from tests.harness_util import run_harness


@pytest.mark.parametrize(
    ("flavour", "script"),
    [("sglang", "scripts/start_sglang.sh"), ("vllm", "scripts/start_vllm.sh")],
)
def test_the_hint_names_the_servers_own_start_script(tmp_path, flavour, script):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there once the probe closed
    run = run_harness([f"server={flavour}", f"server.url={url}", "model=tiny"], tmp_path / "run")
    assert run.returncode == 2, (run.stdout, run.stderr)
    line = [x for x in run.stderr.splitlines() if "cannot reach" in x]
    assert len(line) == 1 and f"bash {script}" in line[0], run.stderr
    other = {"sglang": "start_vllm", "vllm": "start_sglang"}[flavour]
    assert other not in run.stderr
