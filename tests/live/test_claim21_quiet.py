"""Issue 48: claim 21 (hash algorithms) runs every digest with a fixed none_hash_seed, so it prints
no "NONE_HASH is random per process" warning (it printed three, unexplained) and its runs are
reproducible."""

from __future__ import annotations

import logging

from harness.claims.__main__ import main


def test_claim_21_runs_without_the_random_none_hash_warning(tmp_path, capfd, caplog):
    caplog.set_level(logging.WARNING)
    assert main(["--quick", "--only", "hash_algos", "--out", str(tmp_path / "claims")]) == 0
    out, err = capfd.readouterr()
    said = out + err + caplog.text
    assert "claim 21" in said
    assert "NONE_HASH" not in said, said
    assert (tmp_path / "claims" / "claims.csv").is_file()
