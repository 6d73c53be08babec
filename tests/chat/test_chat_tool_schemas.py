"""The ``rag_*`` tools' JSON schemas guide a model: every parameter described, each tool's
description says when to use it, and the schema matches the function it calls."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.tools import TOOL_NAMES, RagTools
from vancetope_rag.tools.schemas import TOOL_SPECS


@pytest.fixture
def tools(app: RagApp) -> dict[str, Any]:
    return {t.metadata.name: t for t in app.tools(T, P)}


def test_every_tool_has_a_spec(tools: dict[str, Any]) -> None:
    assert list(TOOL_SPECS) == list(TOOL_NAMES)
    assert set(tools) >= set(TOOL_NAMES)


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_every_parameter_is_described(tools: dict[str, Any], name: str) -> None:
    schema = tools[name].metadata.get_parameters_dict()
    assert schema["type"] == "object"
    for param, spec in schema["properties"].items():
        assert len(spec.get("description", "")) >= 15, f"{name}.{param} has no description"
    # the OpenAI-style function the model is given carries them too
    function = tools[name].metadata.to_openai_tool()["function"]
    assert function["name"] == name
    assert all(p.get("description") for p in function["parameters"]["properties"].values())


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_description_says_when_to_use_it(tools: dict[str, Any], name: str) -> None:
    description = tools[name].metadata.description
    assert "Use it" in description and len(description) >= 80
    assert name + "(" not in description  # not the raw Python signature


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_schema_matches_the_function(tools: dict[str, Any], name: str) -> None:
    signature = inspect.signature(getattr(RagTools, name))
    params = {n: p for n, p in signature.parameters.items() if n != "self"}
    schema = tools[name].metadata.get_parameters_dict()
    assert list(schema["properties"]) == list(params)
    required = [n for n, p in params.items() if p.default is inspect.Parameter.empty]
    assert sorted(schema.get("required", [])) == sorted(required)
    for param_name, param in params.items():
        if param.default is not inspect.Parameter.empty:
            assert schema["properties"][param_name].get("default") == param.default


def test_rag_query_schema_in_full(tools: dict[str, Any]) -> None:
    props = tools["rag_query"].metadata.get_parameters_dict()["properties"]
    assert props["ragId"]["type"] == "string" and "_documents" in props["ragId"]["description"]
    assert props["query"]["type"] == "string"
    # omitted: the project's rag.topK, so no fixed default is shown
    assert props["topK"] == {
        "anyOf": [{"maximum": 1000, "minimum": 1, "type": "integer"}, {"type": "null"}],
        "default": None,
        "description": "How many excerpts to return at most (1-1000); omit for the project's "
        "setting.",
        "title": "Topk",
    }
    assert "label" in tools["rag_query"].metadata.description
