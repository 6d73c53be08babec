"""The result cache of ``files_visualize``: one JSON file per (file hash, effective
configuration), in a folder per tenant and project.

Why files and not the store: a cached reading is runtime state, rebuilt at the price of one
extraction (and its vision calls), not data to copy between stores or migrate; a folder beside
the embedded store (or the user's cache) needs no schema step in three engines. Entries hold the
text only — never a key (the configuration's fingerprint leaves it out) — and a folder per
tenant and project (named by a hash of both ids) keeps one tenant's readings from another's.
Writes are atomic (a temp file renamed), a broken entry is a miss, and the oldest entries go
once a project holds more than :data:`MAX_ENTRIES`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from vancetope_rag.secrets import get_logger

log = get_logger(__name__)

#: Entries kept per project; the least recently written go first.
MAX_ENTRIES = 256
_VERSION = 1


def cache_key(*parts: str) -> str:
    """A key of the parts (file hash, extractor, options…), hex."""
    h = hashlib.sha256()
    for part in (str(_VERSION), *parts):
        h.update(part.encode("utf-8", "surrogatepass") + b"\x00")
    return h.hexdigest()


class BridgeCache:
    """Readings by key, under ``root`` (created on first write)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _folder(self, tenant_id: str, project_id: str) -> Path:
        scope = hashlib.sha256(f"{tenant_id}\x00{project_id}".encode()).hexdigest()[:32]
        return self.root / scope

    def get(self, tenant_id: str, project_id: str, key: str) -> dict[str, Any] | None:
        """The entry, or None (missing, unreadable or of another version)."""
        path = self._folder(tenant_id, project_id) / f"{key}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("v") != _VERSION or data.get("key") != key:
            return None
        entry = data.get("entry")
        return entry if isinstance(entry, dict) else None

    def put(self, tenant_id: str, project_id: str, key: str, entry: dict[str, Any]) -> None:
        """Store an entry; a cache that cannot be written only costs the next call a read."""
        folder = self._folder(tenant_id, project_id)
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"v": _VERSION, "key": key, "entry": entry}, out, ensure_ascii=False)
            os.replace(tmp, folder / f"{key}.json")
        except OSError as exc:
            log.warning("files_visualize cache not written in %s: %s", folder, exc)
            return
        self._prune(folder)

    @staticmethod
    def _prune(folder: Path) -> None:
        entries = list(folder.glob("*.json"))
        if len(entries) <= MAX_ENTRIES:
            return
        entries.sort(key=lambda p: p.stat().st_mtime_ns)
        for old in entries[: len(entries) - MAX_ENTRIES]:
            with contextlib.suppress(OSError):
                old.unlink()
