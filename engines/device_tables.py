"""Block tables that live on the executor's device and grow in place (SGLang's req_to_token).

One preallocated int32 table `[rows, width]`, a row per sequence holding KV; row 0 is padding
(all block 0, the reserved block) for the rows a CUDA graph pads a batch with. Each step
`collect` drains the cache's journal (engines/cache/addressing.py): released rows are cleared
and freed, and the changed tail of every other table becomes (flat index, block id) pairs that
travel in the step's one packed copy and land with one scatter (`apply`). Per-step work follows
the entries that changed, never the length of a context or the page size.
"""

from __future__ import annotations

import numpy as np
import torch

from engines.cache.addressing import Appended
from engines.cache.protocol import BlockTables

EMPTY = np.empty(0, dtype=np.int64)


class DeviceBlockTable:
    """The executor's copy of every running sequence's block table, on `device`."""

    def __init__(self, num_rows: int, width: int, device: torch.device) -> None:
        self.width = width
        self.device = device
        self.table = torch.zeros((num_rows + 1, width), dtype=torch.int32, device=device)
        self.rows: dict[str, int] = {}  # seq_id -> row
        self.used = np.zeros(num_rows + 1, dtype=np.int64)  # entries written per row
        self.free_rows = list(range(num_rows, 0, -1))  # row 1 is taken first
        # Bumped when `table` is reallocated: CUDA graphs captured over the old one are stale.
        self.generation = 0

    @property
    def num_rows(self) -> int:
        return self.table.shape[0] - 1

    def collect(self, source: BlockTables) -> tuple[np.ndarray, np.ndarray]:
        """Drain `source`'s journal: clear and free released rows now, and return the changed
        entries as (flat indices into `table`, block ids), int64, for `apply`."""
        released, changed, appended = source.table_journal.drain()
        for seq_id in released:
            self._free(seq_id)
        pieces = [self._appended(piece, released, changed) for piece in appended]
        if changed:
            pieces.append(self._changed(source, changed))
        if not pieces:
            return EMPTY, EMPTY
        if len(pieces) == 1:
            return pieces[0]
        return np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])

    def _appended(
        self, piece: Appended, released: set[str], changed: dict[str, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """A piece of one-block appends, vectorised. An id released or changed in the same
        interval, or without a row, is read back instead (folded into `changed`)."""
        seq_ids, index, block_ids = piece
        get = self.rows.get
        rows = np.fromiter((get(sid, 0) for sid in seq_ids), np.int64, len(seq_ids))
        if released or changed or not rows.all():
            keep = np.fromiter(
                (
                    r != 0 and sid not in changed and sid not in released
                    for sid, r in zip(seq_ids, rows)
                ),
                bool,
                len(seq_ids),
            )
            for i in np.flatnonzero(~keep).tolist():
                sid = seq_ids[i]
                if sid in changed or (rows[i] == 0 and sid not in released):
                    changed[sid] = min(changed.get(sid, int(index[i])), int(index[i]))
            rows, index, block_ids = rows[keep], index[keep], block_ids[keep]
        if len(index) and int(index.max()) >= self.width:
            raise ValueError(
                f"a sequence needs more blocks than the device table's {self.width} "
                "(max_model_len / block_size)"
            )
        np.maximum.at(self.used, rows, index + 1)
        return rows * self.width + index, block_ids.astype(np.int64, copy=False)

    def _changed(
        self, source: BlockTables, changed: dict[str, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Read back each changed table from its first changed block."""
        bases, lengths, values = [], [], []
        width = self.width
        for seq_id, first in changed.items():
            ids = source.block_ids_from(seq_id, first)
            row = self.rows.get(seq_id)
            if row is None:
                row = self._take(seq_id)
            end = first + len(ids)
            if end > width:
                raise ValueError(
                    f"sequence {seq_id} needs {end} blocks, more than the device table's {width} "
                    "(max_model_len / block_size)"
                )
            self.used[row] = max(self.used[row], end)
            bases.append(row * width + first)
            lengths.append(len(ids))
            values.append(ids)
        counts = np.asarray(lengths, dtype=np.int64)
        starts = np.cumsum(counts) - counts
        flat = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(
            np.asarray(bases, dtype=np.int64) - starts, counts
        )
        return flat, np.concatenate(values).astype(np.int64, copy=False)

    def apply(self, flat: torch.Tensor, block_ids: torch.Tensor) -> None:
        """Scatter `collect`'s entries, already on the device, into the table."""
        if flat.numel():
            self.table.view(-1).index_copy_(0, flat, block_ids.to(torch.int32))

    def _take(self, seq_id: str) -> int:
        if not self.free_rows:
            self._grow()
        row = self.free_rows.pop()
        self.rows[seq_id] = row
        return row

    def _free(self, seq_id: str) -> None:
        row = self.rows.pop(seq_id, None)
        if row is None:  # released before any step saw it
            return
        n = int(self.used[row])
        if n:
            self.table[row, :n].zero_()  # a freed row reads as padding again
        self.used[row] = 0
        self.free_rows.append(row)

    def _grow(self) -> None:
        """Double the rows (more sequences hold KV than max_num_seqs): rare, so a copy is fine."""
        old = self.table
        num_rows = old.shape[0] - 1
        self.table = torch.zeros(
            (2 * num_rows + 1, self.width), dtype=torch.int32, device=self.device
        )
        self.table[: num_rows + 1] = old
        self.used = np.concatenate([self.used, np.zeros(num_rows, dtype=np.int64)])
        self.free_rows = list(range(2 * num_rows, num_rows, -1)) + self.free_rows
        self.generation += 1

    def host_rows(self) -> dict[str, list[int]]:
        """Every row's written entries, read back (tests compare them with the cache's tables)."""
        table = self.table.cpu()
        return {sid: table[row, : self.used[row]].tolist() for sid, row in self.rows.items()}
