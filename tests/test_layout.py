"""The intended layout: one config tree at the top (conf/), found by a checkout, an editable
install and the wheel alike (tests/test_wheel.py runs the wheel from another folder)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.config.schema import CONF_DIR

ROOT = Path(__file__).resolve().parents[1]


def test_the_checkout_reads_the_top_level_conf():
    assert CONF_DIR == ROOT / "conf"
    assert not (ROOT / "harness" / "conf").exists()  # one source: the wheel maps conf/ in


def test_the_editable_install_reads_it_from_any_folder(tmp_path):
    """scripts/setup.sh installs the checkout in editable mode; from another folder the installed
    harness still finds the checkout's conf/."""
    code = "import harness.config.schema as c; print(c.CONF_DIR)"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == ROOT / "conf"


# The layers of harness/ (docs/design.md §2) and the imports that must never be: a lower layer
# importing a higher one, or two siblings that are easily confused importing each other. Each entry
# is (package, forbidden prefixes, allowed exceptions); imports inside functions count too.
HIGHER = ("harness.run", "harness.claims", "harness.report")
SERVERS = ("harness.builtin_server", "harness.live_server")
FORBIDDEN: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("engines", ("harness", "workloads"), ()),
    ("workloads", ("harness",), ()),
    # The schema assembles each group's record from its owner, as it does engines.config's.
    ("harness.config", (*HIGHER, *SERVERS), ("harness.live_server.config",)),
    ("harness.results", (*HIGHER, *SERVERS, "harness.client"), ()),
    ("harness.metrics", (*HIGHER, *SERVERS, "harness.client"), ()),
    ("harness.client", (*HIGHER, *SERVERS), ()),
    # The fleet twin reads workers' KV events with the live twin's subscriber (one wire reader).
    ("harness.fleet", (*HIGHER, *SERVERS, "harness.client"), ("harness.live_server.kv_events",)),
    ("harness.report", ("harness.run", "harness.claims", "harness.client", *SERVERS), ()),
    ("harness.export", (*HIGHER, *SERVERS, "harness.client"), ()),
    ("harness.builtin_server", (*HIGHER, "harness.live_server"), ()),
    ("harness.live_server", ("harness.claims", "harness.report", "harness.builtin_server"), ()),
    ("harness.run", ("harness.claims", "harness.report.build", "harness.builtin_server"), ()),
)
MAX_TOP_MODULES = 6  # harness/'s top holds the CLI entry; everything else lives in a layer


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # `from harness.run import pipeline` imports harness.run.pipeline
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_no_layer_imports_what_it_must_not():
    offenders = []
    for package, forbidden, allowed in FORBIDDEN:
        folder = ROOT.joinpath(*package.split("."))
        assert folder.is_dir(), package
        for path in sorted(folder.rglob("*.py")):
            for name in sorted(_imports(path)):
                bad = any(_under(name, f) for f in forbidden)
                if bad and not any(_under(name, a) for a in allowed):
                    offenders.append(f"{_module_name(path)} imports {name}")
    assert offenders == []


def test_harness_top_holds_only_the_entry_points():
    top = sorted(p.name for p in (ROOT / "harness").glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top
    layers = {p.name for p in (ROOT / "harness").iterdir() if (p / "__init__.py").is_file()}
    assert layers == {
        "config",
        "run",
        "results",
        "metrics",
        "client",
        "fleet",
        "report",
        "export",
        "claims",
        "builtin_server",
        "live_server",
    }
