"""Property: every public entry point, fed arbitrary values, answers or refuses cleanly.

Arbitrary unicode (lone surrogates, controls, bidi marks), ids, sizes and shapes go to the
``rag_*`` tools, the host's ``document_saved`` and ``pre_turn``, the CLI's ``import``,
``query`` and ``context`` and the REST routes. For every call:

* no uncaught exception and no 5xx;
* a refusal is a ``RagError`` with a code (tools: a ``{"error", "code"}`` result that is not
  ``INTERNAL``; CLI: exit 1 or 2 with ``error:`` on stderr and no traceback; REST: the JSON
  error shape);
* a refused call changes no row: documents, chunks, RAGs, settings and projects are counted
  in the store before and after.

The read paths (``pre_turn``, the ``rag_query`` tool, the CLI's ``query`` and ``context``, the
REST routes) run while a writer thread (:func:`churn`) keeps re-saving and re-indexing a
document of the project they read, so a query whose reads straddle a ``replace_source`` must
still answer; their row comparisons leave out what that writer owns. The write paths run
without it: their "a refusal changes no row" check needs a quiet project.

Runs derandomized (the same examples in every run, so CI is reproducible), a few hundred
examples per entry point, on the ``hashing`` provider; the whole module takes well under a
minute.
"""

from __future__ import annotations

import json
import os
import string
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import DOCS, P, T
from vancetope_rag.api import create_api, issue_token
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli
from vancetope_rag.config import EngineConfig
from vancetope_rag.errors import RagError
from vancetope_rag.recipes import RagParams
from vancetope_rag.store.sqlite.db import SqliteDatabase
from vancetope_rag.tools import TOOL_NAMES

SECRET = "property-secret-0123456789abcdefghijk"
LIMIT = 20_000  # the text limit of these apps: large inputs cross it without costing much


def _config(**extra: Any) -> dict[str, Any]:
    return {"max_text_chars": LIMIT, "jwt_secret": SECRET, **extra}


def run(n: int) -> Any:
    return settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )


# -- strategies ------------------------------------------------------------------------------

ODD_CHARS = st.characters(categories=["Cs", "Cc", "Cf", "Zl", "Zp", "Co"])
SPECIAL = st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "..",
        ".",
        "/",
        "a/b",
        "a\\b",
        "_documents",
        "notes",
        "\n",
        "ON",
        "documents/zebra.md",
        "documents/",
        "documents/../x",
        "%00",
        "\u202e",
        "\udc80",
        "x" * 10_000,
        "é" * 300,
        "<rag-context>",
        "{{ 7 * 7 }}",
        "'; DROP TABLE documents; --",
    ]
)
TEXT = st.one_of(
    st.text(max_size=40),
    st.text(ODD_CHARS, max_size=10),
    st.text(st.one_of(st.characters(), ODD_CHARS), max_size=60),
    SPECIAL,
    st.integers(0, 3).map(lambda k: "word " * (LIMIT // 5 - 1 + k)),  # around the limit
)
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), TEXT)
ANY = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)


def mostly(real: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``real`` in about 4 of 5 examples, else ``odd``. (``st.one_of`` with the real value
    repeated does not weight it: Hypothesis drew real ids in ~1 of 9 examples.)"""
    return st.integers(0, 9).flatmap(lambda i: real if i < 8 else odd)


#: Mostly the real ids, so that the other arguments are what gets refused.
IDS = mostly(st.just(T), TEXT | SCALAR)
PIDS = mostly(st.just(P), TEXT | SCALAR)


# -- the store's rows --------------------------------------------------------------------------


#: The document the writer thread (:func:`churn`) re-saves and re-indexes, in project T/P.
CHURN_PATH = "documents/churn.md"
CHURN_TEXTS = (
    "Zebra herds churn through the savanna cluster while the portal books vacation days.",
    "Churned notes: zebra stripes, cluster pods and leases, thirty holiday days a year.",
)


def rows(app: RagApp, *, skip: tuple[str, ...] = ()) -> dict[str, object]:
    """Row counts of every table a call could write, and what the rows hold (ids, paths,
    versions, overrides, values): an update in place counts as a change too.

    ``skip`` leaves out rows a concurrent writer owns: ``"churn"`` the churned document and
    its chunks, ``"project-chunks"`` every chunk of project T/P (once all of its documents
    are queued, the writer's indexer ticks re-index them all)."""
    db = getattr(app.store.control, "db", None)
    assert isinstance(db, SqliteDatabase)
    doc_where, chunk_where, params_d, params_c = "1", "1", (), ()
    if "churn" in skip:
        doc_where = "path IS NOT ?"
        chunk_where = "path IS NOT ?"
        params_d = params_c = (CHURN_PATH,)
    if "project-chunks" in skip:
        chunk_where = "NOT (tenant_id = ? AND project_id = ?)"
        params_c = (T, P)
    where = {"documents": (doc_where, params_d), "chunks": (chunk_where, params_c)}
    tables = ("documents", "chunks", "rags", "settings", "projects")
    seen: dict[str, object] = {
        t: int(
            db.query(
                f"SELECT count(*) FROM {t} WHERE {where.get(t, ('1', ()))[0]}",
                where.get(t, ("1", ()))[1],
            )[0][0]
        )
        for t in tables
    }
    seen["documents*"] = hash(
        tuple(
            db.query(
                "SELECT id, path, content_hash, rag_enabled, rag_version, mime_type FROM documents "
                f"WHERE {doc_where} ORDER BY id",
                params_d,
            )
        )
    )
    seen["settings*"] = hash(tuple(db.query("SELECT * FROM settings ORDER BY 1, 2, 3")))
    seen["rags*"] = hash(tuple(db.query("SELECT id, name, title FROM rags ORDER BY id")))
    seen["chunks*"] = db.query(f"SELECT max(rowid) FROM chunks WHERE {chunk_where}", params_c)[0][0]
    seen["projects*"] = hash(tuple(db.query("SELECT * FROM projects ORDER BY 1, 2")))
    return seen


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RagApp, Path]]:
    """One app for the module: project t1/p1 with three indexed documents, a manual RAG
    'notes', and a workspace holding two files."""
    tmp = tmp_path_factory.mktemp("property")
    workspace = tmp / "ws" / T / P
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "a.md").write_text("Workspace zebra notes.")
    (workspace / "big.txt").write_text("word " * LIMIT)
    config = EngineConfig(
        store=f"sqlite:///{tmp / 'rag.db'}",
        node_id="property-node",
        indexer_initial_delay_s=0.0,
        retry_backoff_s=0.0,
        workspaces_dir=str(tmp / "ws"),
        **_config(),
    )
    app = RagApp.open(config)
    app.settings.set(T, None, "ai.embedding.provider", "hashing")
    app.settings.set(T, P, "rag.autoInject.enabled", "ON")
    app.bring(T, P)
    for path, text in DOCS.items():
        app.document_saved(T, P, path, text)
    app.scheduler.run_until_idle(timeout_s=30)
    app.rags.create(T, P, "notes")
    yield app, tmp
    app.close()


#: Writes the writer thread must have made during each read-path test.
MIN_WRITES = 5
#: Hybrid reads of T/P's chunks through the app's store that a test's examples must have made
#: (most of them reach the store). The CLI opens a store of its own, and few REST examples
#: are queries: theirs are not counted.
MIN_READS = {
    "test_rag_query_tool_answers_while_chunks_are_replaced": 60,
    "test_pre_turn_adds_a_block_or_nothing": 80,
}


@dataclass
class Writer:
    """A thread re-saving :data:`CHURN_PATH` with alternating texts and ticking the indexer,
    so the document's chunks are replaced again and again while the test queries."""

    app: RagApp
    stop: threading.Event = field(default_factory=threading.Event)
    writes: int = 0
    errors: list[BaseException] = field(default_factory=list)
    #: Hybrid store reads of T/P made by the test, and those that a write overlapped.
    reads: int = 0
    overlapped: int = 0

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.app.document_saved(T, P, CHURN_PATH, CHURN_TEXTS[self.writes % 2])
                while self.app.scheduler.tick().claimed and not self.stop.is_set():
                    pass
                self.writes += 1
        except BaseException as exc:  # recorded, and failed on by the fixture
            self.errors.append(exc)


@pytest.fixture
def churn(world: tuple[RagApp, Path], request: pytest.FixtureRequest) -> Iterator[Writer]:
    """A writer thread replacing the chunks of a document of T/P for the whole test (every
    Hypothesis example); stopped and joined at the end, its errors and write count checked."""
    app, _ = world
    # Index what earlier tests left queued first: only the churned document changes after.
    while app.scheduler.tick().claimed:
        pass
    writer = Writer(app)
    chunks = app.store.chunks
    hybrid_query = chunks.hybrid_query

    def counted(scope: Any, *args: Any, **kwargs: Any) -> Any:
        # what shows that the examples reach the store's reads while the writer writes
        before = writer.writes
        try:
            return hybrid_query(scope, *args, **kwargs)
        finally:
            if (scope.tenant_id, scope.project_id) == (T, P):
                writer.reads += 1
                writer.overlapped += writer.writes != before

    chunks.hybrid_query = counted  # type: ignore[method-assign]
    thread = threading.Thread(target=writer.run, name="churn-writer", daemon=True)
    thread.start()
    try:
        yield writer
    finally:
        writer.stop.set()
        thread.join(timeout=30)
        del chunks.hybrid_query
    assert not thread.is_alive(), "the writer thread did not stop"
    assert not writer.errors, writer.errors
    assert writer.writes >= MIN_WRITES, writer.writes
    wanted = MIN_READS.get(request.node.originalname, 0)
    assert writer.reads >= wanted, (writer.reads, wanted)


# -- tools --------------------------------------------------------------------------------------

TOOL_ARGS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "rag_create": {
        "name": TEXT,
        "title": SCALAR,
        "description": SCALAR,
        "chunkSize": SCALAR,
        "chunkOverlap": SCALAR,
    },
    "rag_add_text": {
        "ragId": st.sampled_from(["notes", "_documents"]) | TEXT,
        "text": TEXT,
        "sourceRef": SCALAR,
        "metadata": ANY,
    },
    "rag_add_workspace_file": {
        "ragId": st.sampled_from(["notes"]) | TEXT,
        "path": st.sampled_from(["notes/a.md", "big.txt"]) | TEXT,
        "sourceRef": SCALAR,
    },
    "rag_add_document": {"ragId": st.sampled_from(["notes"]) | TEXT, "documentId": ANY},
    "rag_add_path": {
        "ragId": st.sampled_from(["notes"]) | TEXT,
        "pathPrefix": st.sampled_from(["documents/"]) | TEXT,
    },
    "rag_query": {
        "ragId": st.sampled_from(["notes", "_documents"]) | TEXT,
        "query": TEXT,
        "topK": SCALAR,
    },
    "rag_delete": {"ragId": TEXT.filter(lambda v: v not in ("notes", "_documents"))},
    "rag_list": {"projectId": SCALAR},
    "files_visualize": {
        "filePath": st.sampled_from(["notes/a.md", "big.txt", ".env"]) | TEXT,
        "documentId": ANY,
        "offset": SCALAR,
        "pages": st.sampled_from(["1-2", "3"]) | TEXT,
        "vision": SCALAR,
    },
}


@st.composite
def tool_calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    name = draw(st.sampled_from(TOOL_NAMES))
    args = {
        k: draw(v)
        for k, v in TOOL_ARGS[name].items()
        if draw(st.booleans())
        or k in ("ragId", "text", "query", "path", "name", "documentId", "pathPrefix")
    }
    return name, args


# No writer here: the write tools' "a refusal changes no row" check needs a quiet project
# (the read-only rag_query tool gets its own test under writes below).
@run(300)
@given(call=tool_calls())
def test_tools_answer_or_refuse_with_a_code(
    world: tuple[RagApp, Path], call: tuple[str, dict[str, Any]]
) -> None:
    app, _ = world
    name, args = call
    tool = next(t for t in app.tools(T, P) if t.metadata.name == name)
    before = rows(app)
    output = tool.call(**args)
    result = json.loads(output.content)
    assert output.is_error == (isinstance(result, dict) and "error" in result), result
    if output.is_error:
        _check_error(result)
        assert rows(app) == before, (name, result)


def _check_error(result: dict[str, Any]) -> None:
    """An error result: a message and a code; a bad argument also names its parameter."""
    named = {"parameter"} if result.get("code") == "INVALID_ARGUMENT" else set()
    assert set(result) == {"error", "code"} | named, result
    assert result["code"] != "INTERNAL", result


#: Mostly real RAGs, queries that match the churned document and valid sizes, so that most
#: examples reach the store's dense and lexical reads while the writer replaces chunks.
QUERY_WORDS = st.sampled_from(["zebra churn", "cluster pods leases", "holiday portal zebra"])


@run(150)
@given(
    args=st.fixed_dictionaries(
        {
            "ragId": mostly(st.sampled_from(["_documents", "_documents", "notes"]), TEXT),
            "query": mostly(QUERY_WORDS, TEXT),
        }
    ),
    top_k=mostly(st.none() | st.integers(1, 50), SCALAR),
)
def test_rag_query_tool_answers_while_chunks_are_replaced(
    world: tuple[RagApp, Path], churn: Writer, args: dict[str, Any], top_k: Any
) -> None:
    app, _ = world
    tool = next(t for t in app.tools(T, P) if t.metadata.name == "rag_query")
    if top_k is not None:
        args = {**args, "topK": top_k}
    before = rows(app, skip=("churn",))
    output = tool.call(**args)
    result = json.loads(output.content)
    if output.is_error:
        _check_error(result)
    assert rows(app, skip=("churn",)) == before  # a query never writes


# -- host hooks ---------------------------------------------------------------------------------


@run(300)
@given(
    tenant=IDS,
    project=PIDS,
    path=st.one_of(
        st.integers(0, 10**6).map(lambda n: f"documents/new-{n}.md"),  # a new document
        st.sampled_from(["documents/zebra.md", "notes/x.md"]),
        TEXT,
    ),
    content=TEXT | SCALAR,
    mime=st.none() | st.sampled_from(["text/markdown", "image/png"]) | TEXT | SCALAR,
    override=st.none() | st.sampled_from(["auto", "on", "off", "maybe"]) | SCALAR,
)
def test_document_saved_stores_or_refuses_cleanly(
    world: tuple[RagApp, Path],
    tenant: Any,
    project: Any,
    path: Any,
    content: Any,
    mime: Any,
    override: Any,
) -> None:
    app, _ = world
    before = rows(app)
    try:
        doc = app.document_saved(
            tenant, project, path, content, mime_type=mime, rag_enabled=override
        )
    except RagError as exc:
        assert exc.code and exc.message
        assert rows(app) == before, exc.message
        return
    assert doc is not None and doc.content == content


@run(300)
@given(
    tenant=IDS,
    project=PIDS,
    messages=mostly(
        st.lists(
            mostly(st.sampled_from(["zebra churn?", "cluster leases"]), TEXT | SCALAR),
            min_size=1,
            max_size=3,
        ),
        SCALAR | st.lists(TEXT, max_size=3),
    ),
    recipe=st.none()
    | st.builds(
        RagParams, top_k=st.none() | st.integers(1, 100), min_score=st.none() | st.floats(-1, 1)
    )
    | SCALAR,
)
def test_pre_turn_adds_a_block_or_nothing(
    world: tuple[RagApp, Path],
    churn: Writer,
    tenant: Any,
    project: Any,
    messages: Any,
    recipe: Any,
) -> None:
    app, _ = world
    before = rows(app, skip=("churn",))
    try:
        blocks = app.pre_turn(tenant, project, messages, recipe)
    except RagError as exc:
        assert exc.code and exc.message
        return
    finally:
        assert rows(app, skip=("churn",)) == before  # a turn never writes
    assert isinstance(blocks, list) and all(isinstance(b, str) for b in blocks)


# -- CLI ----------------------------------------------------------------------------------------


def _cli_ok(result: Any) -> None:
    """Exit 0, or 1/2 with an error line on stderr; never an uncaught exception."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code in (0, 1, 2), result.exit_code
    text = result.output + result.stderr
    assert "Traceback" not in text
    if result.exit_code:
        assert "error:" in result.stderr.lower(), result.stderr


CLI_OPTION = st.sampled_from(
    [
        "--top-k",
        "--min-score",
        "--max-per-doc",
        "--rag",
        "--json",
        "--explain",
        "--recipe",
        "--prefix",
    ]
)


@run(200)
@given(
    command=st.sampled_from(["query", "context"]),
    text=st.sampled_from(["zebra churn", "cluster pods"]) | TEXT,
    options=st.lists(st.tuples(CLI_OPTION, TEXT), max_size=2),
    tenant=st.just(T) | TEXT,
)
def test_cli_query_and_context(
    world: tuple[RagApp, Path],
    churn: Writer,
    command: str,
    text: str,
    options: list[tuple[str, str]],
    tenant: str,
) -> None:
    app, tmp = world
    args = [
        "--store",
        f"sqlite:///{tmp / 'rag.db'}",
        "--tenant",
        tenant,
        "--project",
        P,
        command,
        text,
    ]
    for option, value in options:
        args += [option] if option in ("--json", "--explain") else [option, value]
    before = rows(app, skip=("churn",))
    result = CliRunner(env=_env()).invoke(cli, args)
    _cli_ok(result)
    assert rows(app, skip=("churn",)) == before


def _env() -> dict[str, str]:
    return {"VANCETOPE_RAG_MAX_TEXT_CHARS": str(LIMIT)}


FILE_NAMES = st.text(string.ascii_letters + string.digits + "._- é", min_size=1, max_size=12)


@run(60)
@given(
    files=st.dictionaries(
        FILE_NAMES,
        st.one_of(st.binary(max_size=200), TEXT.map(lambda t: t.encode("utf-8", "surrogatepass"))),
        max_size=4,
    ),
    raw_names=st.lists(st.binary(min_size=1, max_size=8), max_size=2),
    prefix=st.sampled_from(["documents/", "docs"]) | TEXT,
)
def test_cli_import(
    world: tuple[RagApp, Path], files: dict[str, bytes], raw_names: list[bytes], prefix: str
) -> None:
    _, tmp = world
    root = tmp / f"import-{abs(hash((tuple(files), tuple(raw_names), prefix))) % 10**9}"
    root.mkdir(exist_ok=True)
    for name, data in files.items():
        if name.strip(". "):
            (root / name).write_bytes(data)
    for raw in raw_names:  # names that need not be UTF-8
        name = raw.replace(b"/", b"_").replace(b"\x00", b"_")
        if name.strip(b". "):
            with open(os.path.join(os.fsencode(root), name), "wb") as fh:
                fh.write(b"raw name")
    args = [
        "--store",
        f"sqlite:///{tmp / 'rag.db'}",
        "--tenant",
        T,
        "--project",
        "import-p",
        "import",
        str(root),
        "--prefix",
        prefix,
    ]
    result = CliRunner(env=_env()).invoke(cli, args)
    _cli_ok(result)


# -- REST ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(world: tuple[RagApp, Path]) -> Iterator[TestClient]:
    with TestClient(create_api(world[0])) as c:
        yield c


def _segment(value: str) -> str:
    # HTTP clients and servers cap a URL's length; past a few KB the request never leaves.
    return quote(value[:500].encode("utf-8", "surrogatepass"), safe="") or "%20"


ROUTES = st.sampled_from(
    [
        ("GET", "rag/status"),
        ("POST", "rag/reindex"),
        ("GET", "rag/documents"),
        ("PATCH", "documents/{doc}"),
        ("GET", "../../metrics"),
        ("GET", "rag/nope"),
    ]
)
TOKENS = st.sampled_from(["valid", "none", "garbage", "other-tenant"])


@run(300)
@given(
    route=ROUTES,
    tenant=st.just(T) | TEXT,
    project=st.just(P) | TEXT,
    doc=TEXT,
    query=st.dictionaries(
        st.sampled_from(["rebuild", "state", "limit", "offset", "x"]), TEXT, max_size=2
    ),
    body=st.none() | ANY | st.fixed_dictionaries({"ragEnabled": TEXT | SCALAR}),
    token=TOKENS,
)
def test_rest_routes_answer_with_the_json_shape(
    world: tuple[RagApp, Path],
    client: TestClient,
    churn: Writer,
    route: tuple[str, str],
    tenant: str,
    project: str,
    doc: str,
    query: dict[str, str],
    body: Any,
    token: str,
) -> None:
    app, _ = world
    method, tail = route
    path = f"/brain/{_segment(tenant)}/projects/{_segment(project)}/" + tail.format(
        doc=_segment(doc)
    )
    headers = {
        "valid": {
            "Authorization": "Bearer " + issue_token(SECRET, subject="s", tenant=T, projects="*")
        },
        "none": {},
        "garbage": {"Authorization": "Bearer not.a.token"},
        "other-tenant": {
            "Authorization": "Bearer " + issue_token(SECRET, subject="s", tenant="t9", projects="*")
        },
    }[token]
    params = {
        k: v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for k, v in query.items()
    }
    # A reindex that succeeded queues every document of T/P and the writer's ticks re-index
    # them: T/P's chunks are the writer's to change, its documents' rows are still checked.
    skip = ("churn", "project-chunks")
    before = rows(app, skip=skip)
    content = (
        json.dumps(body, ensure_ascii=True, default=str).encode() if body is not None else None
    )
    if body is not None:
        headers = {**headers, "Content-Type": "application/json"}
    response = client.request(method, path, params=params, content=content, headers=headers)
    assert response.status_code < 500, (path, response.text)
    assert response.headers.get("x-content-type-options") == "nosniff"
    if response.status_code >= 400:
        data = response.json()
        assert set(data) == {"error", "code"} and data["code"], data
        assert rows(app, skip=skip) == before, (path, data)
