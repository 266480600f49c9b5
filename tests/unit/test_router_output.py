"""Fleet output shows the routing: the lines a real-router run prints (the twin's score, the
misses it explains, the split over workers, where its files are)."""

from __future__ import annotations

from pathlib import Path

from harness.routers.drive import Decision
from harness.routers.lines import result_lines


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


def test_misses_of_arrival_order_and_their_replayed_causes_are_counted():
    # one wave of two whose workers are right but swapped (arrival order), and a wave of two
    # whose second request's miss the replay found to be a tie
    decisions = [
        Decision("a", 0, 1, 0, wave=1, cause="arrival"),
        Decision("b", 1, 0, 0, wave=1, cause="arrival"),
        Decision("c", 0, 0, 0, wave=2),
        Decision("d", 0, 1, 0, wave=2, cause="tie"),
    ]
    lines = result_lines("sglang-router cache_aware", decisions, 2, Path("out"), ["x"])
    assert lines[0] == "sglang-router cache_aware: 1/4 decisions predicted by the twin"
    assert lines[1] == "  misses only in arrival order: 2"
    assert lines[2] == "  misses by cause (replayed): {'arrival': 2, 'tie': 1}"
    assert lines[3] == "  requests per worker: w0 2, w1 2"
