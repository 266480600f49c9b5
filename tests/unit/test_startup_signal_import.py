"""A start-up signal that lands inside an import is held until the import is done.

CI once saw `python -m harness` end with SIGABRT (exit -6) instead of 130 when SIGTERM arrived
while torch was importing: the handler's exception surfaced inside torch's C++ initialisation,
which aborts rather than unwinds. The handler now tells an import frame from others.
"""

from __future__ import annotations

import importlib
import sys

from harness.__main__ import _importing


def test_a_frame_inside_an_import_is_told_apart(tmp_path, monkeypatch):
    (tmp_path / "frame_probe_mod.py").write_text("import sys\nFRAME = sys._getframe()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("frame_probe_mod")
    assert _importing(module.FRAME)  # its caller chain holds importlib's frozen bootstrap
    assert not _importing(sys._getframe())
    sys.modules.pop("frame_probe_mod", None)
