"""Fleet output shows the routing: the real-router run's lines (the twin's score, the split over
workers, where its files are)."""

from __future__ import annotations

from pathlib import Path

from harness.routers.cli import result_lines
from harness.routers.fleet import Decision


def test_the_real_router_lines_give_the_split_the_score_and_the_files():
    decisions = [Decision(f"r{i}", 0, 0 if i < 5 else 2, 0) for i in range(6)]
    lines = result_lines("sglang-router cache_aware", decisions, 3, Path("out"), ["decisions.csv"])
    assert lines[0] == "sglang-router cache_aware: 5/6 decisions predicted by the twin"
    assert lines[1] == "  requests per worker: w0 5, w1 0, w2 1"  # a worker that took none shows
    assert lines[2] == f"  files: {Path('out') / 'decisions.csv'}"


def test_guesses_while_learning_are_reported_apart_from_the_score():
    decisions = [Decision("a", 0, 1, 0, learned=False), Decision("b", 2, 2, 0)]
    lines = result_lines("sglang-router round_robin", decisions, 3, Path("out"), ["x"])
    assert lines[0] == "sglang-router round_robin: 1/1 decisions predicted by the twin"
    assert lines[1] == "  guesses while learning the router's order (unscored): 0/1"
