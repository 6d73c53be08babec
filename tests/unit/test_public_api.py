"""The public API: the names ``vancetope_rag`` exports, and the errors' homes, names and codes."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import vancetope_rag
from vancetope_rag import errors
from vancetope_rag.api import auth
from vancetope_rag.extraction import registry, types

SRC = Path(vancetope_rag.__file__).parent
INIT = SRC / "__init__.py"

#: The codes the CLI, the REST API and the tools answer: stable across releases.
EXTRACTION_CODES = {
    errors.ExtractionError: "EXTRACTION_FAILED",
    errors.ExtractorDependencyMissingError: "EXTRACT_DEPENDENCY_MISSING",
    errors.ExtractorProgramMissingError: "EXTRACT_PROGRAM_MISSING",
    errors.NoTextLayerError: "EXTRACT_NO_TEXT_LAYER",
    errors.NoTextError: "EXTRACT_NO_TEXT",
    errors.ExtractionTimeoutError: "EXTRACT_TIMEOUT",
    errors.ExtractorUnavailableError: "EXTRACT_BACKEND_UNAVAILABLE",
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


def _exports_table() -> tuple[ast.Module, dict[str, str]]:
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "_EXPORTS":
            assert node.value is not None
            return tree, ast.literal_eval(node.value)
    raise AssertionError("no _EXPORTS table in vancetope_rag/__init__.py")


def test_all_is_the_exports_table_and_every_name_resolves() -> None:
    _, table = _exports_table()
    assert sorted(vancetope_rag.__all__) == sorted(table) == sorted(vancetope_rag._EXPORTS)
    for name in vancetope_rag.__all__:
        value = getattr(vancetope_rag, name)
        assert getattr(importlib.import_module(table[name]), name) is value, name


def test_the_type_checking_block_imports_exactly_the_exports() -> None:
    tree, table = _exports_table()
    blocks = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1
    imported: dict[str, str] = {}
    for stmt in blocks[0].body:
        assert isinstance(stmt, ast.ImportFrom), ast.dump(stmt)
        assert stmt.module is not None
        for alias in stmt.names:
            # ``X as X``: an explicit re-export for type checkers, never a rename.
            assert alias.asname in (None, alias.name), alias.name
            assert alias.name not in imported, f"{alias.name} imported twice"
            imported[alias.name] = stmt.module
    assert imported == table


def _import_every_module() -> None:
    for info in pkgutil.walk_packages(vancetope_rag.__path__, "vancetope_rag."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except errors.MissingDependencyError:  # an optional extra that is not installed
            continue


def _subclasses(cls: type[errors.RagError]) -> set[type[errors.RagError]]:
    out: set[type[errors.RagError]] = set()
    for sub in cls.__subclasses__():
        out |= {sub} | _subclasses(sub)
    return out


def _raised_names() -> set[str]:
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name):
                names.add(target.id)
            elif isinstance(target, ast.Attribute):
                names.add(target.attr)
    return names


def test_every_rag_error_raised_or_defined_in_errors_is_exported() -> None:
    _import_every_module()
    raised = _raised_names()
    subclasses = {
        cls for cls in _subclasses(errors.RagError) if cls.__module__.split(".")[0] == SRC.name
    }
    must = {
        cls for cls in subclasses if cls.__name__ in raised or cls.__module__ == errors.__name__
    }
    # The check sees the errors it should: the store's, the extraction's, the REST API's.
    assert {errors.StoreCorruptError, errors.NoTextError, errors.ApiConfigError} <= must
    missing = sorted(
        cls.__name__ for cls in must if getattr(vancetope_rag, cls.__name__, None) is not cls
    )
    assert not missing, f"raised but not exported from vancetope_rag: {missing}"
