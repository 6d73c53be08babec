"""The default registry's table: which built-in extractor (name and version) reads each MIME
type and extension. The names and versions go into the extraction records an import stores; a
rename or a new version re-reads every file of its types, so a change here must be deliberate.

``vancetope_rag.extract.decode_text`` is at version 2 since it detects a legacy encoding in a
text file that is not UTF-8: files it refused at version 1 are read again.
"""

from __future__ import annotations

from pathlib import Path

from vancetope_rag.app import RagApp
from vancetope_rag.config import EngineConfig
from vancetope_rag.extraction.registry import ExtractorEntry

BY_MIME: dict[str, tuple[str, str]] = {
    "application/ecmascript": ("vancetope_rag.extract.decode_text", "2"),
    "application/epub+zip": ("vancetope.epub", "1"),
    "application/graphql": ("vancetope_rag.extract.decode_text", "2"),
    "application/javascript": ("vancetope_rag.extract.decode_text", "2"),
    "application/json": ("vancetope_rag.extract.decode_text", "2"),
    "application/jsonl": ("vancetope_rag.extract.decode_text", "2"),
    "application/ld+json": ("vancetope_rag.extract.decode_text", "2"),
    "application/msword": ("vancetope.doc", "1"),
    "application/pdf": ("vancetope.pdf", "2"),
    "application/rtf": ("vancetope.rtf", "1"),
    "application/sql": ("vancetope_rag.extract.decode_text", "2"),
    "application/toml": ("vancetope_rag.extract.decode_text", "2"),
    "application/typescript": ("vancetope_rag.extract.decode_text", "2"),
    "application/vnd.jgraph.mxfile": ("vancetope_rag.extract.decode_text", "2"),
    "application/vnd.ms-excel": ("vancetope.xls", "1"),
    "application/vnd.ms-excel.sheet.macroenabled.12": ("vancetope.xlsx", "1"),
    "application/vnd.ms-powerpoint": ("vancetope.ppt", "1"),
    "application/vnd.oasis.opendocument.presentation": ("vancetope.odp", "1"),
    "application/vnd.oasis.opendocument.spreadsheet": ("vancetope.ods", "1"),
    "application/vnd.oasis.opendocument.text": ("vancetope.odt", "1"),
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": (
        "vancetope.pptx",
        "1",
    ),
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": ("vancetope.xlsx", "1"),
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": (
        "vancetope_rag.default_plugins.extractors.extract_docx",
        "1",
    ),
    "application/x-csh": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-httpd-php": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-ipynb+json": ("vancetope_rag.default_plugins.extractors.extract_ipynb", "1"),
    "application/x-javascript": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-latex": ("vancetope.latex", "2"),
    "application/x-lua": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-ndjson": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-pdf": ("vancetope.pdf", "2"),
    "application/x-perl": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-php": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-python": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-python-code": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-ruby": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-sh": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-shellscript": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-sql": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-subrip": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-tex": ("vancetope.latex", "2"),
    "application/x-toml": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-typescript": ("vancetope_rag.extract.decode_text", "2"),
    "application/x-yaml": ("vancetope_rag.extract.decode_text", "2"),
    "application/xhtml+xml": ("vancetope_rag.default_plugins.extractors.extract_html", "2"),
    "application/xml": ("vancetope_rag.extract.decode_text", "2"),
    "application/yaml": ("vancetope_rag.extract.decode_text", "2"),
    "image/gif": ("vancetope.image", "1"),
    "image/jpeg": ("vancetope.image", "1"),
    "image/png": ("vancetope.image", "1"),
    "image/svg+xml": ("vancetope_rag.extract.decode_text", "2"),
    "image/tiff": ("vancetope.image", "1"),
    "image/webp": ("vancetope.image", "1"),
    "text/*": ("vancetope_rag.extract.decode_text", "2"),
    "text/html": ("vancetope_rag.default_plugins.extractors.extract_html", "2"),
    "text/rtf": ("vancetope.rtf", "1"),
    "text/x-latex": ("vancetope.latex", "2"),
    "text/x-tex": ("vancetope.latex", "2"),
    "video/mp4": ("vancetope.video", "1"),
    "video/quicktime": ("vancetope.video", "1"),
    "video/webm": ("vancetope.video", "1"),
    "video/x-matroska": ("vancetope.video", "1"),
}

BY_EXTENSION: dict[str, tuple[str, str]] = {
    ".doc": ("vancetope.doc", "1"),
    ".docx": ("vancetope_rag.default_plugins.extractors.extract_docx", "1"),
    ".epub": ("vancetope.epub", "1"),
    ".gif": ("vancetope.image", "1"),
    ".htm": ("vancetope_rag.default_plugins.extractors.extract_html", "2"),
    ".html": ("vancetope_rag.default_plugins.extractors.extract_html", "2"),
    ".ipynb": ("vancetope_rag.default_plugins.extractors.extract_ipynb", "1"),
    ".jfif": ("vancetope.image", "1"),
    ".jpe": ("vancetope.image", "1"),
    ".jpeg": ("vancetope.image", "1"),
    ".jpg": ("vancetope.image", "1"),
    ".latex": ("vancetope.latex", "2"),
    ".ltx": ("vancetope.latex", "2"),
    ".m4v": ("vancetope.video", "1"),
    ".mkv": ("vancetope.video", "1"),
    ".mov": ("vancetope.video", "1"),
    ".mp4": ("vancetope.video", "1"),
    ".odp": ("vancetope.odp", "1"),
    ".ods": ("vancetope.ods", "1"),
    ".odt": ("vancetope.odt", "1"),
    ".pdf": ("vancetope.pdf", "2"),
    ".png": ("vancetope.image", "1"),
    ".ppt": ("vancetope.ppt", "1"),
    ".pptx": ("vancetope.pptx", "1"),
    ".rtf": ("vancetope.rtf", "1"),
    ".tex": ("vancetope.latex", "2"),
    ".tif": ("vancetope.image", "1"),
    ".tiff": ("vancetope.image", "1"),
    ".webm": ("vancetope.video", "1"),
    ".webp": ("vancetope.image", "1"),
    ".xhtml": ("vancetope_rag.default_plugins.extractors.extract_html", "2"),
    ".xls": ("vancetope.xls", "1"),
    ".xlsm": ("vancetope.xlsx", "1"),
    ".xlsx": ("vancetope.xlsx", "1"),
}


def _built_in(table: dict[str, ExtractorEntry]) -> dict[str, tuple[str, str]]:
    # Third-party plugins installed next to the package (vancetope_rag_eml) are not pinned here.
    return {
        key: (entry.name, entry.version)
        for key, entry in table.items()
        if entry.extractor.__module__.split(".")[0] == "vancetope_rag"
    }


def test_the_default_registry_table_is_pinned(tmp_path: Path) -> None:
    app = RagApp.open(EngineConfig(store=f"sqlite:///{tmp_path}/r.db"))
    try:
        registry = app.extractors
        assert _built_in(registry._by_mime) == BY_MIME
        assert _built_in(registry._by_extension) == BY_EXTENSION
    finally:
        app.close()
