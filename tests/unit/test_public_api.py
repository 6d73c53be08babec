"""The public API: the names ``vancetope_rag`` exports, and the errors' homes, names and codes."""

from __future__ import annotations

import pytest

from vancetope_rag import errors
from vancetope_rag.api import auth
from vancetope_rag.extraction import registry, types

#: The codes the CLI, the REST API and the tools answer: stable across releases.
EXTRACTION_CODES = {
    errors.ExtractionError: "EXTRACTION_FAILED",
    errors.ExtractorDependencyMissingError: "EXTRACT_DEPENDENCY_MISSING",
    errors.NoTextLayerError: "EXTRACT_NO_TEXT_LAYER",
    errors.NoTextError: "EXTRACT_NO_TEXT",
    errors.ExtractionTimeoutError: "EXTRACT_TIMEOUT",
    errors.UnsupportedTypeError: "EXTRACT_UNSUPPORTED_TYPE",
    errors.ApiConfigError: "API_CONFIG",
}


@pytest.mark.parametrize(("cls", "code"), EXTRACTION_CODES.items(), ids=lambda v: str(v))
def test_error_codes_are_unchanged(cls: type[errors.RagError], code: str) -> None:
    assert cls.code == code
    assert cls.__module__ == "vancetope_rag.errors"
    assert cls.__name__.endswith("Error")


def test_old_names_still_import_as_the_same_classes() -> None:
    assert types.ExtractorDependencyMissing is errors.ExtractorDependencyMissingError
    assert registry.ExtractorDependencyMissing is errors.ExtractorDependencyMissingError
    assert auth.ApiConfigError is errors.ApiConfigError
    for name in (
        "NoTextLayerError",
        "NoTextError",
        "ExtractionTimeoutError",
        "UnsupportedTypeError",
    ):
        assert getattr(registry, name) is getattr(errors, name)
        assert getattr(types, name) is getattr(errors, name)


def test_a_missing_extractor_dependency_is_both_kinds_of_error() -> None:
    exc = errors.ExtractorDependencyMissingError("PDF", "pdf")
    assert isinstance(exc, errors.ExtractionError)
    assert isinstance(exc, errors.MissingDependencyError)
    assert exc.extra == "pdf"
    again = types.error_from_code(exc.code, exc.message, exc.extra)
    assert type(again) is errors.ExtractorDependencyMissingError
    assert again.extra == "pdf"
