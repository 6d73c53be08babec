"""The pure rules of extraction (what an import records of a file, the extraction settings) do
no I/O and import nothing that does: an import and a worker process can load them for free."""

from __future__ import annotations

import json
import subprocess
import sys

PURE = ("vancetope_rag.extraction.records", "vancetope_rag.domain.settings.extraction")
#: The package modules the pure rules may pull in: package markers and the pure domain.
ALLOWED = {
    "vancetope_rag",
    "vancetope_rag.domain",
    "vancetope_rag.domain.limits",
    "vancetope_rag.domain.settings",
    "vancetope_rag.domain.settings.kinds",
    "vancetope_rag.extraction",
    *PURE,
}
#: Standard-library modules that reach files, processes or the network.
IO_MODULES = {"io", "os", "socket", "sqlite3", "subprocess", "http.client", "urllib.request"}


def _loaded_by(modules: tuple[str, ...]) -> set[str]:
    code = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        + "".join(f"import {name}\n" for name in modules)
        + "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    return set(json.loads(out))


def test_the_pure_extraction_rules_import_nothing_that_does_io() -> None:
    loaded = _loaded_by(PURE)
    ours = {name for name in loaded if name.split(".")[0] == "vancetope_rag"}
    assert ours <= ALLOWED, sorted(ours - ALLOWED)
    # ``io`` and ``os`` are loaded at interpreter start: only new ones count.
    assert not (loaded & IO_MODULES), sorted(loaded & IO_MODULES)
