"""Pickle-based block hashes for whole runs of blocks (§1.1): the same bytes, fewer pickle calls.

vLLM hashes pickle.dumps((parent, tokens, extra_keys)) per block. Here one pickle.dumps of a run's
token tuples yields every block's token opcodes (cut at the TUPLE MEMOIZE MARK seam between blocks),
and each block's input is assembled around its parent from pieces that are constant per run: the
frame header (by length), the parent's SHORT_BINBYTES opcode and the tail after the tokens (extra
keys, TUPLE3, STOP), read off one probe pickle with the run's own extra-keys object. Runs the layout
does not fit (blocks under 4 tokens, several frames, a token whose bytes contain the seam) take the
per-block loop. tests/test_apc_hash_bytes.py checks the bytes against pickle.dumps.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any

PROTOCOL = pickle.HIGHEST_PROTOCOL  # what the digests pickle with; the layout is protocol 5's
_HEAD = b"\x80\x05\x95"  # PROTO 5, FRAME (8-byte little-endian length of the rest)
_HEAD_LEN = len(_HEAD) + 8
_SEAM = b"t\x94("  # TUPLE + MEMOIZE ending one block tuple, MARK opening the next
_OPEN = b"\x94("  # MEMOIZE (the parent bytes), MARK (the token tuple)
MIN_BLOCKS = 4  # the run's outer tuple needs 4+ items for the MARK ... TUPLE form
RUN_TOKENS = 8192  # tokens pickled at once: at most 5 bytes each, well inside one 64 KiB frame


def _tail(parent_len: int, block_size: int, extra: tuple | None) -> bytes | None:
    """The bytes after a block's token opcodes (TUPLE, MEMOIZE, extra keys, TUPLE3, MEMOIZE,
    STOP) from a probe pickle; None where a block would not pickle in this layout."""
    if block_size < 4 or parent_len > 255:  # TUPLE1-3 blocks, BINBYTES parents: other layouts
        return None
    parent = bytes(parent_len)
    probe = pickle.dumps((parent, (0,) * block_size, extra), PROTOCOL)
    body = b"C" + bytes([parent_len]) + parent + _OPEN + b"K\x00" * block_size
    head = _HEAD + (len(probe) - _HEAD_LEN).to_bytes(8, "little")
    if not probe.startswith(head + body):
        return None
    return probe[len(head) + len(body) :]


def _token_opcodes(blocks: tuple[tuple, ...]) -> list[bytes] | None:
    """Each block's token opcodes, from one pickle of the blocks (None: the cut is ambiguous)."""
    data = pickle.dumps(blocks, PROTOCOL)
    if data[:3] != _HEAD or int.from_bytes(data[3:_HEAD_LEN], "little") != len(data) - _HEAD_LEN:
        return None  # not one frame
    # PROTO FRAME MARK MARK | ops t\x94( ops ... t\x94( ops | TUPLE MEMOIZE TUPLE MEMOIZE STOP
    pieces = data[_HEAD_LEN + 2 : -5].split(_SEAM)
    return pieces if len(pieces) == len(blocks) else None


def hash_blocks(
    new: Callable[[bytes], Any],
    parent: bytes,
    token_ids: Sequence[int],
    bounds: tuple[int, int, int],
    extra: tuple | None,
    append: Callable[[bytes], None],
    suffix: bytes,
) -> bytes:
    """Chain new(pickle.dumps((parent, block, extra))).digest() over the blocks of
    token_ids[start:stop] (bounds = start, stop, block size), appending each hash + suffix;
    returns the last hash."""
    start, stop, block_size = bounds
    whole = start == 0 and stop == len(token_ids)
    blocks = zip(*[iter(token_ids if whole else token_ids[start:stop])] * block_size)
    tail = _tail(len(parent), block_size, extra) if len(parent) == new().digest_size else None
    if tail is None or (stop - start) // block_size < MIN_BLOCKS:
        return _per_block(new, parent, blocks, extra, append, suffix)
    fixed = 2 + len(parent) + len(_OPEN) + len(tail)  # frame bytes besides the token opcodes
    parent_op = b"C" + bytes([len(parent)])
    heads: dict[int, bytes] = {}
    run_blocks = max(RUN_TOKENS // block_size, MIN_BLOCKS)
    while True:
        run = tuple(islice(blocks, run_blocks))
        if not run:
            return parent
        pieces = _token_opcodes(run) if len(run) >= MIN_BLOCKS else None
        if pieces is None:
            parent = _per_block(new, parent, run, extra, append, suffix)
            continue
        for ops in pieces:
            head = heads.get(len(ops))
            if head is None:  # the frame length counts this block's opcodes
                head = _HEAD + (fixed + len(ops)).to_bytes(8, "little") + parent_op
                heads[len(ops)] = head
            parent = new(head + parent + _OPEN + ops + tail).digest()
            append(parent + suffix)


def _per_block(new, parent: bytes, blocks, extra, append, suffix: bytes) -> bytes:
    dumps = pickle.dumps
    for block in blocks:
        parent = new(dumps((parent, block, extra), PROTOCOL)).digest()
        append(parent + suffix)
    return parent
