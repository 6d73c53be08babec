"""HTML to text, the public helper plugins reuse (``vancetope_rag.html_to_text``): the built-in
HTML, EPUB and e-mail extractors all read HTML through it. Standard library only, no I/O.
"""

from __future__ import annotations

from html.parser import HTMLParser

__all__ = ["html_to_text"]

_BLOCK_TAGS = frozenset(
    {
        *("address", "article", "aside", "blockquote", "body", "br", "caption", "dd"),
        *("details", "div", "dl", "dt", "figcaption", "figure", "footer", "form"),
        *("h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol"),
        *("p", "pre", "section", "summary", "table", "tbody", "td", "th", "thead"),
        *("title", "tr", "ul"),
    }
)
_SKIPPED_TAGS = frozenset({"script", "style", "template"})


class _HtmlText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0
        self._pre = 0

    def _newline(self) -> None:
        if self.parts and not self.parts[-1].endswith("\n"):
            self.parts.append("\n")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED_TAGS:
            self._skip += 1
        elif tag in _BLOCK_TAGS:
            self._newline()
            self._pre += tag == "pre"

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCK_TAGS:
            self._newline()

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK_TAGS and tag != "br":
            self._newline()
            if tag == "pre":
                self._pre = max(0, self._pre - 1)

    def handle_data(self, data: str) -> None:
        if self._skip or not data:
            return
        if not self._pre:
            collapsed = " ".join(data.split())
            separable = not self._at_line_start() and not self.parts[-1].endswith(" ")
            lead = " " if data[0].isspace() and separable else ""
            trail = " " if collapsed and data[-1].isspace() else ""
            data = lead + collapsed + trail
        if data:
            self.parts.append(data)

    def _at_line_start(self) -> bool:
        return not self.parts or self.parts[-1].endswith("\n")

    def text(self) -> str:
        lines = [line.rstrip() for line in "".join(self.parts).split("\n")]
        out: list[str] = []
        for line in lines:
            if line or (out and out[-1]):
                out.append(line)
        return "\n".join(out).strip("\n")


def html_to_text(html: str) -> str:
    """The visible text of an HTML document or fragment.

    Scripts, styles and templates are dropped, each block element (paragraph, heading, list
    item, table cell, ``<br>``...) starts a line, whitespace is collapsed outside ``<pre>``,
    and character references are decoded. Plugins reuse it for HTML parts of other formats
    (the e-mail plugin for HTML-only mails).

    Args:
        html: The HTML source.

    Returns:
        The text, without leading or trailing blank lines.
    """
    parser = _HtmlText()
    parser.feed(html)
    parser.close()
    return parser.text()
