"""The addressing side's change log: which block tables changed since the executor last looked.

A cache records, where it allocates, rewrites or frees a sequence's blocks, the first block index
it touched (`write`) or that the whole table went away (`release`). The real executor drains the
log once per step and copies only those entries into its device-resident table, so its per-step
work follows the blocks that changed, not the length of every context. Nothing is recorded until
an executor asks for it (`enable`): the simulated executor never reads tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TableJournal:
    """Per sequence id the lowest block index written since the last `drain`, and the ids whose
    tables were released (a release then a write is a fresh table, written from block 0)."""

    enabled: bool = False
    changed: dict[str, int] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)

    def enable(self) -> None:
        """Start recording (an executor that mirrors the tables calls this before any step)."""
        self.enabled = True

    def write(self, seq_id: str, first_block: int) -> None:
        """Entries from `first_block` on of `seq_id`'s table were appended or rewritten."""
        if self.enabled:
            known = self.changed.get(seq_id)
            if known is None or first_block < known:
                self.changed[seq_id] = first_block

    def release(self, seq_id: str) -> None:
        """`seq_id` holds no table any more (finish, preemption, retraction, abort)."""
        if self.enabled:
            self.changed.pop(seq_id, None)
            self.released.add(seq_id)

    def drain(self) -> tuple[set[str], dict[str, int]]:
        """(released ids, id -> first changed block) since the last drain; both start empty.
        Apply the releases first: an id in both was released and admitted again."""
        released, changed = self.released, self.changed
        self.released, self.changed = set(), {}
        return released, changed
