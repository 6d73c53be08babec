"""vancetope-rag plugin: text extraction for e-mail files."""

from __future__ import annotations

from email import policy
from email.message import EmailMessage
from email.parser import BytesParser

from vancetope_rag import ExtractionError, RegisterExtractor, hookimpl, html_to_text

MIME_TYPES = ("message/rfc822",)
EXTENSIONS = (".eml",)


def extract_eml(data: bytes, path: str) -> str:
    """Headers worth searching plus the best text body of an RFC 822 message."""
    try:
        msg = BytesParser(policy=policy.default).parsebytes(data)
    except Exception as exc:  # the parser is lenient; this is for truly broken input
        raise ExtractionError(f"cannot parse e-mail {path!r}: {exc}") from None
    if not isinstance(msg, EmailMessage) or not msg.keys():
        raise ExtractionError(f"{path!r} has no e-mail headers")
    lines = [f"{h}: {msg[h]}" for h in ("From", "To", "Date", "Subject") if msg[h]]
    body = msg.get_body(preferencelist=("plain", "html"))
    if body is not None:
        content = body.get_content()
        if body.get_content_subtype() == "html":
            content = html_to_text(content)
        lines += ["", content.strip()]
    return "\n".join(lines)


@hookimpl
def register_extractors(register: RegisterExtractor) -> None:
    register(MIME_TYPES, extract_eml, extensions=EXTENSIONS)
