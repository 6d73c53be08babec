"""Recipe YAML files to typed RAG parameters (spec §5, "Recipe Params").

A recipe is a YAML mapping with a ``name`` and engine parameters; this package reads only
``params.rag`` (``engineParams.rag`` is accepted as an alias) and ignores everything else,
which belongs to the engine. Every error is a :class:`RecipeError` naming the file and the
dotted key.

The package ships its example recipes (``bundled_recipes/``, package data, so they are in the
wheel): :func:`load_recipe` takes one by name (``"docs-assistant"``) as well as a file path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from vancetope_rag.domain.block.context_block import check_template_cost, compile_template
from vancetope_rag.domain.retrieval.calibration import AUTO, MinScore, parse_min_score
from vancetope_rag.domain.retrieval.relevance import RelevanceCut, parse_relevance_cut
from vancetope_rag.domain.settings.cascade import AutoInject, parse_auto_inject
from vancetope_rag.domain.settings.registry import SETTINGS
from vancetope_rag.errors import InvalidInputError, RecipeError, SettingError

__all__ = ["RagParams", "Recipe", "bundled_recipe_names", "load_recipe", "parse_recipe"]

#: ``source`` of a recipe that was not read from a file.
STRING_SOURCE = "<string>"

#: The recipes shipped inside the package (``<name>.yaml``), loadable by name.
_BUNDLED_DIR = "bundled_recipes"
_SUFFIXES = (".yaml", ".yml")

_RAG_KEYS = (
    "autoInject",
    "minScore",
    "topK",
    "maxPerDocument",
    "retrievalMode",
    "maxTokens",
    "rerank",
    "relevanceCut",
    "template",
    "templateFile",
)


@dataclass(frozen=True, slots=True)
class RagParams:
    """A recipe's ``params.rag``; ``None`` everywhere means "not set by the recipe"."""

    auto_inject: AutoInject | None = None
    #: A cosine or ``auto`` (the RAG's calibrated threshold).
    min_score: MinScore | None = None
    top_k: int | None = None
    max_per_document: int | None = None
    #: ``dense`` or ``hybrid`` (``rag.retrieval.mode`` decides when None).
    retrieval_mode: str | None = None
    #: Token budget of the ``<rag-context>`` block (``rag.autoInject.maxTokens`` when None).
    max_tokens: int | None = None
    #: The block's relevance cut: ``auto``, ``off`` or a fixed gap
    #: (``rag.autoInject.relevanceCut`` when None).
    relevance_cut: RelevanceCut | None = None
    #: Jinja2 source of the ``<rag-context>`` template (from ``template`` or ``templateFile``).
    template: str | None = None
    #: ``false`` turns the rerank stage off for the recipe's turns (``ai.rerank.provider``
    #: decides whether there is one; ``true`` or None: use it when set).
    rerank: bool | None = None


@dataclass(frozen=True, slots=True)
class Recipe:
    """A parsed recipe: its identity and RAG parameters."""

    name: str
    description: str | None
    rag: RagParams
    #: The file the recipe came from, or ``"<string>"``.
    source: str


def bundled_recipe_names() -> list[str]:
    """The names :func:`load_recipe` accepts for the recipes shipped with the package."""
    folder = resources.files("vancetope_rag") / _BUNDLED_DIR
    return sorted(
        entry.name.rsplit(".", 1)[0] for entry in folder.iterdir() if entry.name.endswith(_SUFFIXES)
    )


def is_recipe_path(recipe: str | os.PathLike[str]) -> bool:
    """Is ``recipe`` a file path (a path object, a string with a ``/`` or ending in ``.yaml``
    or ``.yml``) rather than the name of a bundled recipe?"""
    if not isinstance(recipe, str):
        return True
    return "/" in recipe or os.sep in recipe or recipe.endswith(_SUFFIXES)


def _bundled_path(name: str) -> Path:
    names = bundled_recipe_names()
    if name not in names:
        raise RecipeError(
            f"{name!r}: no bundled recipe of that name (bundled: {', '.join(names)}); "
            "a recipe file is named by a path with a '/' or ending in .yaml or .yml"
        )
    return Path(str(resources.files("vancetope_rag") / _BUNDLED_DIR / f"{name}.yaml"))


def load_recipe(recipe: str | os.PathLike[str]) -> Recipe:
    """Read and validate a recipe: a bundled one by name, or a file.

    Args:
        recipe: A bundled recipe's name (``"docs-assistant"``; see
            :func:`bundled_recipe_names`), or the path of a YAML file: a path object, or a
            string with a ``/`` or ending in ``.yaml``/``.yml``. A ``templateFile`` in it is
            resolved relative to the file's directory.

    Returns:
        The parsed recipe, with ``source`` set to the file it was read from.

    Raises:
        RecipeError: No bundled recipe has that name, the file is missing, unreadable or not
            valid YAML, or a value is invalid.
    """
    source = os.fspath(recipe)
    if "\0" in source:
        raise RecipeError(f"{source!r}: a recipe path cannot contain a NUL character")
    if not is_recipe_path(recipe):
        source = os.fspath(_bundled_path(source))
    data = read_yaml(source, "recipe file", RecipeError)
    return parse_recipe(data, source=source, base_dir=Path(source).parent)


def read_yaml(source: str, what: str, error: Callable[[str], Exception]) -> object:
    """The YAML (or JSON) document in the file ``source``, ``what`` named in messages;
    ``error(message)`` when the file is missing, unreadable, not UTF-8 or not YAML."""
    try:
        text = Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{source}: {what} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{source}: cannot read {what}: {exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{source}: invalid YAML: {exc}") from None


def parse_recipe(
    data: object,
    *,
    source: str = STRING_SOURCE,
    base_dir: str | os.PathLike[str] | None = None,
) -> Recipe:
    """Validate already-loaded recipe data (e.g. the result of ``yaml.safe_load``).

    Args:
        data: The recipe mapping.
        source: Where the data came from, used in error messages and kept on the recipe.
        base_dir: Directory that ``templateFile`` is relative to; without it a
            ``templateFile`` is an error.

    Returns:
        The parsed recipe.

    Raises:
        RecipeError: The data is not a recipe or a value is invalid; the message names
            ``source`` and the dotted key.
    """
    if not isinstance(data, Mapping):
        raise RecipeError(f"{source}: a recipe must be a YAML mapping, got {_kind(data)}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise RecipeError(f"{source}: name must be a non-empty string, got {name!r}")
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        raise RecipeError(f"{source}: description must be a string, got {description!r}")

    if "params" in data and "engineParams" in data:
        raise RecipeError(f"{source}: use either params or engineParams, not both")
    params_key = "engineParams" if "engineParams" in data else "params"
    params = _mapping(data.get(params_key), source, params_key)
    rag_key = f"{params_key}.rag"
    rag = _mapping(params.get("rag"), source, rag_key)
    return Recipe(
        name=name.strip(),
        description=description,
        rag=_parse_rag(rag, source, rag_key, base_dir),
        source=source,
    )


def _kind(value: object) -> str:
    return "nothing" if value is None else f"a {type(value).__name__}"


def _mapping(value: object, source: str, key: str) -> Mapping[object, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RecipeError(f"{source}: {key} must be a mapping, got {_kind(value)}")
    return value


def _parse_rag(
    rag: Mapping[object, object],
    source: str,
    prefix: str,
    base_dir: str | os.PathLike[str] | None,
) -> RagParams:
    unknown = [key for key in rag if key not in _RAG_KEYS]
    if unknown:
        raise RecipeError(
            f"{source}: {prefix}.{unknown[0]} is not a known key; "
            f"accepted keys: {', '.join(_RAG_KEYS)}"
        )

    def where(key: str) -> str:
        return f"{source}: {prefix}.{key}"

    try:
        auto_inject = parse_auto_inject(rag.get("autoInject"), where=where("autoInject"))
    except SettingError as exc:
        raise RecipeError(exc.message) from None

    template = _template(rag, where, base_dir)
    return RagParams(
        auto_inject=auto_inject,
        min_score=_min_score(rag.get("minScore"), where("minScore")),
        top_k=_integer(rag.get("topK"), "rag.topK", where("topK")),
        max_per_document=_integer(
            rag.get("maxPerDocument"), "rag.maxPerDocument", where("maxPerDocument")
        ),
        retrieval_mode=_choice(
            rag.get("retrievalMode"), "rag.retrieval.mode", where("retrievalMode")
        ),
        max_tokens=_integer(rag.get("maxTokens"), "rag.autoInject.maxTokens", where("maxTokens")),
        relevance_cut=_relevance_cut(rag.get("relevanceCut"), where("relevanceCut")),
        template=template,
        rerank=_flag(rag.get("rerank"), where("rerank")),
    )


def _flag(value: object, where: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise RecipeError(f"{where} must be true or false, got {value!r}")


def _integer(value: object, setting: str, where: str) -> int | None:
    # Bounds come from the cascade registry so a recipe and a setting agree on what is valid.
    low, high = int(SETTINGS[setting].minimum or 0), int(SETTINGS[setting].maximum or 0)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    raise RecipeError(f"{where} must be an integer from {low} to {high}, got {value!r}")


def _choice(value: object, setting: str, where: str) -> str | None:
    choices = SETTINGS[setting].choices
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    raise RecipeError(f"{where} must be one of {', '.join(choices)}, got {value!r}")


def _min_score(value: object, where: str) -> MinScore | None:
    problem = RecipeError(f"{where} must be auto or a number from -1 to 1, got {value!r}")
    # a YAML number or auto; a quoted number ("0.4") is refused, like a quoted topK
    if isinstance(value, str) and value.strip().lower() != AUTO:
        raise problem
    try:
        return parse_min_score(value, where)
    except InvalidInputError:
        raise problem from None


def _relevance_cut(value: object, where: str) -> RelevanceCut | None:
    try:
        return parse_relevance_cut(value, where)
    except InvalidInputError as exc:
        raise RecipeError(exc.message) from None


def _template(
    rag: Mapping[object, object],
    where: Callable[[str], str],
    base_dir: str | os.PathLike[str] | None,
) -> str | None:
    inline, file_name = rag.get("template"), rag.get("templateFile")
    if inline is not None and file_name is not None:
        raise RecipeError(f"{where('template')} and templateFile cannot both be set")
    if inline is not None:
        key, text = "template", inline
        if not isinstance(text, str) or not text.strip():
            raise RecipeError(f"{where(key)} must be a non-empty string, got {text!r}")
    elif file_name is not None:
        key, text = "templateFile", _read_template(file_name, where("templateFile"), base_dir)
    else:
        return None
    try:
        compile_template(text)
        check_template_cost(text)
    except InvalidInputError as exc:
        raise RecipeError(f"{where(key)}: {exc.message}") from None
    return text


def _read_template(file_name: object, where: str, base_dir: str | os.PathLike[str] | None) -> str:
    if not isinstance(file_name, str) or not file_name.strip():
        raise RecipeError(f"{where} must be a relative file path, got {file_name!r}")
    if base_dir is None:
        raise RecipeError(f"{where} needs a recipe loaded from a file (use load_recipe)")
    if "\0" in file_name:
        raise RecipeError(f"{where} cannot contain a NUL character, got {file_name!r}")
    root = Path(base_dir).resolve()
    path = (root / file_name).resolve()
    # Recipes can be user-supplied: keep templateFile inside the recipe's directory tree.
    if Path(file_name).is_absolute() or not path.is_relative_to(root):
        raise RecipeError(
            f"{where} must be a path inside the recipe's directory, got {file_name!r}"
        )
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError(f"{where}: template file {file_name!r} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"{where}: cannot read template file {file_name!r}: {exc}") from None
