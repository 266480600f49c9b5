"""Progress bars: on a terminal once a step runs for a second, silent when stderr is a file."""

from __future__ import annotations

import io
import sys
import time

from workloads.base import FAMILIES, TokenSpace, generate
from workloads.bounds import run_bounds
from workloads.progress import progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_slow_step_shows_a_bar_on_a_terminal(monkeypatch):
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    for i in progress(range(3), "expanding trace", "req"):
        if i == 0:
            time.sleep(1.1)  # past the one-second delay
    assert "expanding trace" in terminal.getvalue() and "/3" in terminal.getvalue()


def test_a_fast_step_shows_nothing_even_on_a_terminal(monkeypatch):
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert list(progress(range(3), "quick", "req")) == [0, 1, 2]
    assert terminal.getvalue() == ""


def test_trace_expansion_and_bounds_are_silent_when_stderr_is_not_a_terminal(capfd):
    params = FAMILIES.get("trace").params_cls(name="mooncake_conversation", max_requests=8)
    reqs = generate(params, 0, TokenSpace(vocab_size=32000, first_ordinary_id=1))
    run_bounds(reqs, [512], 512, 64)
    assert capfd.readouterr().err == ""


def test_progress_can_be_forced_on_a_file_or_off_on_a_terminal(monkeypatch):
    log = io.StringIO()  # not a terminal
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setenv("PREFIXBENCH_PROGRESS", "1")
    bar = progress(None, "measured run", "req", total=8)
    time.sleep(1.1)
    bar.update(3)
    bar.close()
    assert "3/8" in log.getvalue()
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("PREFIXBENCH_PROGRESS", "0")
    for i in progress(range(2), "hidden", "req"):
        time.sleep(0.6 * (i + 1))
    assert terminal.getvalue() == ""
