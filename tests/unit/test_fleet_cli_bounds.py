"""The real-router side CLI refuses bad input before anything starts: one line naming the flag
the user typed, exit 2, no folder left. Called in-process (the tier guard fails the test if any
process or socket were opened: nothing starts before these checks). Workers beyond what the
machine holds: tests/run/test_resource_promise.py; a pipeline run's vLLM workers:
tests/run/test_fleet_workers.py."""

from __future__ import annotations

import pytest

from harness.routers import fleet


def _refused(main, argv: list[str], capsys, out) -> str:
    assert main([*argv, "--out", str(out)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert not out.exists()  # a refused run leaves no folder
    return err[0]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--workers", "0"], "--workers must be an integer in [2, 1024], got 0"),
        (["--workers", "1"], "--workers must be an integer in [2, 1024], got 1"),
        (["--groups", "0"], "--groups must be at least 1 (the stream would be empty), got 0"),
        (["--per-group", "0"], "--per-group must be at least 1"),
        (["--policy", "nope"], "--policy 'nope' is not a sglang-router policy the twin models"),
        (["--policy", "kv_aware"], "valid: round_robin, random, cache_aware, power_of_two"),
        (["--policy", "cached_now"], "--policy 'cached_now' is not a sglang-router policy"),
        (["--concurrency", "0"], "--concurrency must be an integer in [1, 64], got 0"),
    ],
)
def test_bad_flags_of_the_builtin_fleet(argv, needle, capsys, tmp_path):
    line = _refused(fleet.main, ["--router", "sglang", *argv], capsys, tmp_path / "o")
    assert needle in line, line
