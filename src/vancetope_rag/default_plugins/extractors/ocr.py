"""OCR/vision backends: PNG page images in, their text out (``rag.extract.ocr``).

``tesseract`` runs the local ``tesseract`` binary through ``pytesseract`` (the ``ocr`` extra and
Debian/Ubuntu's ``tesseract-ocr``), and with the vision fallback sends what it found no text in
to the vision model; ``vision`` sends each image to an OpenAI-compatible chat-completions
endpoint with the standard library's HTTP client. The API key never appears in an error
message: server text quoted in one has it replaced by ``****``.

A failure of the machine rather than the image is read again later: the ``tesseract`` program
missing is an :class:`~vancetope_rag.errors.ExtractorProgramMissingError` naming its Debian
package (as a missing LibreOffice or ffmpeg is); the vision model unreachable, overloaded or
refusing the settings, a missing language pack or a time limit is an
:class:`~vancetope_rag.errors.ExtractorUnavailableError`.
"""

from __future__ import annotations

import base64
import io
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from vancetope_rag.errors import ExtractionError, ExtractorProgramMissingError
from vancetope_rag.extraction.registry import (
    ExtractorDependencyMissingError,
    ExtractorUnavailableError,
    OcrConfig,
    extraction_error,
)
from vancetope_rag.outbound_http import MAX_QUOTED, base_url_problem, error_detail, quote, shown_url

DEFAULT_VISION_BASE_URL = "https://api.openai.com/v1"
#: What the vision model is asked for, with each page image.
VISION_INSTRUCTION = (
    "Transcribe all text of this page verbatim, in reading order, as plain text. Keep line "
    "breaks between paragraphs, lines and table rows. Do not add commentary, descriptions, "
    "headings or formatting of your own; if the page has no text, answer with nothing."
)
#: Largest vision response body read (a transcription is far smaller).
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: A page (or image) whose text has fewer letters or digits than this holds no text.
MIN_TEXT_CHARS = 3
#: HTTP statuses of a vision endpoint that are its failure or its settings', not the
#: image's: overloaded, down, or refusing the key, the model or the URL.
UNAVAILABLE_STATUSES = frozenset({401, 403, 404, 408, 425, 429})
#: The Debian/Ubuntu package of the ``tesseract`` program (its English data included).
TESSERACT_PACKAGE = "tesseract-ocr"


def has_text(text: str) -> bool:
    """Enough letters or digits to be a page's text (a page number or a stray mark is not)."""
    return sum(c.isalnum() for c in text) >= MIN_TEXT_CHARS


def unavailable(path: str, reason: str) -> ExtractorUnavailableError:
    """The machine's failure to read ``path``: retried later, unlike the file's own."""
    return ExtractorUnavailableError(f"cannot extract text from {path!r}: {reason}")


def tesseract_missing(language: str) -> ExtractorProgramMissingError:
    """No ``tesseract`` program: the machine's failure, named with the packages to install
    (the program, and the language packs ``language`` needs beyond its English)."""
    packs = [f"tesseract-ocr-{lang}" for lang in language.split("+") if lang not in ("", "eng")]
    package = " ".join([TESSERACT_PACKAGE, *packs])
    return ExtractorProgramMissingError("OCR with Tesseract", "tesseract", package)


def recognize(
    images: Sequence[bytes],
    config: OcrConfig,
    path: str,
    *,
    instruction: str = VISION_INSTRUCTION,
) -> list[str]:
    """The text of each image, in order, read by the backend ``config.engine`` names.

    Args:
        images: PNG images (one per page or frame).
        config: The OCR/vision backend and its settings.
        path: The file the images come from, for messages.
        instruction: What a vision model is asked for with each image (a page is
            transcribed, a video frame described); Tesseract reads text whatever it says.

    Returns:
        One text per image (``""`` where nothing was read).

    Raises:
        ExtractorDependencyMissingError: ``tesseract`` without ``pytesseract`` (the ``ocr`` extra).
        ExtractorProgramMissingError: ``tesseract`` without the ``tesseract`` program.
        ExtractorUnavailableError: The backend is not there now (the program missing, the
            vision model unreachable or refusing the settings, a time limit).
        ExtractionError: The backend is misconfigured or failed on the image (the message
            says which setting or package to fix; it never contains the API key).
    """
    if not images:
        return []
    if config.unavailable:
        raise unavailable(path, config.unavailable)
    if config.engine == "tesseract":
        if config.tesseract_missing:
            raise tesseract_missing(config.language)
        texts = _run_all(images, config, lambda png: _tesseract(png, config, path))
        left = [i for i, text in enumerate(texts) if not has_text(text)]
        if config.fallback and left:  # local first; the vision model reads what is left
            url = _vision_url(config, path)
            seen = _run_all(
                [images[i] for i in left],
                config,
                lambda png: _vision(png, config, url, path, instruction),
            )
            for i, text in zip(left, seen, strict=True):
                texts[i] = text
        return texts
    if config.engine == "vision":
        url = _vision_url(config, path)
        return _run_all(images, config, lambda png: _vision(png, config, url, path, instruction))
    raise extraction_error(
        path, f"unknown OCR engine {config.engine!r}; set rag.extract.ocr to tesseract or vision"
    )


def _run_all(images: Sequence[bytes], config: OcrConfig, read: Callable[[bytes], str]) -> list[str]:
    """``read`` on every image, at most ``config.concurrency`` at once; the first error wins."""
    workers = max(1, min(int(config.concurrency), len(images)))
    if workers == 1:
        return [read(png) for png in images]
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vancetope-ocr")
    try:
        futures: list[Future[str]] = [pool.submit(read, png) for png in images]
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# --- tesseract --------------------------------------------------------------------------------


def _tesseract(png: bytes, config: OcrConfig, path: str) -> str:
    try:
        import pytesseract  # type: ignore[import-not-found, unused-ignore]
        from PIL import Image
    except ImportError:
        raise ExtractorDependencyMissingError("OCR with Tesseract", "ocr") from None
    language = config.language or "eng"
    packages = " ".join(f"tesseract-ocr-{lang}" for lang in language.split("+") if lang)
    if config.tesseract_cmd:  # the program the calling process found on its PATH
        pytesseract.pytesseract.tesseract_cmd = config.tesseract_cmd
    try:
        with Image.open(io.BytesIO(png)) as image:
            text = pytesseract.image_to_string(
                image, lang=language, timeout=max(1, round(config.request_timeout_s))
            )
    except pytesseract.TesseractNotFoundError:
        raise tesseract_missing(language) from None
    except pytesseract.TesseractError as exc:
        detail = str(getattr(exc, "message", "") or exc)
        if "language" in detail.lower() or "traineddata" in detail.lower():
            raise unavailable(
                path,
                f"Tesseract has no data for the language {language!r} "
                f"(rag.extract.ocrLanguage): install Debian/Ubuntu's {packages} package",
            ) from None
        raise extraction_error(path, f"Tesseract failed: {quote(detail, None)}") from None
    except RuntimeError as exc:  # pytesseract's timeout
        if "timeout" not in str(exc).lower():
            raise
        raise unavailable(
            path, f"Tesseract took longer than {config.request_timeout_s:g}s for one page"
        ) from None
    return str(text)


# --- vision -----------------------------------------------------------------------------------


def _vision_url(config: OcrConfig, path: str) -> str:
    if not config.vision_model:
        raise extraction_error(
            path,
            "the vision OCR engine has no model: set rag.extract.vision.model (or "
            "rag.extract.vision.ocrModel, or DOC_VISION_MODEL for every tenant)",
        )
    base = (config.vision_base_url or DEFAULT_VISION_BASE_URL).strip().rstrip("/")
    problem = base_url_problem(base, "rag.extract.vision.baseUrl")
    if problem:
        raise extraction_error(path, problem)
    return f"{base}/chat/completions"


def _vision(png: bytes, config: OcrConfig, url: str, path: str, instruction: str) -> str:
    image_url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    body = {
        "model": config.vision_model,
        "temperature": 0,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": instruction},
                    {"type": "image_url", "image_url": {"url": image_url}},
                ],
            }
        ],
    }
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    where = shown_url(url)
    key = config.api_key
    try:
        with urllib.request.urlopen(request, timeout=config.request_timeout_s) as response:
            raw = response.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise unavailable(
                path,
                f"the vision model refused the API key (rag.extract.vision.apiKey): HTTP "
                f"{exc.code} from {where}",
            ) from None
        detail = error_detail(exc, key)
        failed = unavailable if exc.code in UNAVAILABLE_STATUSES or exc.code >= 500 else None
        message = f"the vision model at {where} answered HTTP {exc.code}{detail}"
        raise (failed or extraction_error)(path, message) from None
    except TimeoutError:
        raise _timeout(path, where, config) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise _timeout(path, where, config) from None
        raise unavailable(
            path, f"cannot reach the vision model at {where}: {quote(str(reason), key)}"
        ) from None
    if len(raw) > MAX_RESPONSE_BYTES:
        raise extraction_error(path, f"the vision model at {where} sent an oversized answer")
    try:
        return _message_text(json.loads(raw))
    except (ValueError, LookupError, TypeError, RecursionError):
        shown = quote(raw[:MAX_QUOTED].decode("utf-8", "replace"), key)
        raise extraction_error(
            path,
            f"the vision model at {where} did not answer with a chat completion: {shown!r}",
        ) from None


def _message_text(answer: Any) -> str:
    """``choices[0].message.content`` of a chat completion: a string or a list of parts."""
    content = answer["choices"][0]["message"]["content"]
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, dict) and part.get("type") in ("text", "output_text")
        )
    raise TypeError("content is neither text nor a list of parts")


def _timeout(path: str, where: str, config: OcrConfig) -> ExtractionError:
    return unavailable(
        path,
        f"the vision model at {where} did not answer within {config.request_timeout_s:g}s; "
        "try again later, or lower rag.extract.vision.concurrency",
    )
