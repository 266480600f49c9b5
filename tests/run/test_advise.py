"""`python -m harness.advise` on hand-made traffic whose answer is known (issue 46), run in this
process through its `main()` with --quick grids on the simulated executor: a shared prefix in one
burst (apc, by same-step sharing), a tree of turns at steady load (radix, by page-1 granularity),
no reuse at all (no difference beyond the 0%-hit cost), the newcomer's 15 prompts without arrival
times (depends on the arrival pattern, both cells shown) and bad input (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.advise.__main__ import main

DATA = Path(__file__).resolve().parent / "data"


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _ids(rng: np.random.Generator, n: int) -> list[int]:
    return [int(i) for i in rng.integers(100, 30_000, size=n)]


def _advise(tmp_path: Path, capsys, traffic: Path, *extra: str) -> tuple[str, dict]:
    argv = ["workload=prompts", f"workload.path={traffic}", "--quick", "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as done:
        main([*argv, "--name", "a", *extra])
    out = capsys.readouterr().out
    assert done.value.code == 0, out
    verdicts = json.loads((tmp_path / "a" / "verdicts.json").read_text())
    assert (tmp_path / "a" / "advice.md").read_text(encoding="utf-8") in out
    assert (tmp_path / "a" / "grid.png").is_file()
    return out, verdicts


def _section(text: str, head: str) -> str:
    return text.split(f"## {head}", 1)[1].split("\n## ", 1)[0]


def test_a_shared_prefix_in_one_burst_goes_to_apc_by_same_step_sharing(tmp_path, capsys):
    rng = np.random.default_rng(1)
    prefix = _ids(rng, 400)  # whole blocks of 16: block 16 loses nothing to granularity
    lines = [{"prompt_ids": prefix + _ids(rng, 8), "output_len": 8} for _ in range(16)]
    out, verdicts = _advise(tmp_path, capsys, _write(tmp_path / "burst.jsonl", lines))
    assert verdicts["hit rate"].startswith("apc ")
    burst = _section(out, "Answer").split("hit rate", 1)[1]
    assert "one burst: apc" in burst
    why = _section(out, "Why (hit rate)")
    assert why.split("\n- ")[1].startswith("one burst: mostly apc's same-step sharing")


def test_a_tree_of_turns_at_steady_load_goes_to_radix_by_page_one_granularity(tmp_path, capsys):
    rng = np.random.default_rng(2)
    root = _ids(rng, 100)
    lines = []
    for session in range(6):  # first turns one second apart, later turns after their reply
        prompt = root + _ids(rng, 37)
        for turn in range(3):
            line = {"prompt_ids": prompt, "output_len": 8, "session": f"s{session}"}
            lines.append(line | ({"arrival_s": float(session)} if turn == 0 else {}))
            prompt = prompt + _ids(rng, 21)  # never a whole page of 16
    out, verdicts = _advise(tmp_path, capsys, _write(tmp_path / "tree.jsonl", lines))
    assert "the traffic's own times" in out and "no arrival times" not in out
    assert verdicts["hit rate"].startswith("radix ")
    assert "mostly radix's page-1 granularity" in _section(out, "Why (hit rate)")


def test_traffic_without_reuse_makes_no_difference_beyond_the_zero_hit_cost(tmp_path, capsys):
    rng = np.random.default_rng(3)
    lines = [{"prompt_ids": _ids(rng, 64), "output_len": 8} for _ in range(8)]
    out, verdicts = _advise(tmp_path, capsys, _write(tmp_path / "unique.jsonl", lines))
    assert set(verdicts.values()) == {"no difference beyond the 0%-hit cost"}
    assert "no arrival times" in out and "one burst" in out  # the burst default, stated


def test_the_newcomers_prompts_depend_on_the_arrival_pattern_with_both_cells(tmp_path, capsys):
    out, verdicts = _advise(tmp_path, capsys, DATA / "newcomer_15.jsonl")
    assert verdicts["hit rate"].startswith("depends on the arrival pattern")
    assert "has no arrival times" in out and "would send it as one burst" in out
    hit = _section(out, "Answer").split("**hit rate", 1)[1]
    burst, poisson = hit.splitlines()[1:3]
    assert burst.startswith("  - one burst: apc by") and "apc " in burst and "radix " in burst
    assert poisson.startswith("  - Poisson ") and ": radix by" in poisson and "apc " in poisson


@pytest.mark.parametrize(
    "case, extra",
    [
        ("empty", ()),
        ("one", ()),
        ("small", ("engine.kv_capacity_tokens=64",)),
        ("grid_key", ("engine=radix",)),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case, extra):
    rng = np.random.default_rng(4)
    lines = {"empty": [], "one": [{"prompt_ids": _ids(rng, 32)}]}.get(
        case, [{"prompt_ids": _ids(rng, 200)}, {"prompt_ids": _ids(rng, 200)}]
    )
    traffic = _write(tmp_path / "in.jsonl", lines)
    out_dir = tmp_path / "out"
    with pytest.raises(SystemExit) as done:
        main(["workload=prompts", f"workload.path={traffic}", "--out", str(out_dir), *extra])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert not out_dir.exists()  # nothing half-written


def test_the_readmes_advise_commands_run(tmp_path, capsys):
    """The README's two commands: the shipped workload's runs as written (--quick: seconds); the
    user's names a prompt file, the kind the newcomer's test above runs."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    commands = [
        ln.split()[3:] for ln in readme.splitlines() if ln.startswith("python -m harness.advise ")
    ]
    assert len(commands) == 2
    user, shipped = commands
    assert "workload.path=my_prompts.jsonl" in user and "--quick" in shipped
    with pytest.raises(SystemExit) as done:
        main([*shipped, "--out", str(tmp_path), "--name", "shipped"])
    assert done.value.code == 0
    assert "## Answer" in capsys.readouterr().out
    assert (tmp_path / "shipped" / "runs" / "burst" / "apc-seed0" / "summary.json").is_file()


def test_the_real_executor_runs_the_grid_and_times_are_not_called_exact(tmp_path, capsys):
    rng = np.random.default_rng(6)
    prefix = [int(i) for i in rng.integers(1, 1024, size=48)]
    lines = [
        {"prompt_ids": prefix + [int(i) for i in rng.integers(1, 1024, size=5)], "output_len": 2}
    ]
    traffic = _write(tmp_path / "real.jsonl", lines * 1 + [dict(lines[0], output_len=3)] * 3)
    real = ("model=tiny", "executor=real", "device=cpu", "engine.kv_capacity_tokens=4096")
    out, verdicts = _advise(tmp_path, capsys, traffic, *real)
    assert "executor real" in out and set(verdicts) == {
        "TTFT p50",
        "TTFT p99",
        "throughput",
        "hit rate",
    }
    ttft = _section(out, "Answer").split("**TTFT p50", 1)[1].splitlines()[1]
    assert ttft.startswith("  - one burst: ") and "no interval (a point comparison)" in ttft
