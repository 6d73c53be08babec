"""The proxy's API-key table: who a key is, hashed at rest.

A key file (YAML, or JSON, which YAML reads too) lists the keys an operator handed out::

    keys:
      - name: open-webui                  # shown in logs and rate-limit buckets, never secret
        hash: sha256:5f2b…                # `vancetope-rag proxy-key` prints key and hash
        tenant: acme
        projects: [handbook, wiki]        # or "*": every project of the tenant
        recipe: docs-assistant            # optional; a bundled name or a path relative to this file
        requestsPerMinute: 60             # optional; else VANCETOPE_RAG_PROXY_REQUESTS_PER_MINUTE

Only the SHA-256 of a key is stored. Keys are 256 random bits (:func:`new_key`), so a fast
hash is enough: there is no dictionary to try, and a stretched hash would cost every request.
A key is found by its hash, so neither the lookup nor its timing depend on how much of a
guess matches a real key.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from vancetope_rag.domain.texts import check_id
from vancetope_rag.errors import ApiConfigError, RagError
from vancetope_rag.recipes import RagParams, is_recipe_path, load_recipe, read_yaml
from vancetope_rag.secrets import get_logger

log = get_logger(__name__)

#: Every key :func:`new_key` makes starts with it: a scanner (and a reader) can tell what it is.
KEY_PREFIX = "vrk_"
HASH_PREFIX = "sha256:"
ALL_PROJECTS = "*"
_FIELDS = frozenset({"name", "hash", "tenant", "projects", "recipe", "requestsPerMinute"})


def new_key() -> str:
    """A fresh random key (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """What the key file stores for ``key``."""
    return HASH_PREFIX + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class ApiKey:
    """One entry of the key table: the caller a key stands for."""

    name: str
    tenant: str
    projects: tuple[str, ...] | None  # None: every project of the tenant
    recipe: RagParams | None = None
    requests_per_minute: int | None = None

    def allows(self, project: str) -> bool:
        return self.projects is None or project in self.projects


def _entry(raw: object, at: str, base_dir: Path) -> tuple[str, ApiKey]:
    if not isinstance(raw, Mapping):
        raise ApiConfigError(f"{at}: each key is a mapping with name, hash, tenant, projects")
    unknown = sorted(set(map(str, raw)) - _FIELDS)
    if unknown:
        raise ApiConfigError(
            f"{at}: unknown field(s) {', '.join(unknown)}; a key has {', '.join(sorted(_FIELDS))}"
        )
    name, digest, tenant = raw.get("name"), raw.get("hash"), raw.get("tenant")
    if not isinstance(name, str) or not name.strip():
        raise ApiConfigError(f"{at}: 'name' must be a non-empty text")
    at = f"{at} ({name})"
    if (
        not isinstance(digest, str)
        or not digest.startswith(HASH_PREFIX)
        or len(digest) != len(HASH_PREFIX) + 64
        or any(c not in "0123456789abcdef" for c in digest[len(HASH_PREFIX) :])
    ):
        raise ApiConfigError(
            f"{at}: 'hash' must be 'sha256:' and 64 lowercase hex digits, as "
            "`vancetope-rag proxy-key` prints it (the key itself is never stored)"
        )
    try:
        check_id(tenant, "tenant")
        projects_raw = raw.get("projects")
        projects: tuple[str, ...] | None
        if projects_raw == ALL_PROJECTS:
            projects = None
        elif isinstance(projects_raw, list) and projects_raw:
            projects = tuple(check_id(p, "project") for p in projects_raw)
        else:
            raise ApiConfigError("'projects' must be a non-empty list of project ids or '*'")
    except RagError as exc:
        raise ApiConfigError(f"{at}: {exc.message}") from None
    rate = raw.get("requestsPerMinute")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int) or rate < 0):
        raise ApiConfigError(f"{at}: 'requestsPerMinute' must be a whole number >= 0")
    recipe: RagParams | None = None
    recipe_path = raw.get("recipe")
    if recipe_path is not None:
        if not isinstance(recipe_path, str) or not recipe_path.strip():
            raise ApiConfigError(f"{at}: 'recipe' must be the path of a recipe file")
        try:
            where = base_dir / recipe_path if is_recipe_path(recipe_path) else recipe_path
            recipe = load_recipe(where).rag
        except RagError as exc:
            raise ApiConfigError(f"{at}: {exc.message}") from None
    assert isinstance(tenant, str)
    return digest, ApiKey(name.strip(), tenant, projects, recipe, rate)


def parse_key_table(data: object, *, source: str, base_dir: Path) -> dict[str, ApiKey]:
    """The keys of a parsed key file, by hash.

    Raises:
        ApiConfigError: The file's shape or an entry is invalid; the message names the entry.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("keys"), list):
        raise ApiConfigError(f"{source}: a key file is a mapping with a 'keys' list")
    table: dict[str, ApiKey] = {}
    names: set[str] = set()
    for i, raw in enumerate(data["keys"]):
        digest, key = _entry(raw, f"{source}: keys[{i}]", base_dir)
        if digest in table:
            raise ApiConfigError(f"{source}: keys[{i}] ({key.name}): the same hash is listed twice")
        if key.name in names:
            raise ApiConfigError(f"{source}: keys[{i}]: the name {key.name!r} is taken")
        table[digest] = key
        names.add(key.name)
    return table


def load_key_table(path: str | os.PathLike[str]) -> dict[str, ApiKey]:
    """Read a key file (see the module docstring).

    Raises:
        ApiConfigError: The file is missing, unreadable, not YAML/JSON, or invalid.
    """
    source = os.fspath(path)
    data = read_yaml(source, "proxy key file", ApiConfigError)
    return parse_key_table(data, source=source, base_dir=Path(source).parent)


class KeyFile:
    """A key file, re-read when it changes (another inode, modification time or size): an
    operator adds or revokes a key without restarting the proxy.

    It fails closed: a file that cannot be read, is empty, or does not parse after a change
    admits no key at all until a valid file is back (:attr:`failure` says why), and the log
    says so once. Replace the file atomically (write a new file, then rename it over the old
    one), so a reload never reads half a file. ``keys: []`` is the way to say "no keys".

    Args:
        path: The key file.
        on_reload: Called after each reload with whether it loaded (the metrics).
    """

    def __init__(
        self, path: str | os.PathLike[str], on_reload: Callable[[bool], None] | None = None
    ) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._on_reload = on_reload
        self._stamp = self._stat()
        self._table = load_key_table(self.path)  # a bad file at start is an error
        #: Why the last reload failed (no key is admitted), or None.
        self.failure: str | None = None

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def refresh(self) -> None:
        """Reload the file if it changed since it was read last."""
        stamp = self._stat()
        if stamp == self._stamp:
            return
        with self._lock:
            if stamp == self._stamp:
                return
            try:
                table = load_key_table(self.path)
            except ApiConfigError as exc:
                self._table = {}
                if self.failure is None:
                    log.error(
                        "proxy key file failed to load; no proxy key is accepted until it "
                        "loads again: %s",
                        exc.message,
                    )
                self.failure = exc.message
            else:
                self._table = table
                if self.failure is not None:
                    log.warning("proxy key file loaded again: %d key(s)", len(table))
                self.failure = None
            self._stamp = stamp
        if self._on_reload is not None:
            self._on_reload(self.failure is None)

    def find(self, presented: str) -> ApiKey | None:
        """The entry of a presented key, or None (always None while :attr:`failure`)."""
        self.refresh()
        return self._table.get(hash_key(presented))
