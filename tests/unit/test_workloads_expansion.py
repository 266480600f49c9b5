"""The shortcuts of the trace expansion and the bounds hashing give exactly what the plain
definitions give: blocks expanded once and kept, replies drawn many streams at a time, shared
int objects, and prefix hashes taken only at block ends from a table of mixed ids."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.workload_util import SPACE, common_prefix
from workloads import tokens, trace
from workloads.bounds import _BASE, _Hasher
from workloads.tokens import (
    GAMMA,
    as_tuple,
    mix_array,
    stream_keys,
    token_block,
    token_ids,
    token_streams,
)
from workloads.trace import _replies, prompt_arrays, read_trace, shared_prefix_lens


def _trace(tmp_path, lines: list[dict]):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return read_trace(str(path), block_size=8)


def _line(t: int, n: int, ids: list[int], out: int = 3) -> dict:
    return {"timestamp": t, "input_length": n, "output_length": out, "hash_ids": ids}


# Ids re-used by the next row, by a row far later, twice within one row, and only once.
LINES = [
    _line(0, 20, [5, 9, 7]),
    _line(1, 16, [9, 5]),
    _line(2, 12, [1, 2]),
    _line(3, 24, [3, 3, 3]),
    _line(4, 9, [5, 7]),
    _line(5, 8, [7]),
]


@pytest.mark.parametrize("draw_blocks", [1, 2, 64])  # a group per row, a few rows, all rows
def test_prompts_are_the_concatenated_streams_of_their_ids(tmp_path, monkeypatch, draw_blocks):
    monkeypatch.setattr(trace, "DRAW_BLOCKS", draw_blocks)
    rows = _trace(tmp_path, LINES)
    for row, prompt in zip(rows, prompt_arrays(rows, 3, SPACE, 8), strict=True):
        keys = stream_keys((3, "trace"), np.asarray(row.hash_ids, dtype=np.uint64))
        want = token_block(SPACE, keys, 8).reshape(-1)[: row.input_length]
        assert prompt.dtype == np.int32 and np.array_equal(prompt, want)


def test_a_draw_in_several_passes_equals_one_stream_per_row(monkeypatch):
    keys = stream_keys((4, "x"), np.arange(7, dtype=np.uint64))
    monkeypatch.setattr(tokens, "DRAW_TOKENS", 16)  # two rows of 8 tokens a pass
    for dtype in (np.int64, np.int32):
        drawn = token_block(SPACE, keys, 8, dtype)
        assert drawn.dtype == dtype and drawn.shape == (7, 8)
        for row, h in zip(drawn, range(7)):
            assert np.array_equal(row, token_ids(SPACE, (4, "x", h), 8))


def test_replies_are_each_lines_own_stream(tmp_path):
    rows = _trace(tmp_path, [_line(i, 8, [i], out=1 + 5 * i) for i in range(7)])
    for row, reply in zip(rows, _replies(rows, 11, SPACE), strict=True):
        assert reply == tuple(
            token_ids(SPACE, (11, "trace-output", row.line_no), row.output_length).tolist()
        )


def test_token_streams_concatenate_streams_of_any_lengths():
    keys = stream_keys((2, "x"), np.arange(4, dtype=np.uint64))
    lengths = [3, 0, 17, 1]
    want = [token_block(SPACE, keys[i : i + 1], n)[0] for i, n in enumerate(lengths)]
    assert np.array_equal(token_streams(SPACE, keys, lengths), np.concatenate(want))


def test_shared_prefix_lens_follow_the_id_chains(tmp_path):
    lines = [*LINES, _line(6, 20, [5, 9, 7]), _line(7, 23, [5, 9, 7]), _line(8, 22, [5, 9, 8])]
    rows = _trace(tmp_path, lines)
    prompts = [tuple(p.tolist()) for p in prompt_arrays(rows, 0, SPACE, 8)]
    want = [
        max((common_prefix(p, q) for q in prompts[:i]), default=0) for i, p in enumerate(prompts)
    ]
    assert shared_prefix_lens(rows, 8) == want
    assert want[4] == 8 and want[6:] == [20, 20, 16]  # partial last blocks: covered up to 4, then 7


def test_as_tuple_shares_one_int_object_per_id():
    a, b = as_tuple(np.array([7, 300000, 7])), as_tuple(np.array([300000], dtype=np.int32))
    assert a == (7, 300000, 7) and a[1] is b[0] and all(type(x) is int for x in a)
    assert as_tuple(np.array([], dtype=np.int64)) == ()


def test_hashes_at_block_ends_equal_the_full_prefix_sums():
    ids = np.array([4, 2**40, 0, 9, 9, 5, 2**22, 3, 1], dtype=np.int64)  # some beyond the table
    powers = np.cumprod(np.concatenate([[np.uint64(1)], np.full(len(ids), _BASE)]), dtype=np.uint64)
    terms = mix_array(ids.astype(np.uint64) + np.uint64(GAMMA)) * powers[: len(ids)]
    full = np.cumsum(terms, dtype=np.uint64)
    ends = np.array([1, 4, 8, 9])
    hasher = _Hasher()
    assert np.array_equal(hasher.hashes_at(ids, ends), full[ends - 1])
    small = ids[ids < 100]
    want = np.cumsum(
        mix_array(small.astype(np.uint64) + np.uint64(GAMMA)) * powers[: len(small)],
        dtype=np.uint64,
    )
    assert np.array_equal(
        hasher.hashes_at(small.astype(np.int32), np.arange(1, len(small) + 1)), want
    )
