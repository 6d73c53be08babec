"""Book extractors on real bytes: EPUB, RTF and LaTeX; hostile inputs end quickly. Every
fixture is generated here.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
import zipfile
from typing import Any

import pytest

from fakes import default_extractors
from filemakers import section, titles
from vancetope_rag.domain.eligibility import guess_mime_type
from vancetope_rag.errors import ExtractionError
from vancetope_rag.extraction.registry import (
    ExtractedText,
    ExtractOptions,
    ExtractorDependencyMissing,
    extract_text,
)

BUILTINS = default_extractors()  # never changed by a test


def extract(data: bytes, **kwargs: Any) -> ExtractedText:
    """:func:`extract_text` with the default plugins' extractors."""
    return extract_text(data, registry=BUILTINS, **kwargs)


# --- EPUB ---------------------------------------------------------------------------------

CONTAINER = (
    '<?xml version="1.0"?><container version="1.0" '
    'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
    '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
    "</rootfiles></container>"
)


def xhtml(title: str, body: str, *, doctype: str = "<!DOCTYPE html>") -> str:
    return (
        f'<?xml version="1.0" encoding="utf-8"?>{doctype}'
        f'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>{title}</title></head>'
        f"<body>{body}</body></html>"
    )


def make_epub(
    chapters: dict[str, str],
    spine: list[str],
    *,
    extra: dict[str, str] | None = None,
) -> bytes:
    manifest = "".join(
        f'<item id="{name.split(".")[0]}" href="{name}" media-type="application/xhtml+xml"/>'
        for name in chapters
    )
    refs = "".join(f'<itemref idref="{name.split(".")[0]}"/>' for name in spine)
    opf = (
        '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
        '<metadata/><manifest><item id="css" href="style.css" media-type="text/css"/>'
        f'{manifest}</manifest><spine><itemref idref="css"/>{refs}</spine></package>'
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")
        archive.writestr("META-INF/container.xml", CONTAINER)
        archive.writestr("OEBPS/content.opf", opf)
        archive.writestr("OEBPS/style.css", "p { color: red }")
        for name, html in chapters.items():
            archive.writestr(f"OEBPS/{name}", html)
        for name, text in (extra or {}).items():
            archive.writestr(name, text)
    return buffer.getvalue()


CHAPTERS = {
    "intro.xhtml": xhtml("The Book", "<h1>Arrival</h1><p>The lighthouse keeper counted gulls.</p>"),
    "storm.xhtml": xhtml(
        "The Book",
        "<h2>The <em>Storm</em></h2><p>Waves broke the pier at midnight.</p>",
        doctype='<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" '
        '"http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">',
    ),
    "cover.xhtml": xhtml("Cover", '<img src="cover.png"/>'),
    "notes.xhtml": xhtml("Afterword", "<p>Written on a rainy island.</p>"),
}


def test_epub_chapters_follow_the_spine() -> None:
    data = make_epub(CHAPTERS, ["cover.xhtml", "storm.xhtml", "intro.xhtml", "notes.xhtml"])
    result = extract(data, path="book.epub")
    assert result.extractor == "vancetope.epub@1"
    assert titles(result) == [
        "chapter 1: The Storm",
        "chapter 2: Arrival",
        "chapter 3: Afterword",
    ]
    assert section(result, "chapter 1: The Storm") == (
        "The Storm\nWaves broke the pier at midnight."
    )
    assert "The lighthouse keeper counted gulls." in section(result, "chapter 2: Arrival")
    assert extract(data, path="x", mime_type="application/epub+zip").text == result.text


def test_epub_refusals() -> None:
    entity = '<!DOCTYPE html [<!ENTITY e "boom">]>'
    evil = {**CHAPTERS, "intro.xhtml": xhtml("x", "<p>&e;</p>", doctype=entity)}
    with pytest.raises(ExtractionError, match="DTD or entity"):
        extract(make_epub(evil, ["intro.xhtml"]), path="evil.epub")

    drm = (
        '<encryption><EncryptedData><CipherData><CipherReference URI="OEBPS/intro.xhtml"/>'
        "</CipherData></EncryptedData></encryption>"
    )
    locked = make_epub(CHAPTERS, ["intro.xhtml"], extra={"META-INF/encryption.xml": drm})
    with pytest.raises(ExtractionError, match="DRM-protected"):
        extract(locked, path="locked.epub")

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
    with pytest.raises(ExtractionError, match=r"no META-INF/container\.xml"):
        extract(buffer.getvalue(), path="empty.epub")
    with pytest.raises(ExtractionError, match="not a readable EPUB"):
        extract(b"PK\x03\x04 broken", path="broken.epub")
    with pytest.raises(ExtractionError, match="no readable chapters"):
        extract(make_epub(CHAPTERS, ["cover.xhtml"]), path="pictures.epub")


def test_epub_stops_reading_past_the_character_budget() -> None:
    chapters = {f"c{i}.xhtml": xhtml("t", f"<p>{'word ' * 400}chapter {i}</p>") for i in range(50)}
    result = extract(make_epub(chapters, list(chapters)), path="long.epub", max_chars=5_000)
    assert result.truncated
    assert len(result.text) == 5_000
    assert titles(result)[:2] == ["chapter 1: t", "chapter 2: t"]


# --- RTF ----------------------------------------------------------------------------------

RTF = (
    r"{\rtf1\ansi\ansicpg1252\deff0{\fonttbl{\f0\fswiss\fcharset0 Arial;}}"
    r"{\info{\title Hidden metadata}}"
    r"\f0\fs24 The \b quokka\b0  smiles at tourists.\par "
    r"Caf\'e9 prices rose.\par "
    r'{\field{\*\fldinst{HYPERLINK "https://example.org"}}{\fldrslt{the visitor centre}}}\par '
    r"Snowman: \u9731?.\par }"
)


def test_rtf_text() -> None:
    for mime in (None, "application/rtf", "text/rtf"):
        result = extract(RTF.encode("ascii"), path="notes.rtf", mime_type=mime)
        assert result.extractor == "vancetope.rtf@1"
        assert result.text == (
            "The quokka smiles at tourists.\nCafé prices rose.\nthe visitor centre\nSnowman: ☃."
        )


def test_rtf_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ExtractionError, match=r"not an RTF file"):
        extract(b"plain words, not rtf", path="fake.rtf")
    monkeypatch.setitem(sys.modules, "striprtf", None)
    with pytest.raises(ExtractorDependencyMissing) as info:
        extract(RTF.encode(), path="notes.rtf")
    assert info.value.extra == "office"


@pytest.mark.parametrize(
    "body",
    [
        "{" * 500_000 + "}" * 500_000,
        "\\" * 1_000_000,
        "{\\b\\\\}" * 150_000,
        "{\\fonttbl " + "\\f1\\fcharset0 x" * 60_000 + "}",
        '{\\field{\\*\\fldinst{HYPERLINK "a" ' * 30_000,
        "\\'e9\\u" * 200_000,
    ],
    ids=["braces", "backslashes", "mixed", "fonttable", "hyperlinks", "escapes"],
)
def test_hostile_rtf_ends_quickly(body: str) -> None:
    started = time.process_time()  # this process's CPU: other processes cannot stretch it
    with contextlib.suppress(ExtractionError):  # refusing is fine too; hanging is not
        extract(("{\\rtf1 " + body + "}").encode("latin-1"), path="hostile.rtf")
    assert time.process_time() - started < 10  # each takes under 0.5 s of CPU


# --- LaTeX --------------------------------------------------------------------------------

LATEX = r"""\documentclass[11pt]{article}
\usepackage{amsmath}
\newcommand{\R}{\mathbb{R}}
\title{Notes on \emph{Tidal} Energy}
\begin{document}
\maketitle
Tides move the \textbf{largest} turbines. % a comment nobody should index
Costs fall 50\% per decade~\cite[p.~3]{smith}.

\section{Theory}\label{sec:theory}
The power is $P = \frac{1}{2}\rho A v^3$ and
\begin{equation}
  E = \int P \, dt
\end{equation}
Caf\'e owners in Brest\footnote{In Brittany.} agree.
\begin{figure}[h]\includegraphics[width=0.5\textwidth]{turbine.png}
\caption{A turbine}\end{figure}
\subsection*{Open {problems}}
\begin{itemize}\item Corrosion of the blades \item Fish\end{itemize}
\begin{comment}secret draft text\end{comment}
Line one\\ line two.
\end{document}
Anything after the end is ignored.
"""


def test_latex_sections_and_text() -> None:
    assert guess_mime_type("paper.tex") == "application/x-tex"
    result = extract(LATEX.encode(), path="paper.tex")
    assert result.extractor == "vancetope.latex@2"
    assert titles(result) == [
        "Notes on Tidal Energy",
        "section Theory",
        "section Open problems",
    ]
    assert section(result, "Notes on Tidal Energy") == (
        "Notes on Tidal Energy\n\nTides move the largest turbines. Costs fall 50% per decade ."
    )
    theory = section(result, "section Theory")
    assert "The power is $P = \\frac{1}{2}\\rho A v^3$ and" in theory
    assert "E = \\int P \\, dt" in theory
    assert "Café owners in Brest In Brittany. agree." in theory
    assert "A turbine" in theory
    assert "turbine.png" not in result.text and "width" not in result.text
    problems = section(result, "section Open problems")
    assert "- Corrosion of the blades" in problems and "- Fish" in problems
    assert "Line one\nline two." in problems
    for absent in ("comment nobody", "secret draft", "amsmath", "sec:theory", "smith", "after"):
        assert absent not in result.text


def test_latex_fragment_without_document() -> None:
    for path in ("part.latex", "part.ltx"):
        result = extract(b"Intro text.\n\\chapter{One}\nBody of one.", path=path)
        assert titles(result) == ["front matter", "section One"]
        assert result.text == "Intro text.\n\nOne\n\nBody of one."
        assert [s.text for s in result.section_texts()] == ["Intro text.", "One\n\nBody of one."]
    result = extract(b"Just words, \\emph{no} sections.", path="plain.tex")
    assert result.sections == ()
    assert result.text == "Just words, no sections."


@pytest.mark.parametrize(
    "source",
    [
        "{" * 1_000_000,
        "}" * 1_000_000,
        "\\" * 1_000_000,
        "\\section{" * 100_000 + "x}" * 100_000,
        "\\section{x" * 100_000,
        "\\begin{" * 120_000,
        "$" * 1_000_000,
        "\\includegraphics[" * 60_000,
        "%" * 500_000 + "\n" + "\\{" * 250_000,
        "\\" + "a" * 1_000_000,
        "\n \n" * 300_000,
    ],
    ids=[
        *("open", "close", "backslash", "nested-titles", "open-titles", "begin", "dollars"),
        *("brackets", "comments", "long-word", "paragraphs"),
    ],
)
def test_hostile_latex_ends_quickly(source: str) -> None:
    # CPU seconds of this process, not wall time: a busy machine stretched the wall clock
    # of these past 5 s (11 s for nested-titles at a load of 10 on 2 cores) while their CPU
    # stayed at 0.3-1 s. A quadratic parse of a million characters would take minutes.
    started = time.process_time()
    extract(source.encode(), path="hostile.tex", options=ExtractOptions())
    assert time.process_time() - started < 10
