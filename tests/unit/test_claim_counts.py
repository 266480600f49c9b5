"""Issue 48: the README and the docs count the claims that run, derived from the claims registry
(the README said 16 where 22 ran)."""

from __future__ import annotations

import re
from pathlib import Path

from harness.claims.registry import FINDINGS, PUBLISHED, TIERS, UPSTREAM, census, ordered

ROOT = Path(__file__).resolve().parents[2]


def flat(path: str) -> str:
    return re.sub(r"\s+", " ", (ROOT / path).read_text())


def test_the_readme_says_how_many_claims_run():
    assert census() in flat("README.md")


def test_every_index_of_the_docs_counts_them_alike():
    numbers = [c.number for c in ordered()]
    published = sum(n in PUBLISHED for n in numbers)
    findings = sum(n in FINDINGS for n in numbers)
    upstream = [n for n in numbers if n in UPSTREAM]
    tiers = [n for n in numbers if n in TIERS]
    article = [n for n in numbers if n not in (*PUBLISHED, *FINDINGS, *UPSTREAM, *TIERS)]
    line = f"the {len(numbers)} claims"
    parts = (
        f"{published} published, {findings} finding, {len(article)} from the article, "
        f"{len(upstream)} from an upstream pull request, {len(tiers)} on KV tiers"
    )
    for doc in ("README.md", "docs/README.md"):
        assert f"{line} " in flat(doc) and f"({parts})" in flat(doc), doc
    # docs/claims.md §1 names the article's claims and the upstream ones by their numbers
    assert f"(11-{max(article)})" in flat("docs/claims.md")
    assert all(f"({n})" in flat("docs/claims.md") for n in upstream)
    assert f"({min(tiers)}-{max(tiers)})" in flat("docs/claims.md")


def test_the_numbers_run_one_to_n_without_gaps():
    assert [c.number for c in ordered()] == list(range(1, len(ordered()) + 1))
