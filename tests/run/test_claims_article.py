"""The article's claims tested as the article states them (issue 47, item 3), in quick mode, read
from the session's one measurement of the claims (tests/quick_claims.py): 17 on the SGLang-vs-vLLM
gap, 19 on LoRA only with multimodal as its own row (23), 20 on "eliminated when the request is
freed", 22 with generated text reused at a later level."""

from __future__ import annotations

import pytest

from harness.claims.prefix_weight import _verdict as gap_verdict
from harness.claims.record import FAILS, HOLDS
from harness.config.schema import register_configs

register_configs()

pytestmark = pytest.mark.slow  # the session's quick claims (tests/quick_claims.py): minutes of CPU


@pytest.fixture(scope="module")
def rows(quick_claims):
    only = ["prefix_weight", "adapters", "duplicates", "tree_sampling", "multimodal"]
    return {r.number: r for r in (quick_claims.row(key) for key in only)}


def test_claim_20_is_the_articles_sentence_and_apc_keeps_duplicates(rows):
    row = rows[20]
    assert "eliminated when the request is freed" in row.claim
    assert row.verdict == FAILS
    assert "duplicate tokens not eliminated" in row.result
    assert "radix beside" in row.result and "(0 duplicate" in row.result


def test_claim_17_decides_on_the_radix_apc_gap(rows):
    row = rows[17]
    assert "between SGLang" in row.claim and "radix/apc gap" in row.result
    assert "caching on/off beside" in row.result
    # in these runs the gap is flat (1.00x), so the article's sentence does not hold here
    assert row.verdict == FAILS


def test_claim_17_rule_on_steps():
    assert gap_verdict([True, True]) == HOLDS
    assert gap_verdict([False, False]) == FAILS
    assert gap_verdict([True, False]).startswith("depends on the prefix length")


def test_claim_19_covers_lora_only_and_23_is_multimodal(rows):
    assert "multimodal" not in rows[19].claim.lower() and rows[19].verdict == HOLDS
    assert "image" in rows[23].claim and rows[23].verdict.startswith("not measurable here")
    assert rows[23].evidence == "no harness runs"


def test_claim_22_reuses_generated_text_at_a_later_level(rows):
    row = rows[22]
    assert "generated chain" in row.result and "prompt tree" in row.result
    assert row.result.count("generated tokens reused at a later level") == 2
    assert " 0 generated tokens" not in row.result
    assert row.verdict == HOLDS
