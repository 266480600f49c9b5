"""Issue 48: a KV-event message that lies about its blocks (a sequence frame of the wrong size, a
block size of 0 or below, token ids that do not fill the blocks, a hash that is a float, a bool or
null, a payload that is no msgpack) is refused by the decoder with ValueError, which the
subscriber counts in `errors` instead of recording made-up blocks; well-formed ones still decode."""

from __future__ import annotations

import msgpack  # type: ignore[import-untyped]
import pytest

from harness.live_server.kv_events import decode

SEQ = (7).to_bytes(8, "big", signed=True)


def message(*events: dict, seq: bytes = SEQ) -> list[bytes]:
    return [b"", seq, msgpack.packb([1.5, list(events)])]


def stored(hashes: list, size: object, ids: object) -> dict:
    return {"type": "BlockStored", "block_hashes": hashes, "block_size": size, "token_ids": ids}


@pytest.mark.parametrize(
    ("parts", "needle"),
    [
        (message(seq=b"\x01"), "sequence number is 8 bytes"),
        (message(seq=b"\x00" * 9), "sequence number is 8 bytes"),
        (message(stored([1], 0, [])), "block_size >= 1"),
        (message(stored([1, 2], -4, [1, 2, 3])), "block_size >= 1"),
        (message(stored([1], True, [1])), "block_size >= 1"),
        (message(stored([1], 4, 5)), "block_size >= 1"),
        (message(stored([1, 2], 4, [1, 2, 3, 4])), "2 blocks of 4 has 4 tokens"),
        (message({"type": "BlockRemoved", "block_hashes": [1.5]}), "integer or bytes"),
        (message({"type": "BlockRemoved", "block_hashes": [True]}), "integer or bytes"),
        (message({"type": "BlockRemoved", "block_hashes": 5}), "must be a list"),
        ([b"", SEQ, b"\xc1"], None),  # msgpack's own errors are ValueErrors
        ([b"", SEQ, msgpack.packb([1.0, []]) + b"\x01"], None),
        ([b"", SEQ], "3 parts"),
    ],
)
def test_a_lying_message_is_refused(parts, needle):
    with pytest.raises(ValueError, match=needle):
        decode(parts)


def test_honest_messages_still_decode():
    batch = decode(
        message(
            stored([11, b"\x00" * 24 + (12).to_bytes(8, "big")], 2, [1, 2, 3, 4]),
            {"type": "BlockRemoved", "block_hashes": [9]},
        )
    )
    assert batch.seq == 7 and batch.stored == (11, 12) and batch.removed == (9,)
    assert batch.stored_tokens == ((1, 2), (3, 4))
    cleared = decode(message(stored([1], 1, [5]), {"type": "AllBlocksCleared"}))
    assert cleared.cleared and cleared.stored == ()
