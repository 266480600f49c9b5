"""The editable install finds the top-level conf/ from any folder (a child Python started
elsewhere); tests/live/test_wheel.py does the same for the wheel.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
    ("harness.builtin_server", (*HIGHER, "harness.live_server"), ()),
    ("harness.live_server", ("harness.claims", "harness.report", "harness.builtin_server"), ()),
    ("harness.run", ("harness.claims", "harness.report.build", "harness.builtin_server"), ()),
)
