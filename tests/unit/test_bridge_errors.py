"""The one table that names an extraction's failure in ``files_visualize``'s codes: a missing
program is a missing dependency; a backend that is there but not answering is not."""

from __future__ import annotations

import pytest

from vancetope_rag.domain.bridge import bridge_error
from vancetope_rag.errors import (
    ExtractorProgramMissingError,
    ExtractorUnavailableError,
    RagError,
)


@pytest.mark.parametrize(
    ("error", "vision", "code"),
    [
        (
            ExtractorProgramMissingError("OCR", "tesseract", "tesseract-ocr"),
            False,
            "DEPENDENCY_MISSING",
        ),
        (ExtractorProgramMissingError("Videos", "ffmpeg", "ffmpeg"), True, "DEPENDENCY_MISSING"),
        (ExtractorUnavailableError("cannot reach the vision model"), True, "VISION_UNAVAILABLE"),
        (ExtractorUnavailableError("no data for the language 'xqz'"), False, "UNREADABLE"),
    ],
)
def test_missing_programs_and_unavailable_backends(
    error: RagError, vision: bool, code: str
) -> None:
    named = bridge_error(error, vision_configured=vision)
    assert named.code.endswith(code) and named.cause == error.code
    assert named.message == error.message
