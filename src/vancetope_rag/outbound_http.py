"""What our calls to outside HTTP servers with the standard library share (the rerankers'
``/rerank``, the vision OCR's chat completions): the check of a base URL before any call, a
URL as a message shows it, a server's words as a message quotes them (never the key), and
what an error answer says."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
from typing import Any

from vancetope_rag.secrets import MASK, redact

#: Longest server text a message quotes.
MAX_QUOTED = 300


def base_url_problem(url: str, setting: str) -> str | None:
    """Why ``url`` (the value of ``setting``) cannot be called, in words that name the
    setting; None when it is an http(s) URL with a host and, if any, a port from 1 to 65535."""
    shown = shown_url(url)
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return f"{setting} {shown!r} is not a URL"
    if parts.scheme not in ("http", "https"):
        return f"{setting} {shown!r} is not an http(s) URL (http://host[:port]/path)"
    if not parts.hostname:
        return f"{setting} {shown!r} names no host"
    try:
        port = parts.port
    except ValueError:  # not a number, or past 65535
        port = 0
    if port == 0:
        return f"{setting} {shown!r}: the port after its host is not a number from 1 to 65535"
    return None


def shown_url(url: str) -> str:
    """``url`` as a message may show it: without user, password, query string or fragment
    (any may carry a credential); the host and port as they were written (``[::1]:8080``)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # an unbalanced "[": nothing of it is shown
        return "(not a URL)"
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def quote(text: str, api_key: str | None) -> str:
    """A server's words as a message may quote them: the key masked (some servers echo it),
    other secrets redacted, cut short."""
    if api_key:
        text = text.replace(api_key, MASK)
    text = redact(text)
    if len(text) > MAX_QUOTED:
        text = text[: MAX_QUOTED - 1] + "…"
    return text


def error_detail(exc: urllib.error.HTTPError, api_key: str | None) -> str:
    """``": <what the error answer says>"``, quoted (:func:`quote`), or ``""``: an
    OpenAI-style ``error.message`` (vLLM), TEI's ``error``, Cohere's ``message``, Jina's
    ``detail``, else the body's text."""
    try:
        raw = exc.read(64 * 1024)
    except Exception:
        return ""
    text = raw.decode("utf-8", "replace")
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        said = body.get("error") or body.get("message") or body.get("detail")
        if isinstance(said, dict):
            said = said.get("message")
        if isinstance(said, str) and said:
            text = said
    text = " ".join(text.split())
    return f": {quote(text, api_key)}" if text else ""
