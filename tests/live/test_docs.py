"""A clone stands alone: every document the project links or cites is tracked in it, no text
points outside the repository, and every `docs/<page>.md §N` citation names a section that exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


# `python -m <module>` of one of the project's packages, anywhere in the text (a command in a
# bash block or in prose)
RUN_MODULE = re.compile(r"python3? -m ((?:engines|harness|workloads)(?:\.\w+)*)")


def _runnable(module: str) -> bool:
    """A package with a __main__.py, or a module that runs something as __main__."""
    path = ROOT / module.replace(".", "/")
    if (path / "__main__.py").is_file():
        return True
    source = path.with_suffix(".py")
    main = re.compile(r"^if __name__ == [\"']__main__[\"']:", re.M)
    return source.is_file() and main.search(source.read_text()) is not None


def test_every_python_m_command_of_ours_runs_something():
    """A retired command line (the side CLIs `harness.routers.fleet`, `harness.routers.vllm_fleet`)
    is named nowhere as a command: its module, kept as a library, would import and do nothing."""
    named = {(f, m) for f, text in texts().items() for m in RUN_MODULE.findall(text)}
    stale = sorted(f"{f}: python -m {m}" for f, m in named if not _runnable(m))
    assert len({m for _, m in named}) >= 8  # harness, harness.report, harness.builtin_server...
    assert not stale, stale


# A path under one of the project's own top-level folders, cited in prose (`engines/loop.py`,
# conf/hardware/*.yaml, results/<run>/...). Upstream paths (vllm/v1/..., python/sglang/...) start
# elsewhere; the lookbehind keeps them from matching in their middle.
PROJECT_PATH = re.compile(
    r"(?<![\w/.\-])((?:harness|engines|workloads|conf|scripts|tests|docs|notebooks|results)"
    r"/[\w./*<>{}\-]*)"
)
CITING = [
    "README.md",
    "workloads/README.md",
    *(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")),
]
# Paths that are not files of the clone: an upstream file whose path starts like one of ours
# (vLLM's design doc of APC), and where the wheel installs conf/ (setup.py's package_dir).
UPSTREAM = {"docs/design/prefix_caching.md", "harness/conf"}


def _cited_path_exists(path: str, files: set[str]) -> bool:
    """A file or folder of the clone; a glob that matches one; a placeholder (`<run>`, `{a,b}`)
    whose folder exists; `module.attr` whose module exists."""
    for mark in "<{":
        if mark in path:
            path = path[: path.index(mark)].rsplit("/", 1)[0] + "/"
    path = path.rstrip(".")
    if "*" in path:
        return any(Path(f).match(path) or f.startswith(path.split("*")[0]) for f in files)
    if path in files or any(f.startswith(path.rstrip("/") + "/") for f in files):
        return True
    folder, _, name = path.rpartition("/")
    return "." in name and f"{folder}/{name.split('.')[0]}.py" in files  # tests/util.fn


def _ignored(paths: list[str]) -> set[str]:
    """The cited paths git ignores: output locations a command writes (results/ref/), not files."""
    out = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=ROOT,
        input="\n".join(paths),
        capture_output=True,
        text=True,
    )
    return set(out.stdout.split())


def test_every_cited_project_path_exists():
    files = set(tracked())
    cited = {
        (doc, m.group(1).rstrip(".,:;)"))
        for doc in CITING
        for m in PROJECT_PATH.finditer((ROOT / doc).read_text())
    }
    missing = [(d, p) for d, p in cited if p not in UPSTREAM and not _cited_path_exists(p, files)]
    ignored = _ignored([p for _, p in missing])
    stale = sorted(f"{d}: {p}" for d, p in missing if p not in ignored)
    assert not stale, stale


def test_cited_path_check_tells_stale_from_present():
    files = {"engines/loop.py", "engines/cache/apc/cache.py", "conf/hardware/a100.yaml"}
    assert _cited_path_exists("engines/loop.py", files)
    assert _cited_path_exists("engines/cache/", files)
    assert _cited_path_exists("conf/hardware/*.yaml", files)
    assert _cited_path_exists("engines/<module>.py", files)
    assert not _cited_path_exists("engines/cache/apc/admission.py", files)
    assert not _cited_path_exists("harness/load.py", files)


def test_where_to_change_what_names_files_that_exist():
    """docs/design.md §7 lists the files to touch per extension: each named file or folder is in
    the tree (a `<name>` placeholder is the new one; a `*` any of the existing ones)."""
    text = (ROOT / "docs" / "design.md").read_text()
    table = text[text.index("## 7. Where to change what") :]
    paths = [p for p in re.findall(r"`([\w./*<>-]+/[\w./*<>-]*)`", table) if "<" not in p]
    assert len(paths) >= 10, paths
    missing = [p for p in paths if not any(ROOT.glob(p.rstrip("/")))]
    assert missing == []


# An extension point is a registry filled in one place, marked `# registry:` on the line above it.
REGISTRY_MARK = "# registry:"
REGISTRY_NAME = re.compile(r"(?:for \w+ in .*\n\s*)?([A-Z][A-Z_]+)\s*(?::|=|\.add\(|\.register\()")


def marked_registries() -> dict[str, str]:
    """Each marked registry's name -> the file that fills it, read from the code."""
    found = {}
    for package in ("engines", "harness", "workloads"):
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = path.read_text(encoding="utf-8").splitlines()
            for i, line in enumerate(lines):
                if line.startswith(REGISTRY_MARK):
                    match = REGISTRY_NAME.match(lines[i + 1])
                    assert match, f"{path}:{i + 2}: no registry after its mark"
                    found[match.group(1)] = str(path.relative_to(ROOT))
    return found


def where_to_change_what() -> list[str]:
    text = (ROOT / "docs" / "design.md").read_text()
    table = text[text.index("## 7. Where to change what") : text.index("## 8. ")]
    return [row for row in table.splitlines() if row.startswith("| ")]


def test_where_to_change_what_names_every_registry():
    """docs/design.md §7 has a row naming each extension point's registry and its file."""
    registries = marked_registries()
    assert len(registries) >= 8, registries  # designs, schedulers, targets, ... (the marks went?)
    rows = where_to_change_what()
    missing = [
        f"{name} ({path})"
        for name, path in sorted(registries.items())
        if not any(re.search(rf"\b{name}\b", row) and path in row for row in rows)
    ]
    assert missing == []


def test_the_figure_table_is_the_figure_registry():
    """docs/results.md's figure table lists the registered figures, in drawing order."""
    from harness.report.registry import FIGURES

    text = (ROOT / "docs" / "results.md").read_text()
    table = text[text.index("| figure | file | what |") :].split("\n\n")[0]
    names = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert names == list(FIGURES)
