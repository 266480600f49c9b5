"""The real-server column's client side (harness/claims/server.py) against real servers.

The servers are the project's own engine served over the OpenAI API (`harness.builtin_server`, model=tiny,
uvicorn in a thread): one with prefix caching on and one started with it off, the pair the full
claims run takes from two vLLM servers. vLLM's own numbers are tests/live/test_real_server.py's (the
session vLLM server); here: the lines' form and values at the served engine's block size, the
burst in flight at once, claim 7 across two servers, a second run drawing fresh prompts, refusals
and an absent server as lines, the CLI passing both servers, and the caching-off launch flags.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.builtin_server.server import InProcessServer, compose_config, prepare
from harness.claims.__main__ import main
from harness.claims.server import FULL, QUICK, server_column
from harness.live_server.launch import VllmLaunch, free_port

TINY_IDS = range(1, 1024)  # model=tiny's vocabulary (1,024 ids)
KNOBS = ["model=tiny", "device=cpu", "engine=apc", "engine.backend=torch"]
KNOBS += ["engine.kv_capacity_tokens=16384", "engine.max_num_batched_tokens=8192"]


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, str]]:
    """(caching-on URL, caching-off URL) of two served apc engines, stopped with the module."""
    on = InProcessServer(prepare(compose_config(KNOBS))).__enter__()
    off_cfg = compose_config([*KNOBS, "engine.prefix_caching=false"])
    off = InProcessServer(prepare(off_cfg)).__enter__()
    yield on.url, off.url
    off.__exit__(None, None, None)
    on.__exit__(None, None, None)


def test_quick_column_at_the_servers_block_size(servers):
    on, _ = servers
    column = server_column(on, quick=True, token_ids=TINY_IDS)
    assert sorted(column) == sorted(QUICK)
    assert column[2] == "56 shared tokens, block 16: 48 cached (block-aligned)"
    assert column[9] == "512 shared tokens: same tenant 512 cached, other tenant 0 cached"
    burst = re.fullmatch(
        r"burst of 8 sharing 512 tokens, (\d) of 8 in flight together: (\d) of 8 hit the prefix "
        r"\(cached \[(.*)\]\), replies ended within \d+ ms of each other",
        column[10],
    )
    assert burst is not None, column[10]
    assert int(burst[1]) == 8  # the 8 requests went out at once over the one client
    cached = [int(c) for c in burst[3].split(", ")]
    assert len(cached) == 8 and int(burst[2]) == sum(c >= 512 for c in cached)
    ttft = re.fullmatch(
        r"1,040-token prompts sharing 1,024 tokens, one at a time: cold TTFT (\d+) ms, median TTFT "
        r"of the (\d) that hit (\d+) ms",
        column[18],
    )
    assert ttft is not None, column[18]
    assert int(ttft[2]) == 5  # prompts 2-6 find the prefix of prompt 1


def test_a_second_run_on_the_same_server_draws_fresh_prompts(servers):
    on, _ = servers
    again = server_column(on, quick=True, token_ids=TINY_IDS)
    assert again[9].endswith("other tenant 0 cached")  # not an earlier run's tenant-b blocks
    assert again[2].endswith("48 cached (block-aligned)")


def test_full_column_claim_7_compares_two_servers(servers):
    on, off = servers
    column = server_column(on, quick=False, off_url=off, token_ids=TINY_IDS)
    assert sorted(column) == sorted(FULL)
    seven = re.fullmatch(
        r"(\d)/6 greedy 64-token outputs identical, caching on vs off \(caching on: (\d) of 6 "
        r"prompts had cached tokens; caching off: 0 cached tokens reported\)",
        column[7],
    )
    assert seven is not None, column[7]
    assert int(seven[2]) == 5  # prompts 2-6 find the 256-token prefix of prompt 1
    assert "the caching-off server's median TTFT on the same prompts" in column[18]
    # The served engine decodes greedily only: claim 12's seeded sampling is refused, as a line.
    assert column[12] == (
        "failed on the server: HTTP 400: temperature must be 0: this server decodes greedily, "
        "got 1.0"
    )


def test_claim_7_without_a_caching_off_server_says_so(servers):
    on, _ = servers
    column = server_column(on, quick=False, token_ids=TINY_IDS)
    assert column[7].startswith("not run: needs a second server started with prefix caching off")


def test_an_absent_server_is_every_claims_line(servers):
    on, _ = servers
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    column = server_column(down, quick=True)
    assert all(line.startswith("failed on the server: ") for line in column.values()), column
    assert "Cannot connect" in column[9] or "refused" in column[9].lower(), column[9]
    column = server_column(on, quick=False, off_url=down, token_ids=TINY_IDS)
    assert column[7].startswith("failed on the server: caching-off server: no reply: "), column[7]
    assert column[2].endswith("(block-aligned)")


def test_an_unknown_model_is_the_claims_line(servers):
    on, _ = servers
    column = server_column(on, quick=True, model="nope", token_ids=TINY_IDS)
    assert all(line.startswith("failed on the server: HTTP 404: ") for line in column.values())


def test_server_off_needs_server(capsys, tmp_path):
    assert main(["--out", str(tmp_path / "c"), "--server-off", "http://127.0.0.1:1"]) == 2
    assert "--server-off needs --server" in capsys.readouterr().err


def test_the_run_passes_both_servers_and_records_them(servers, tmp_path):
    on, off = servers
    out = tmp_path / "c"
    argv = ["--out", str(out), "--quick", "--only", "alignment"]
    argv += ["--server", on, "--server-off", off]
    assert main(argv) == 0
    text = (out / "claims.md").read_text()
    assert f"--server {on} --server-off {off}" in text
    # The CLI draws ids from the local vLLM model's vocabulary: model=tiny refuses them, and
    # the refusal is the column's line (the run still completes and says so).
    assert "token id" in text and "out of the vocabulary [0, 1024)" in text


def test_launch_flags_for_a_caching_off_server():
    py = Path("python")
    assert "--enable-prefix-caching" in VllmLaunch().argv(py)
    off = VllmLaunch(prefix_caching=False).argv(py)
    assert "--no-enable-prefix-caching" in off and "--enable-prefix-caching" not in off
    assert "--enable-prompt-tokens-details" in off  # the off server still reports 0 cached


def test_launch_flags_for_an_eager_server():
    py = Path("python")
    assert "--enforce-eager" not in VllmLaunch().argv(py)  # vLLM's default: compile
    assert "--enforce-eager" in VllmLaunch(eager=True).argv(py)
