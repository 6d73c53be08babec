"""Books and typeset documents: EPUB and LaTeX source (standard library), RTF (the ``office``
extra, striprtf).

An EPUB is a section per chapter (spine item), a LaTeX file a section per ``\\section``.
Everything here runs in time linear in the input: hostile files cannot make a regular
expression backtrack.
"""

from __future__ import annotations

import io
import posixpath
import re
import unicodedata
import zipfile
from collections.abc import Callable
from urllib.parse import unquote
from xml.etree import ElementTree

from vancetope_rag.default_plugins.extractors.guards import check_zip, read_member, refuse_dtd
from vancetope_rag.extraction.html import html_to_text
from vancetope_rag.extraction.registry import (
    Extraction,
    ExtractOptions,
    ExtractorDependencyMissingError,
    RegisterExtractor,
    Section,
    decode_any,
    decode_text,
    extraction_error,
)

EPUB_MIME = "application/epub+zip"
_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_OPF = "{http://www.idpf.org/2007/opf}"
_XHTML_TYPES = ("application/xhtml+xml", "text/html")
# A chapter heading, matched where str.find saw its start tag; bounded.
_HEADING = re.compile(r"<(h[12]|title)\b[^>]{0,500}>(.{0,500}?)</\1\s*>", re.I | re.S)
_BODY_TAG = re.compile(r"<body\b", re.I)


# --- EPUB -------------------------------------------------------------------------------------


def _xml(data: bytes, path: str, name: str) -> ElementTree.Element:
    refuse_dtd(data, path, name)
    try:
        return ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        raise extraction_error(path, f"{name} is not well-formed XML ({exc})") from None


def _chapter_title(html: str) -> str | None:
    """The text of a chapter's first ``<h1>``, else ``<h2>``, else ``<title>``: found with
    ``str.find`` and one anchored, bounded match each, so hostile markup costs little."""
    head = html[:65_536].lower()
    for tag in ("h1", "h2", "title"):
        at = head.find(f"<{tag}")
        found = _HEADING.match(html, at) if at >= 0 else None
        if found and found.group(1).lower() == tag:
            title = " ".join(html_to_text(found.group(2)).split())
            if title:
                return title
    return None


def extract_epub(data: bytes, path: str, options: ExtractOptions) -> Extraction:
    """One section per spine item, in reading order (``chapter 3: Title``).

    The chapters' XHTML goes through :func:`~vancetope_rag.extraction.html.html_to_text`;
    entity declarations are refused, DRM-protected books named as such.
    """
    check_zip(data, path, "EPUB")
    sections: list[Section] = []
    chars = 0
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            container = _xml(
                read_member(archive, "META-INF/container.xml", path, 1 << 20),
                path,
                "META-INF/container.xml",
            )
            rootfile = container.find(f".//{_CONTAINER}rootfile")
            opf_name = rootfile.get("full-path", "") if rootfile is not None else ""
            if not opf_name:
                raise extraction_error(path, "not an EPUB (no rootfile in container.xml)")
            opf = _xml(read_member(archive, opf_name, path, 16 << 20), path, opf_name)
            base = posixpath.dirname(opf_name)
            items = {
                item.get("id"): (item.get("href", ""), item.get("media-type", ""))
                for item in opf.iter(f"{_OPF}item")
            }
            spine = [ref.get("idref") for ref in opf.iter(f"{_OPF}itemref")]
            encrypted = _encrypted(archive, path)
            for idref in spine:
                href, media_type = items.get(idref, ("", ""))
                if media_type not in _XHTML_TYPES or not href:
                    continue
                name = posixpath.normpath(posixpath.join(base, unquote(href.split("#")[0])))
                if name in encrypted:
                    raise extraction_error(
                        path,
                        "the EPUB is DRM-protected (its chapters are encrypted); "
                        "use a DRM-free copy",
                    )
                if name not in archive.NameToInfo:
                    continue  # a broken reference: skip it, as readers do
                raw = read_member(archive, name, path)
                refuse_dtd(raw, path, name, html=True)
                html = decode_text(raw, path)
                body = _BODY_TAG.search(html)  # the head's <title> is often the book's
                text = html_to_text(html[body.start() :] if body else html)
                if not text.strip():
                    continue
                title = _chapter_title(html)
                number = len(sections) + 1
                label = f"chapter {number}: {title}" if title else f"chapter {number}"
                sections.append(Section(text, label))
                chars += len(text)
                if chars > options.max_chars:
                    break  # the rest would be cut anyway
    except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError) as exc:
        raise extraction_error(path, f"not a readable EPUB file ({exc})") from None
    if not sections:
        raise extraction_error(path, "the EPUB has no readable chapters")
    return Extraction(tuple(sections))


def _encrypted(archive: zipfile.ZipFile, path: str) -> set[str]:
    """The members META-INF/encryption.xml names (fonts obfuscation lists fonts only)."""
    if "META-INF/encryption.xml" not in archive.NameToInfo:
        return set()
    xml = read_member(archive, "META-INF/encryption.xml", path, 4 << 20)
    uris = re.findall(rb'URI\s*=\s*"([^"]{1,2000})"', xml)
    return {posixpath.normpath(unquote(uri.decode("utf-8", "replace"))) for uri in uris}


# --- RTF --------------------------------------------------------------------------------------

_RTF_FIELD = re.compile(r"\\field\{", re.I)
_RTF_FONT = re.compile(r"\\f(\d{1,9})")
_RTF_CHARSET = re.compile(r"\\fcharset(\d{1,9})")
_RTF_FONT_TABLE = re.compile(r"\{[^{}]*\\fonttbl")


def _defused_rtf(text: str) -> str:
    """RTF that striprtf reads in linear time.

    striprtf's hyperlink and font-table expressions backtrack badly on hostile input:
    its font table is rebuilt here in a canonical form, and a line break (not content in
    RTF) between ``\\field`` and ``{`` keeps the hyperlink expression from ever matching
    (link targets are left out; link texts stay).
    """
    start = _RTF_FONT_TABLE.search(text)
    if start:
        depth, end = 0, len(text)
        for brace in re.finditer(r"[{}]", text[start.start() :]):
            depth += 1 if brace.group() == "{" else -1
            if depth == 0:
                end = start.start() + brace.end()
                break
        fonts = []
        for entry in text[start.start() : end].split(";")[:4096]:
            font, charset = _RTF_FONT.search(entry), _RTF_CHARSET.search(entry)
            if font and charset:
                fonts.append(f"{{\\f{font.group(1)}\\fcharset{charset.group(1)} f;}}")
        text = f"{text[: start.start()]}{{\\fonttbl{''.join(fonts)}}}{text[end:]}"
    return _RTF_FIELD.sub(lambda m: m.group()[:-1] + "\n{", text)


def extract_rtf(data: bytes, path: str) -> str:
    """The text of an RTF document (striprtf; the ``office`` extra)."""
    try:
        from striprtf import striprtf
    except ImportError:
        raise ExtractorDependencyMissingError("RTF extraction", "office") from None
    if not data.lstrip().startswith(b"{\\rtf"):
        raise extraction_error(path, "not an RTF file (it does not start with {\\rtf)")
    text = data.decode("latin-1")  # RTF is 7-bit; 8-bit bytes are read as Latin-1
    remove_pictures = getattr(striprtf, "remove_pict_groups", None)
    if remove_pictures is not None:  # before the line breaks: it counts \bin bytes
        text = remove_pictures(text)
    try:
        convert: Callable[..., str] = striprtf.rtf_to_text  # untyped
        out = convert(_defused_rtf(text), errors="ignore")
    except (ValueError, LookupError, IndexError) as exc:
        raise extraction_error(path, f"not a readable RTF file ({exc})") from None
    lines = [line.rstrip() for line in out.replace("\r", "").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


# --- LaTeX ------------------------------------------------------------------------------------

# Each alternative starts with its own character, and none can backtrack past a few chars.
_TEX_COMMENT = re.compile(r"\\.|%[^\n]*(?:\n[ \t]*)?", re.S)
_TEX_TOKEN = re.compile(
    r"\\(?:[A-Za-z@]{1,64}\*?|.)|\$\$?|[{}\[\]]|\n[ \t]*\n\s*|\n|[^\\{}\[\]$\n]+", re.S
)
_TEX_DOCUMENT = re.compile(r"\\begin\s*\{document\}")
_SECTIONING = frozenset({"part", "chapter", "section", "subsection", "subsubsection"})
#: What follows a command: ``o`` an optional ``[...]`` skipped, ``d`` a braced argument
#: dropped, ``t`` a section title, ``T`` the document title, ``b``/``e`` an environment name.
_ARGS = {
    **dict.fromkeys(_SECTIONING, "ot"),
    "title": "oT",
    "begin": "b",
    "end": "e",
    **dict.fromkeys(
        (
            "label",
            "ref",
            "eqref",
            "pageref",
            "autoref",
            "cref",
            "Cref",
            "input",
            "include",
            "bibliography",
            "bibliographystyle",
            "vspace",
            "hspace",
            "color",
            "textcolor",
            "colorbox",
            "href",
            "pagestyle",
            "thispagestyle",
            "hypersetup",
            "nocite",
            "pagenumbering",
            "linespread",
        ),
        "d",
    ),
    **dict.fromkeys(
        (
            "cite",
            "citep",
            "citet",
            "parencite",
            "textcite",
            "includegraphics",
            "usepackage",
            "documentclass",
            "RequirePackage",
        ),
        "od",
    ),
    **dict.fromkeys(("newcommand", "renewcommand", "providecommand"), "dood"),
    **dict.fromkeys(("setlength", "addtolength", "setcounter", "addtocounter"), "dd"),
    "newenvironment": "doodd",
    "caption": "o",
    "footnote": "o",
    "\\": "o",
}
_WORDS = {
    "\\": "\n",
    "par": "\n\n",
    "newline": "\n",
    "item": "\n- ",
    "LaTeX": "LaTeX",
    "TeX": "TeX",
    "ldots": "…",
    "dots": "…",
    "textbackslash": "\\",
    "S": "§",
    "ss": "ß",
    "footnote": " ",
    "quad": " ",
    "qquad": " ",
    "textendash": "–",
    "textemdash": "—",
    **dict.fromkeys((" ", ",", ";", ":", "\n", "\t"), " "),
}
_ACCENTS = {
    "'": "\u0301",
    "`": "\u0300",
    "^": "\u0302",
    '"': "\u0308",
    "~": "\u0303",
    "=": "\u0304",
    ".": "\u0307",
    "c": "\u0327",
    "v": "\u030c",
    "u": "\u0306",
    "H": "\u030b",
}
_MATH_ENVS = frozenset(
    f"{name}{star}"
    for name in (
        "equation",
        "align",
        "gather",
        "multline",
        "eqnarray",
        "displaymath",
        "math",
        "flalign",
        "alignat",
        "verbatim",
        "lstlisting",
        "Verbatim",
    )
    for star in ("", "*")
)
_ENV_ARGS = {
    "tabular": "od",
    "array": "od",
    "longtable": "od",
    "tabularx": "dd",
    "tabular*": "dd",
    "figure": "o",
    "table": "o",
    "minipage": "od",
}
_MATH_OPEN = {"$": "$", "$$": "$$", "\\(": "\\)", "\\[": "\\]"}
_BODY = object()  # the sink "the current section's text"


class _TexText:
    """Turns LaTeX into sections: one linear pass over :data:`_TEX_TOKEN` tokens."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sections: list[Section] = []
        self.body: list[str] = []
        self.title: str | None = None
        self.base: object = None if _TEX_DOCUMENT.search(source) else _BODY  # preamble: drop
        self.groups: list[tuple[str, object]] = []  # (kind, sink) of each open {...}
        self.expect = ""  # the arguments still expected (see _ARGS)
        self.brackets = 0  # depth of the optional [...] being skipped
        self.raw_end = ""  # math or verbatim: copied as-is up to this token
        self.skip_to = 0
        self.accent = ""
        self.done = False
        self.current: str | None = None  # the open section's title
        self.opened = False  # a sectioning command was seen

    def emit(self, text: str) -> None:
        sink = self.groups[-1][1] if self.groups else self.base
        if sink is _BODY:
            sink = self.body
        if isinstance(sink, list) and text:
            if self.accent and text[0].isalpha():
                text, self.accent = text[0] + self.accent + text[1:], ""
            sink.append(text)

    def run(self) -> list[Section]:
        for match in _TEX_TOKEN.finditer(self.source):
            if match.start() < self.skip_to:
                continue
            self.token(match.group(), match.end())
            if self.done:
                break
        while self.groups:  # unclosed groups: keep what a title group held (each its own)
            kind, sink = self.groups.pop()
            if kind in ("t", "T") and isinstance(sink, list):
                self.body.append("".join(sink))
        self.new_section(None)
        if len(self.sections) > 1 and self.sections[0].title is None:
            # Untitled text among titled sections would be left out of the index.
            self.sections[0] = Section(self.sections[0].text, "front matter")
        return self.sections

    def token(self, tok: str, end: int) -> None:
        if self.raw_end:
            self.raw(tok, end)
        elif self.brackets:
            self.brackets += (tok == "[") - (tok == "]")
        elif self.expect and self.argument(tok):
            return
        elif tok == "{":
            self.groups.append(("", self.groups[-1][1] if self.groups else self.base))
        elif tok == "}":
            self.close_group()
        elif tok in _MATH_OPEN:
            self.raw_end = _MATH_OPEN[tok]
            self.emit(tok)
        elif tok.startswith("\\"):
            self.command(tok[1:])
        elif tok[0] == "\n":
            self.emit("\n\n" if tok.count("\n") > 1 else " ")
        else:
            self.emit(tok.replace("~", " "))

    def argument(self, tok: str) -> bool:
        """Handle a token while arguments are expected; ``False``: process it as usual."""
        if tok.isspace() and tok.count("\n") < 2:  # not a paragraph break
            return True
        kind, self.expect = self.expect[0], self.expect[1:]
        if kind == "o":
            if tok == "[":
                self.brackets = 1
                return True
            return self.argument(tok) if self.expect else False
        if tok != "{":
            self.expect = ""
            return False
        self.groups.append((kind, None if kind == "d" else []))
        return True

    def command(self, name: str) -> None:
        if name in _ACCENTS:
            self.accent = _ACCENTS[name]
        elif len(name) == 1 and not name.isalpha() and name not in _WORDS:
            self.emit(name)  # \% \& \$ \# \_ \{ \}
        else:
            self.emit(_WORDS.get(name, ""))
        self.expect = _ARGS.get(name.rstrip("*"), "")

    def close_group(self) -> None:
        if not self.groups:
            return
        kind, sink = self.groups.pop()
        text = " ".join("".join(sink).split()) if isinstance(sink, list) else ""
        if kind == "t":
            self.new_section(f"section {text}" if text else "section")
            self.body.append(text + "\n\n")  # not emit(): linear even in nested titles
        elif kind == "T":
            self.title = text
            if self.base is _BODY and not self.sections and not "".join(self.body).strip():
                self.emit(text + "\n\n")
        elif kind == "b":
            self.begin(text)
        elif kind == "e":
            self.done = text == "document"
            self.emit("\n")

    def begin(self, env: str) -> None:
        if env == "document":
            self.base = _BODY
            if self.title:
                self.emit(self.title + "\n\n")
        elif env in _MATH_ENVS:
            self.raw_end = f"\\end{{{env}}}"
        elif env == "comment":
            self.groups.append(("", None))  # dropped up to \end{comment}
            self.raw_end = "\\end{comment}"
        else:
            self.expect = _ENV_ARGS.get(env, "")
        self.emit("\n")

    def raw(self, tok: str, end: int) -> None:
        """Inside math or verbatim: copy tokens up to :attr:`raw_end`."""
        if self.raw_end.startswith("\\end{"):
            if tok == "\\end" and self.source.startswith(self.raw_end[4:], end):
                self.skip_to = end + len(self.raw_end) - 4
                if self.raw_end == "\\end{comment}":
                    self.groups.pop()
                self.raw_end = ""
                self.emit("\n")
                return
        elif tok == self.raw_end:
            self.emit(tok)
            self.raw_end = ""
            return
        elif tok[0] == "\n" and tok.count("\n") > 1 and self.raw_end in ("$", "\\)"):
            self.raw_end = ""  # a paragraph ends inline math (TeX would complain)
        self.emit(tok)

    def new_section(self, title: str | None) -> None:
        """Close the open section (before the first ``\\section``: titled by ``\\title``)."""
        lines = (" ".join(line.split()) for line in "".join(self.body).split("\n"))
        text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
        if text:
            label = self.current if self.opened else self.title
            self.sections.append(Section(unicodedata.normalize("NFC", text), label))
        self.body, self.current, self.opened = [], title, True


def extract_latex(data: bytes, path: str) -> Extraction:
    """The text of a LaTeX source: a section per ``\\chapter``/``\\section``/``\\subsection``
    (``section Title``); the preamble, comments and most command markup are dropped, the
    arguments of formatting commands (``\\emph{...}``) kept, math copied as written."""
    text, encoding = decode_any(data, path)  # UTF-8, else a detected legacy encoding
    source = _TEX_COMMENT.sub(lambda m: m.group() if m.group()[0] == "\\" else "", text)
    sections = _TexText(source).run()
    return Extraction(tuple(sections) or (Section(""),), encoding=encoding)


# --- registration -----------------------------------------------------------------------------


def register(register: RegisterExtractor) -> None:
    """Register this module's extractors (called by the default plugin's hook)."""
    register(
        (EPUB_MIME,), extract_epub, extensions=(".epub",), name="vancetope.epub", takes_options=()
    )
    register(
        ("application/rtf", "text/rtf"), extract_rtf, extensions=(".rtf",), name="vancetope.rtf"
    )
    tex = ("application/x-tex", "application/x-latex", "text/x-tex", "text/x-latex")
    # Version 2 reads a detected legacy encoding (version 1 refused what was not UTF-8).
    register(
        tex,
        extract_latex,
        extensions=(".tex", ".latex", ".ltx"),
        name="vancetope.latex",
        version="2",
    )
