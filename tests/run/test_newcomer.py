"""What a newcomer walking through the README met (issue 37's last paragraph), kept fixed: run
folders named after the server, the README's live-server commands, the docs' paths, setup.sh's
torch choice, the summary table's log prefix."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from harness.config.run_dirs import run_target

ROOT = Path(__file__).resolve().parents[2]


def test_a_server_run_folder_is_named_after_the_server():
    assert run_target("apc", None) == "apc" and run_target("radix", "None") == "radix"
    assert run_target("apc", "vllm") == "vllm-server"
    assert "${run_target:${hydra:runtime.choices.engine},${hydra:runtime.choices.server}}" in (
        (ROOT / "conf" / "config.yaml").read_text()
    )


def test_the_readme_says_how_to_send_one_request_at_a_time_and_stop_the_server():
    readme = (ROOT / "README.md").read_text()
    assert "load.max_concurrency=1" in readme and "bash scripts/stop_vllm.sh" in readme


def test_the_docs_name_folders_that_exist_or_a_script_makes():
    servers = (ROOT / "docs" / "servers.md").read_text()
    assert "models/rand" not in servers
    made = ".models/llama-rand-smollm2"
    assert (
        f"--tokenizer {made}" in servers
        and made in (ROOT / "scripts" / "setup_vllm.sh").read_text()
    )
    usage = (ROOT / "docs" / "usage.md").read_text()
    assert re.search(r"\| `main` \|[^\n]*\| 150 \| about 60 min", usage)


def test_setup_takes_the_cpu_torch_without_cuda_and_says_when_it_cannot():
    # the CPU-build choice lives in scripts/torch_build.sh, shared with setup_vllm.sh (issue 48)
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    setup += (ROOT / "scripts" / "torch_build.sh").read_text()
    assert "https://download.pytorch.org/whl/cpu" in setup and "--index-url" in setup
    assert "has_cuda" in setup and "install_cpu_torch" in setup and ": warning: " in setup
    assert "dist/" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_summary_table_starts_on_its_own_line_in_the_log(tmp_path):
    """Hydra's file format puts `[time][name][INFO] - ` before a record's first line: a header
    line takes it, so the table's first line is as aligned as the rest."""
    from tests.harness_util import SMALL, SYSTEM_PROMPT_SMALL, merged, run_harness

    log = logging.getLogger("harness.run.pipeline")
    handler = logging.FileHandler(tmp_path / "h.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    log.addHandler(handler)
    old = log.level
    log.setLevel(logging.INFO)
    try:
        run = run_harness(merged(SMALL, SYSTEM_PROMPT_SMALL), tmp_path / "run")
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
        handler.close()
    assert run.returncode == 0, run.stderr[-2000:]
    lines = (tmp_path / "h.log").read_text().splitlines()
    (i,) = [k for k, ln in enumerate(lines) if "Serving Benchmark Result" in ln]
    assert lines[i].startswith("=") and lines[i - 1].endswith(" - summary of run:")
