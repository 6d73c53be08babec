"""Which documents the project RAG indexes (spec §4.1), and MIME types for paths.

Pure functions, no I/O. The filter is ``ragEnabled`` override first, otherwise the
``documents/`` path prefix, then :func:`is_textual`.
"""

from __future__ import annotations

import functools
import mimetypes
import posixpath

#: Prefix a document path needs to be indexed automatically (spec §4.1, condition 1).
DOCUMENTS_PREFIX = "documents/"

#: Returned by :func:`guess_mime_type` when nothing better is known.
OCTET_STREAM = "application/octet-stream"

#: Non-``text/*`` MIME types whose content is text a person or model can read: data formats
#: (JSON, YAML, XML, TOML), source code registered under ``application/``, notebooks, LaTeX,
#: SVG and subtitles. ``text/*`` and every ``+json`` / ``+xml`` structured-syntax suffix
#: (RFC 6839) are textual anyway, so they are not listed here. Binary office formats and PDF
#: are deliberately absent: they need an extractor, not a decoder.
CODE_MIME_WHITELIST: frozenset[str] = frozenset(
    {
        # data and configuration
        "application/json",
        "application/x-ndjson",
        "application/jsonl",
        "application/ld+json",
        "application/yaml",
        "application/x-yaml",
        "application/xml",
        "application/toml",
        "application/x-toml",
        "application/graphql",
        "application/sql",
        "application/x-sql",
        # source code
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "application/typescript",
        "application/x-typescript",
        "application/x-python",
        "application/x-python-code",
        "application/x-sh",
        "application/x-shellscript",
        "application/x-csh",
        "application/x-httpd-php",
        "application/x-php",
        "application/x-ruby",
        "application/x-perl",
        "application/x-lua",
        # documents that are text
        "application/x-tex",
        "application/x-latex",
        "application/x-ipynb+json",
        "application/x-subrip",
        "application/vnd.jgraph.mxfile",
        "image/svg+xml",
    }
)

_TEXTUAL_SUFFIXES = ("+json", "+xml", "+yaml")

# Extensions the stdlib maps wrongly, not at all, or differently per host /etc/mime.types.
# Lookups go through this table first so results do not depend on the machine.
_EXTENSION_TABLE: dict[str, str] = {
    # prose and markup
    ".txt": "text/plain",
    ".text": "text/plain",
    ".log": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".mdx": "text/markdown",
    ".rst": "text/x-rst",
    ".adoc": "text/asciidoc",
    ".org": "text/x-org",
    ".tex": "application/x-tex",
    ".latex": "application/x-latex",
    ".html": "text/html",
    ".htm": "text/html",
    ".xhtml": "application/xhtml+xml",
    ".css": "text/css",
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".srt": "application/x-subrip",
    ".vtt": "text/vtt",
    ".svg": "image/svg+xml",
    ".drawio": "application/vnd.jgraph.mxfile",
    # data and configuration
    ".json": "application/json",
    ".jsonl": "application/x-ndjson",
    ".ndjson": "application/x-ndjson",
    ".jsonld": "application/ld+json",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".xml": "application/xml",
    ".ini": "text/plain",
    ".cfg": "text/plain",
    ".conf": "text/plain",
    ".properties": "text/plain",
    ".graphql": "application/graphql",
    ".gql": "application/graphql",
    ".sql": "application/sql",
    ".ipynb": "application/x-ipynb+json",
    # source code
    ".py": "text/x-python",
    ".pyi": "text/x-python",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".cjs": "text/javascript",
    ".jsx": "text/javascript",
    ".ts": "application/typescript",
    ".tsx": "application/typescript",
    ".mts": "application/typescript",
    ".cts": "application/typescript",
    ".sh": "application/x-sh",
    ".bash": "application/x-sh",
    ".zsh": "application/x-sh",
    ".ps1": "text/plain",
    ".rs": "text/x-rust",
    ".go": "text/x-go",
    ".java": "text/x-java",
    ".kt": "text/x-kotlin",
    ".kts": "text/x-kotlin",
    ".scala": "text/x-scala",
    ".swift": "text/x-swift",
    ".c": "text/x-c",
    ".h": "text/x-c",
    ".cc": "text/x-c++",
    ".cpp": "text/x-c++",
    ".cxx": "text/x-c++",
    ".hpp": "text/x-c++",
    ".cs": "text/x-csharp",
    ".rb": "application/x-ruby",
    ".php": "application/x-httpd-php",
    ".pl": "application/x-perl",
    ".pm": "application/x-perl",
    ".lua": "application/x-lua",
    ".r": "text/x-r",
    ".jl": "text/x-julia",
    ".dart": "text/x-dart",
    ".vue": "text/x-vue",
    ".svelte": "text/x-svelte",
    ".proto": "text/x-protobuf",
    ".tf": "text/x-terraform",
    ".j2": "text/x-jinja",
    ".jinja": "text/x-jinja",
    # binary documents and archives
    ".pdf": "application/pdf",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".odt": "application/vnd.oasis.opendocument.text",
    ".ods": "application/vnd.oasis.opendocument.spreadsheet",
    ".odp": "application/vnd.oasis.opendocument.presentation",
    ".xlsm": "application/vnd.ms-excel.sheet.macroEnabled.12",
    ".epub": "application/epub+zip",
    ".doc": "application/msword",
    ".xls": "application/vnd.ms-excel",
    ".ppt": "application/vnd.ms-powerpoint",
    ".rtf": "application/rtf",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".mkv": "video/x-matroska",
    ".webp": "image/webp",
    ".zip": "application/zip",
    ".gz": "application/gzip",
    ".tgz": "application/gzip",
    ".bz2": "application/x-bzip2",
    ".xz": "application/x-xz",
    ".zst": "application/zstd",
    ".7z": "application/x-7z-compressed",
}

# Well-known extensionless file names.
_FILENAME_TABLE: dict[str, str] = {
    "makefile": "text/x-makefile",
    "dockerfile": "text/x-dockerfile",
    "containerfile": "text/x-dockerfile",
    "readme": "text/plain",
    "license": "text/plain",
    "copying": "text/plain",
    "changelog": "text/plain",
}


def _essence(mime_type: str) -> str:
    """``Text/Plain; charset=utf-8`` -> ``text/plain``."""
    return mime_type.split(";", 1)[0].strip().lower()


def is_textual(mime_type: str | None) -> bool:
    """Tell whether a MIME type denotes text (spec §4.1, condition 2).

    Parameters such as ``; charset=utf-8`` and letter case are ignored.

    Args:
        mime_type: The document's MIME type, or ``None`` when unknown.

    Returns:
        ``True`` for ``text/*``, for :data:`CODE_MIME_WHITELIST` and for structured-syntax
        suffixes ``+json``, ``+xml`` and ``+yaml``; ``False`` otherwise, including ``None``.
    """
    if not mime_type:
        return False
    essence = _essence(mime_type)
    major, sep, minor = essence.partition("/")
    if not sep or not major or not minor:
        return False
    if major == "text" or essence in CODE_MIME_WHITELIST:
        return True
    return minor.endswith(_TEXTUAL_SUFFIXES)


def is_rag_eligible(path: str, mime_type: str | None, rag_enabled: bool | None) -> bool:
    """Tell whether a document belongs in the project's ``_documents`` RAG (spec §4.1).

    The user override decides first: ``True`` includes the document even outside
    ``documents/`` or with a binary MIME type, ``False`` excludes it. Without an override
    the path must start with ``documents/`` (a real folder prefix, so ``documents_old/`` does
    not count) and the MIME type must be textual.

    Args:
        path: Document path inside the project, ``/``-separated.
        mime_type: The document's MIME type, or ``None`` when unknown.
        rag_enabled: The tristate override: ``None`` = auto, ``True`` = always, ``False`` = never.

    Returns:
        Whether the indexer should index the document.
    """
    if rag_enabled is not None:
        return rag_enabled
    return path.startswith(DOCUMENTS_PREFIX) and is_textual(mime_type)


@functools.cache
def _stdlib_types() -> tuple[dict[str, str], dict[str, str]]:
    # A fresh MimeTypes starts from the stdlib's built-in tables only, unlike the module-level
    # functions, which also read the host's /etc/mime.types and Windows registry.
    db = mimetypes.MimeTypes()
    return dict(db.types_map[True]), dict(db.types_map[False])


def guess_mime_type(path: str) -> str:
    """Guess a MIME type from a path's file name, the same on every host.

    An explicit table covers what the stdlib gets wrong or lacks (``.md``, ``.ts``, ``.yaml``,
    ``.toml``, ``.ipynb``, ``.docx``...); other extensions fall back to the stdlib's built-in
    table, never to the host's ``/etc/mime.types``.

    Args:
        path: A file path or name; ``/`` and ``\\`` both count as separators.

    Returns:
        The MIME type without parameters, or ``application/octet-stream`` when unknown.
    """
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    _, ext = posixpath.splitext(name)
    ext = ext.lower()
    if not ext:
        return _FILENAME_TABLE.get(name.lower(), OCTET_STREAM)
    if ext in _EXTENSION_TABLE:
        return _EXTENSION_TABLE[ext]
    strict, common = _stdlib_types()
    return strict.get(ext) or common.get(ext) or OCTET_STREAM
