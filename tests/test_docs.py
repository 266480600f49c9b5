"""A clone stands alone: every document the project links or cites is tracked in it, no text
points outside the repository, and every `docs/<page>.md §N` citation names a section that exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT = (".py", ".md", ".yaml", ".ipynb", ".sh", ".toml")
OUTSIDE = re.compile(r"\.\./shared|(?<![\w/])specs/\w+\.md|DESIGN\.md")
CITATION = re.compile(r"docs/(\w+)\.md`?\s*§\s*(\d+(?:\.\d+)?)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def tracked() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return out.stdout.split()


def texts() -> dict[str, str]:
    return {f: (ROOT / f).read_text(errors="ignore") for f in tracked() if f.endswith(TEXT)}


def sections(page: str) -> set[str]:
    heads = re.findall(r"^#+ (\d+(?:\.\d+)?)\.? ", (ROOT / "docs" / f"{page}.md").read_text(), re.M)
    return set(heads)


def test_nothing_points_outside_the_repository():
    offenders = [
        f"{f}:{t.count(chr(10), 0, m.start()) + 1}: {m.group()}"
        for f, t in texts().items()
        for m in OUTSIDE.finditer(t)
    ]
    assert not offenders, offenders


def test_every_cited_docs_page_and_section_exists():
    files = set(tracked())
    missing = []
    for f, text in texts().items():
        for page in set(re.findall(r"(?<![\w/])docs/(\w+)\.md", text)):
            if f"docs/{page}.md" not in files:
                missing.append(f"{f}: docs/{page}.md")
        for page, number in CITATION.findall(text):
            if f"docs/{page}.md" in files and number not in sections(page):
                missing.append(f"{f}: docs/{page}.md §{number}")
    assert not missing, missing


def test_markdown_links_resolve_inside_the_clone():
    files = set(tracked())
    broken = []
    for f, text in texts().items():
        if not f.endswith(".md"):
            continue
        for target in LINK.findall(text):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (ROOT / f).parent / target
            rel = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else None
            if rel is None or not (
                str(rel) in files or any(x.startswith(f"{rel}/") for x in files)
            ):
                broken.append(f"{f}: {target}")
    assert not broken, broken
