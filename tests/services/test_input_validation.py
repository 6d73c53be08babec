"""Input validation: malformed input (lone surrogates, bad ids and RAG names, a JWT secret
without entropy, file names that are not UTF-8, runaway templates) is refused with a clear
error at every entry point that takes it. Each was accepted, or crashed with an internal
error, before."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from click.testing import CliRunner
from fastapi.testclient import TestClient

from fakes import P, T, call_tool
from vancetope_rag.api import ApiConfigError, create_api, issue_token
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli
from vancetope_rag.domain.block.context_block import render_context_block
from vancetope_rag.domain.records import Hit
from vancetope_rag.errors import InvalidInputError, RecipeError
from vancetope_rag.recipes import load_recipe

LONE = "before \udc80 after"
BAD_IDS = ["", "\x00", "a/b", "x" * 10_000, "..", " padded", "line\n", "a\\b", LONE]


def _counts(app: RagApp) -> tuple[int, int, int]:
    docs = len(app.documents.list_documents(T, P))
    rags = app.rags.list_rags(T, P)
    return docs, len(rags), sum(app.rags.chunk_count(r) for r in rags)


def test_a_lone_surrogate_is_invalid_input_everywhere(app: RagApp) -> None:
    app.bring(T, P)
    tools = app.tools(T, P)
    rag_id = call_tool(tools, "rag_create", name="notes")["ragId"]
    before = _counts(app)
    for name, args in (
        ("rag_add_text", {"ragId": rag_id, "text": LONE}),
        ("rag_add_text", {"ragId": rag_id, "text": "fine", "sourceRef": LONE}),
        ("rag_add_text", {"ragId": rag_id, "text": "fine", "metadata": {"k": LONE}}),
        ("rag_query", {"ragId": rag_id, "query": LONE}),
        ("rag_create", {"name": "other", "title": LONE}),
    ):
        result = call_tool(tools, name, **args)
        assert result["code"] == "INVALID_INPUT", (name, result)
        assert "surrogate" in result["error"]
    for path, content in (("documents/a.md", LONE), (f"documents/{LONE}.md", "fine")):
        with pytest.raises(InvalidInputError, match="surrogate"):
            app.document_saved(T, P, path, content)
    assert _counts(app) == before
    assert app.pre_turn(T, P, [LONE]) == []  # a turn goes on without a block


@pytest.mark.parametrize("bad", [None, 42, *BAD_IDS], ids=lambda v: repr(v)[:24])
def test_bad_ids_are_refused_by_every_host_method(app: RagApp, bad: object) -> None:
    calls = [
        lambda t, p: app.bring(t, p),
        lambda t, p: app.suspend(t, p),
        lambda t, p: app.close_project(t, p),
        lambda t, p: app.document_saved(t, p, "documents/a.md", "text"),
        lambda t, p: app.document_deleted(t, p, "documents/a.md"),
        lambda t, p: app.pre_turn(t, p, ["hello"]),
        lambda t, p: app.tools(t, p),
        lambda t, p: app.settings.set(t, p, "rag.topK", 3),
    ]
    for call in calls:
        for tenant, project in ((bad, P), (T, bad)):
            if project is None and call is calls[-1]:
                continue  # settings: project None is the tenant scope
            with pytest.raises(InvalidInputError):
                call(tenant, project)  # type: ignore[arg-type]
    assert app.lifecycle.get_project(T, P) is None
    assert app.store.control.list_projects() == []


def test_project_empty_no_longer_shares_the_tenant_settings_key(app: RagApp) -> None:
    app.settings.set("acme", "p1", "rag.topK", 4)
    with pytest.raises(InvalidInputError):
        app.settings.set("acme", "", "rag.topK", 9)
    with pytest.raises(InvalidInputError):
        app.settings.effective("acme", "")
    assert app.settings.effective("acme", "p1")["rag.topK"] == 4
    assert app.store.control.get_settings("acme", None) == {}


def test_document_saved_refuses_a_bad_override_before_creating_anything(app: RagApp) -> None:
    app.bring(T, P)
    with pytest.raises(InvalidInputError, match="'auto', 'on' or 'off'"):
        app.document_saved(T, P, "documents/a.md", "text", rag_enabled="maybe")
    assert app.documents.list_documents(T, P) == []


@pytest.mark.parametrize("name", ["notes\n", "notes\r\n", "\nnotes", "no\ntes"])
def test_rag_names_with_a_newline_are_refused(app: RagApp, name: str) -> None:
    app.bring(T, P)
    result = call_tool(app.tools(T, P), "rag_create", name=name)
    assert result["code"] == "INVALID_INPUT" and "invalid RAG name" in result["error"]
    assert [r.name for r in app.rags.list_rags(T, P)] == ["_documents"]


@pytest.mark.parametrize("bad", ["", "a/b", "x" * 300, "tab\there"], ids=lambda v: repr(v)[:24])
def test_the_cli_and_the_rest_api_apply_the_same_id_rule(
    tmp_path: Path,
    make_app,
    bad: str,  # type: ignore[no-untyped-def]
) -> None:
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    result = CliRunner().invoke(cli, ["--store", store, "--tenant", bad, "status"])
    assert result.exit_code == 2 and "must be 1-200 characters" in result.output
    secret = "rest-secret-0123456789-abcdefghijklmnopq"
    app = make_app(config={"jwt_secret": secret})
    token = issue_token(secret, subject="s", tenant=T, projects="*")
    with TestClient(create_api(app)) as client:
        response = client.get(
            f"/brain/{T}/projects/{quote(bad, safe='') or '%20'}/rag/status",
            headers={"Authorization": f"Bearer {token}"},
        )
    assert response.status_code in (400, 404), response.text
    assert response.json()["code"] in ("INVALID_INPUT", "NOT_FOUND")


@pytest.mark.parametrize(
    "secret",
    [" " * 32, " " * 64, "a" * 40, "ab" * 20, "\t" * 40, "  short-but-padded-secret-value  "],
    ids=repr,
)
def test_a_jwt_secret_without_entropy_does_not_start_the_server(
    make_app,
    secret: str,  # type: ignore[no-untyped-def]
) -> None:
    app = make_app(config={"jwt_secret": secret})
    with pytest.raises(ApiConfigError, match="VANCETOPE_RAG_JWT_SECRET"):
        create_api(app)


def test_import_skips_a_file_whose_name_is_not_utf8_and_goes_on(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("first file")
    with open(os.path.join(os.fsencode(docs), b"caf\xe9.md"), "wb") as fh:
        fh.write(b"latin-1 name")
    (docs / "z.md").write_text("last file")
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    result = CliRunner().invoke(
        cli, ["--store", store, "--tenant", T, "--project", P, "import", str(docs)]
    )
    assert result.exit_code == 0, result.output
    assert "2 created" in result.stdout and "1 skipped" in result.stdout
    assert "caf\\xe9.md: the file name is not valid UTF-8" in result.stderr


NESTED = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
SLOW = (
    "{% for a in hits %}{% for b in a.text %}{% for c in a.text %}{% endfor %}{% endfor %}"
    "{% endfor %}"
)


def test_a_recipe_with_a_runaway_template_is_refused_at_load(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "r", "params": {"rag": {"template": NESTED}}}))
    started = time.monotonic()
    with pytest.raises(RecipeError, match="too costly to render"):
        load_recipe(recipe)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("template", [NESTED, SLOW, "{{ 'x' * 10**9 }}", "{{ 'x'|center(10**8) }}"])
def test_a_runaway_template_fails_its_render_cleanly(template: str) -> None:
    hits = [Hit(0.9, "word " * 1500, "s1", path="documents/a.md")]
    with pytest.raises(InvalidInputError, match="too costly to render"):
        render_context_block(hits, template)
