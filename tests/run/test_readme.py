"""The README's commands work as written: those that take seconds run here (a run on the tiny model,
as the README suggests for a first try, the report on a constructed results folder, the claims'
arguments), every other `python -m harness` command passes the preflight against the shipped
configs, and every script it names exists (or is the one the server setup will add)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from harness.config.preflight import preflight
from tests.harness_util import SMALL, merged, run_harness
from tests.report_support import write_results_tree

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"```bash\n(.*?)```", re.S)
# docs/servers.md: the real-server setup is written by the server work; until then the README
# names it and points there.
PENDING_SCRIPTS = {"scripts/setup_vllm.sh"}
# What the README says makes a first run take seconds: the tiny model, a few small requests.
TINY = [*SMALL, "workload.num_users=2", "workload.num_rounds=2", "workload.system_prompt_len=32"]


def commands() -> list[list[str]]:
    """Every command of the README's bash blocks, split like a shell (comments dropped, `&&`
    chains split)."""
    out = []
    for block in BLOCK.findall(README):
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words:
                    out.append(words)
    return out


def harness_overrides(words: list[str]) -> list[str] | None:
    """The arguments of a `python -m harness` command (any python path), else None."""
    if len(words) >= 3 and words[0].endswith("python") and words[1:3] == ["-m", "harness"]:
        return words[3:]
    return None


def test_the_readme_fits_on_a_screen_and_keeps_the_quickstart():
    assert len(README.splitlines()) <= 250
    assert "bash scripts/setup.sh && .venv/bin/python -m harness\n.venv/bin/python -m pytest" in (
        README
    )
    assert "bash scripts/setup_vllm.sh" in README and "docs/servers.md" in README


def test_every_harness_command_passes_the_preflight():
    found = [o for o in map(harness_overrides, commands()) if o is not None]
    assert len(found) >= 4  # the quickstart, one run, a sweep, a suite
    for overrides in found:
        assert preflight(overrides) is None, overrides


def test_the_one_run_command_runs_on_the_tiny_model(tmp_path):
    runs = [o for o in map(harness_overrides, commands()) if o and "-m" not in o]
    local = [o for o in runs if not any(a.startswith("server=") for a in o)]  # no live server
    (one,) = [o for o in local if "workload=multiturn" in o]
    run = run_harness(merged(one, TINY), tmp_path / "run")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.summary["status"] == "ok" and run.summary["workload"] == "multiturn"
    assert run.summary["backend"] == "radix"


def test_the_report_command_runs(tmp_path, monkeypatch):
    from harness.report import main

    (report,) = [w for w in commands() if w[1:3] == ["-m", "harness.report"]]
    write_results_tree(tmp_path / "results")
    monkeypatch.chdir(tmp_path)  # its default folder is ./results
    assert main(report[3:]) == 0
    assert (tmp_path / "results" / "summary.csv").is_file()


def test_the_claims_command_parses(capsys):
    from harness.claims.__main__ import main

    (claims,) = [w for w in commands() if w[1:3] == ["-m", "harness.claims"]]
    # An unknown claim stops it right after its arguments parsed: the README's flags are valid.
    assert main([*claims[3:], "--only", "zz_no_such_claim"]) == 2
    assert "unknown claim 'zz_no_such_claim'" in capsys.readouterr().err


@pytest.mark.parametrize("script", sorted(set(re.findall(r"scripts/[\w.]+\.(?:sh|py)", README))))
def test_every_script_the_readme_names_exists(script):
    assert (ROOT / script).is_file() or script in PENDING_SCRIPTS, script
