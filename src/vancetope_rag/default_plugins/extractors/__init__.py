"""The built-in extractors, registered through ``register_extractors`` like a plugin's.

Each family module registers its own types: :mod:`.text` (plain text and code, HTML, Jupyter
notebooks, DOCX; standard library only), :mod:`.office`, :mod:`.books`, :mod:`.scans` (PDFs
and images; PDF needs the optional ``pypdf``, ``pip install 'vancetope-rag[pdf]'``),
:mod:`.legacy` (``.doc``/``.xls``/``.ppt`` through LibreOffice) and :mod:`.video` (through
ffmpeg). The
extractor functions this package used to define are re-exported for callers of the old paths.
"""

from __future__ import annotations

from vancetope_rag.default_plugins.extractors import books as extract_books
from vancetope_rag.default_plugins.extractors import legacy as extract_legacy
from vancetope_rag.default_plugins.extractors import office as extract_office
from vancetope_rag.default_plugins.extractors import scans as extract_scans
from vancetope_rag.default_plugins.extractors import text as extract_text_formats
from vancetope_rag.default_plugins.extractors import video as extract_video
from vancetope_rag.default_plugins.extractors.scans import extract_pdf
from vancetope_rag.default_plugins.extractors.text import (
    DOCX_MIME,
    IPYNB_MIME,
    extract_docx,
    extract_html,
    extract_ipynb,
)
from vancetope_rag.extraction.html import html_to_text
from vancetope_rag.extraction.registry import RegisterExtractor
from vancetope_rag.hookspecs import hookimpl

__all__ = [
    "DOCX_MIME",
    "IPYNB_MIME",
    "extract_docx",
    "extract_html",
    "extract_ipynb",
    "extract_pdf",
    "html_to_text",
    "register_extractors",
]


# tryfirst: built-ins register before third-party plugins, so a plugin that registers the same
# MIME type or extension replaces the built-in (pluggy otherwise calls the first-registered
# plugin last, and the last registration for a key wins).
@hookimpl(tryfirst=True)
def register_extractors(register: RegisterExtractor) -> None:
    # Text formats first: a later family may take over one of their types.
    extract_text_formats.register(register)
    extract_office.register(register)
    extract_books.register(register)
    extract_scans.register(register)
    extract_legacy.register(register)
    extract_video.register(register)
