"""Mooncake trace replay: expansion rule, file errors, and the reference hit ceilings of docs/benchmarking.md §10."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.workload_util import SPACE, brute_shared, params
from workloads.base import DATA_DIR, generate
from workloads.bounds import Replay, simulate
from workloads.trace import prompt_arrays, read_trace

CONVERSATION = "mooncake/conversation_trace.jsonl"


def test_requests_follow_the_trace_rows():
    rows = read_trace(CONVERSATION, max_requests=12)
    reqs = generate(params("trace", max_requests=12, slowdown=2.0), 0, SPACE)
    assert len(reqs) == 12 and reqs[0].request_id == "conversation_trace-1"
    for row, r in zip(rows, reqs):
        assert len(r.prompt_ids) == row.input_length and r.output_len == row.output_length
        assert r.arrival_s == pytest.approx(row.timestamp_ms / 1000 * 2.0)
    assert [r.shared_prefix_len for r in reqs] == brute_shared(reqs)


def test_equal_ids_give_equal_blocks_and_distinct_ids_distinct_blocks():
    rows = read_trace(CONVERSATION, max_requests=2)  # [0, 1, ...] and [0, 14, ...]
    a, b = (np.asarray(r.prompt_ids) for r in generate(params("trace", max_requests=2), 0, SPACE))
    assert rows[0].hash_ids[0] == rows[1].hash_ids[0] and rows[0].hash_ids[1] != rows[1].hash_ids[1]
    assert np.array_equal(a[:512], b[:512])
    assert a[512] != b[512] and np.mean(a[512:1024] == b[512:1024]) < 0.01


def test_block_content_depends_on_the_id_not_the_position(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [
        {"timestamp": 0, "input_length": 20, "output_length": 1, "hash_ids": [5, 9, 7]},
        {"timestamp": 10, "input_length": 16, "output_length": 2, "hash_ids": [9, 5]},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    a, b = read_trace(str(path), block_size=8)
    pa, pb = prompt_arrays([a, b], 0, SPACE, 8)
    assert len(pa) == 20 and np.array_equal(pa[8:16], pb[:8]) and np.array_equal(pa[:8], pb[8:])


@pytest.mark.parametrize(
    "line,problem",
    [
        ("{not json", "not valid JSON"),
        ('{"timestamp": 0, "output_length": 3, "hash_ids": [1]}', "missing field 'input_length'"),
        (
            '{"timestamp": 0, "input_length": 900, "output_length": 3, "hash_ids": [1]}',
            "input_length 900 does not fit 1 hash_ids of 512 tokens",
        ),
        (
            '{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": "1,2"}',
            "hash_ids must be a non-empty list",
        ),
        (
            '{"timestamp": -1, "input_length": 10, "output_length": 3, "hash_ids": [1]}',
            "timestamp must be a non-negative number",
        ),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_malformed_line_is_reported_as_file_and_line(tmp_path, line, problem):
    path = tmp_path / "bad.jsonl"
    good = '{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [1]}'
    path.write_text(f"{good}\n{good}\n{line}\n")
    with pytest.raises(ValueError) as info:
        generate(params("trace", path=str(path), max_requests=None), 0, SPACE)
    assert str(info.value).startswith(f"{path}:3: ") and problem in str(info.value)


def test_missing_file_names_the_path():
    with pytest.raises(ValueError, match="no/such/trace.jsonl"):  # workloads.errors.BadInput
        generate(params("trace", path="no/such/trace.jsonl"), 0, SPACE)


def test_relative_paths_resolve_in_the_data_dir_then_the_cwd(tmp_path, monkeypatch):
    assert (DATA_DIR / CONVERSATION).is_file()
    monkeypatch.chdir(tmp_path)
    assert len(generate(params("trace", max_requests=2), 0, SPACE)) == 2  # from the package data
    (tmp_path / "mine.jsonl").write_text(
        '{"timestamp": 5, "input_length": 3, "output_length": 1, "hash_ids": [0]}\n'
    )
    reqs = generate(params("trace", path="mine.jsonl", max_requests=None), 0, SPACE)
    assert (
        len(reqs) == 1
        and len(reqs[0].prompt_ids) == 3
        and reqs[0].arrival_s == pytest.approx(0.005)
    )


# §10 reference ceilings: prefix-chain hits over 512-token blocks in trace order; "64k" blocks
# means 64,000. Unbounded: token-weighted; capped (LRU): block-level.
REFERENCES = {
    "conversation": (0.374, 0.366, {64000: 0.359, 16000: 0.263, 4000: 0.086, 1000: 0.044}),
    "synthetic": (0.651, 0.640, {64000: 0.640, 16000: 0.530, 4000: 0.230, 1000: 0.082}),
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_mooncake_expansion_reproduces_the_reference_ceilings(name):
    rows = read_trace(f"mooncake/{name}_trace.jsonl")
    replays = (Replay(p, p) for p in prompt_arrays(rows, 0, SPACE, 512))  # streamed: ~10^8 tokens
    token_ref, block_ref, capped = REFERENCES[name]
    unbounded, *lru = simulate(replays, 512, [None, *capped], policy="lru", accounting="trace")
    assert round(unbounded.hit_rate, 3) == token_ref
    assert round(unbounded.block_hit_rate, 3) == block_ref
    assert [round(b.block_hit_rate, 3) for b in lru] == list(capped.values())
