"""The addressing side's change log: which block tables changed since the executor last looked.

A cache records, where it allocates, rewrites or frees a sequence's blocks, the first block index
it touched (`write`) or that the whole table went away (`release`). The real executor drains the
log once per step and copies only those entries into its device-resident table, so its per-step
work follows the blocks that changed, not the length of every context. Nothing is recorded until
an executor asks for it (`enable`): the simulated executor never reads tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# One block per sequence appended in one piece: (seq ids, block index of each, block id of each).
Appended = tuple[list[str], np.ndarray, np.ndarray]


@dataclass
class TableJournal:
    """Per sequence id the lowest block index written since the last `drain`, and the ids whose
    tables were released (a release then a write is a fresh table, written from block 0)."""

    enabled: bool = False
    changed: dict[str, int] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)
    appended: list[Appended] = field(default_factory=list)
    # `append_one` calls since the last drain, kept as plain lists until then
    _one_ids: list[str] = field(default_factory=list)
    _one_index: list[int] = field(default_factory=list)
    _one_blocks: list[int] = field(default_factory=list)

    def enable(self) -> None:
        """Start recording (an executor that mirrors the tables calls this before any step)."""
        self.enabled = True

    def write(self, seq_id: str, first_block: int) -> None:
        """Entries from `first_block` on of `seq_id`'s table were appended or rewritten."""
        if self.enabled:
            known = self.changed.get(seq_id)
            if known is None or first_block < known:
                self.changed[seq_id] = first_block

    def append(self, seq_ids: list[str], block_index: np.ndarray, block_ids: np.ndarray) -> None:
        """Sequence `seq_ids[i]` gained block `block_ids[i]` at `block_index[i]` (a decode step
        at page 1: one block each), recorded with its values so nothing is read back."""
        if self.enabled:
            self.appended.append((seq_ids, block_index, block_ids))

    def append_one(self, seq_id: str, block_index: int, block_id: int) -> None:
        """`append` of one sequence's one block (a cache that allocates request by request)."""
        if self.enabled:
            self._one_ids.append(seq_id)
            self._one_index.append(block_index)
            self._one_blocks.append(block_id)

    def release(self, seq_id: str) -> None:
        """`seq_id` holds no table any more (finish, preemption, retraction, abort)."""
        if self.enabled:
            self.changed.pop(seq_id, None)
            self.released.add(seq_id)

    def drain(self) -> tuple[set[str], dict[str, int], list[Appended]]:
        """(released ids, id -> first changed block, appended pieces) since the last drain; all
        start empty again. Apply the releases first: an id in both was released and admitted
        again. An appended entry of an id that is also released or changed is superseded: read
        that table back from min(its first changed block, the appended index) instead."""
        if self._one_ids:
            index = np.asarray(self._one_index, dtype=np.int64)
            blocks = np.asarray(self._one_blocks, dtype=np.int64)
            self.appended.append((self._one_ids, index, blocks))
            self._one_ids, self._one_index, self._one_blocks = [], [], []
        released, changed, appended = self.released, self.changed, self.appended
        self.released, self.changed, self.appended = set(), {}, []
        return released, changed, appended
