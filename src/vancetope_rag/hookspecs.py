"""The pluggy host contract.

A chat engine (the host) calls these hooks; vancetope-rag's own behaviour is implemented as
default plugins (:mod:`vancetope_rag.default_plugins`), and third-party plugins add to it.
``docs/plugin-hooks.md`` describes every hook and how to write a plugin.

Phases:

* **Startup** — ``register_embedding_providers``, ``register_rerankers``,
  ``register_extractors`` and ``context_template`` are called once, when
  :meth:`RagApp.open <vancetope_rag.app.RagApp.open>` builds the app's registries.
* **Project lifecycle** — ``project_bring`` / ``project_suspend`` / ``project_close``.
* **Documents** — ``document_saved`` / ``summary_saved`` / ``document_deleted``.
* **Chat turn** — ``pre_turn`` returns system messages to add before the LLM call.
* **Tools** — ``register_tools`` hands agent tools to a ``register`` callback.

The hooks of the later phases receive the :class:`~vancetope_rag.app.RagApp` as ``app``
(typed :class:`HostApp` here: this contract is loaded by the app it describes, so it does not
import it; the default plugins annotate ``app: HostApp`` too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    from pathlib import Path

    from vancetope_rag.config import EngineConfig
    from vancetope_rag.domain.records import Document
    from vancetope_rag.embeddings import EmbeddingProvider
    from vancetope_rag.extraction.registry import RegisterExtractor
    from vancetope_rag.recipes import RagParams
    from vancetope_rag.rerankers import RerankerProvider
    from vancetope_rag.services.autoinject import RagAutoInjectService
    from vancetope_rag.services.bridge import BridgeService
    from vancetope_rag.services.documents import DocumentService
    from vancetope_rag.services.extraction import ExtractionService
    from vancetope_rag.services.projects import ProjectLifecycle
    from vancetope_rag.services.rag import RagService
    from vancetope_rag.services.retrieval.retriever import ProjectRagRetriever, RecipeLike

PROJECT_NAME = "vancetope_rag"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class HostApp(Protocol):
    """The ``app`` a hook receives: the :class:`~vancetope_rag.app.RagApp` that called it,
    with every service (``app.documents``, ``app.rags``, ``app.autoinject``…). Named by a
    Protocol so the contract, the default plugins and the tools stay below the composition
    root that loads them."""

    config: EngineConfig
    plugins: pluggy.PluginManager
    extraction: ExtractionService
    rags: RagService
    documents: DocumentService
    lifecycle: ProjectLifecycle
    autoinject: RagAutoInjectService
    bridge: BridgeService

    def as_retriever(
        self,
        tenant_id: str,
        project_id: str,
        recipe: RecipeLike | None = None,
        **overrides: Any,
    ) -> ProjectRagRetriever:
        """A LlamaIndex retriever over the project's ``_documents`` RAG."""
        ...

    def workspace_root(self, tenant_id: str, project_id: str) -> Path | None:
        """The project's workspace folder, when the engine configures one and it exists."""
        ...


# -- startup: extension points -----------------------------------------------------------


@hookspec
def register_embedding_providers(register: Callable[[EmbeddingProvider], None]) -> None:
    """Add embedding providers, selected per tenant or project with
    ``ai.embedding.provider=<name>``.

    Called once per app, when it opens. Hand each provider (an object with ``name``,
    ``default_model()`` and ``load(settings, model)``; see
    :class:`~vancetope_rag.embeddings.EmbeddingProvider`) to ``register``. A later registration
    of a name replaces an earlier one; the built-in providers register first, so a plugin can
    replace them. The default plugins register ``embedded``, ``openai``, ``gemini`` and
    ``hashing``.
    """


@hookspec
def register_rerankers(register: Callable[[RerankerProvider], None]) -> None:
    """Add rerankers, selected per tenant or project with ``ai.rerank.provider=<name>``.

    Called once per app, when it opens. Hand each provider (an object with ``name``,
    ``default_model()`` and ``load(settings, model)`` returning a reranker whose
    ``rerank(query, texts)`` gives a score per text index; see
    :class:`~vancetope_rag.rerankers.RerankerProvider`) to ``register``. A later registration
    of a name replaces an earlier one; the built-in ``tei`` and ``cohere`` register first.
    """


@hookspec
def register_extractors(register: RegisterExtractor) -> None:
    """Add text extractors for file types.

    Called once per app, when it opens. Call ``register(mime_types, extractor,
    extensions=(), name=None, version="1", takes_options=False)`` where
    ``extractor(data: bytes, path: str) -> str`` returns the text — or an
    :class:`~vancetope_rag.extraction.types.Extraction` of
    sections (pages, sheets, slides) — or raises
    :class:`~vancetope_rag.errors.ExtractionError`. With ``takes_options`` it also receives the
    :class:`~vancetope_rag.extraction.types.ExtractOptions` (budgets, OCR backend). Bump ``version``
    when its output changes: the next import re-reads that type's files. A later registration
    of a MIME type or extension replaces an earlier one; the built-in extractors register
    first, so a plugin can replace them. The default plugin registers plain text and code,
    HTML, notebooks, DOCX, OpenDocument, EPUB, LaTeX, XLSX, PPTX, RTF, PDF and images.
    """


@hookspec(firstresult=True)
def context_template() -> str | None:
    """Jinja2 source of the default ``<rag-context>`` template (recipes may still override).

    Called once per app, when it opens. ``firstresult``: the first plugin that returns a
    template wins; when none does, the package's own template is used.
    """


# -- project lifecycle -------------------------------------------------------------------


@hookspec
def project_bring(app: HostApp, tenant_id: str, project_id: str, home_node: str | None) -> None:
    """A project starts running (after the host initialised its workspace).

    Called by :meth:`RagApp.bring <vancetope_rag.app.RagApp.bring>`. The default plugin marks
    the project running and ensures the ``_documents`` RAG (best effort: never raises for
    embedding misconfiguration; provider ``none`` is a silent skip).
    """


@hookspec
def project_suspend(app: HostApp, tenant_id: str, project_id: str) -> None:
    """A project is suspended. The default plugin keeps the RAG intact."""


@hookspec
def project_close(app: HostApp, tenant_id: str, project_id: str) -> None:
    """A project is closed. The default plugin disposes the ``_documents`` RAG."""


# -- documents ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def document_saved(
    app: HostApp,
    tenant_id: str,
    project_id: str,
    path: str,
    content: str,
    mime_type: str | None,
    rag_enabled: str | None,
    metadata: Mapping[str, Any] | None,
) -> Document | None:
    """The host created or changed a document at ``path``. ``firstresult``.

    The default plugin upserts it and sets ``ragDirty`` when it is eligible; indexing happens
    later in the scheduler (no embedding call on the save path). ``rag_enabled`` is the wire
    tristate ``"auto" | "on" | "off"`` or None (unchanged). ``metadata`` is the host's own
    (at most 32 string keys, scalar values, 4,096 characters of JSON; None: unchanged, ``{}``
    removes it): stored with the document, a change queues it, and the indexer copies it into
    every chunk so LlamaIndex metadata filters select by it. Returns the stored document.
    """


@hookspec(firstresult=True)
def summary_saved(
    app: HostApp, tenant_id: str, project_id: str, path: str, summary: str | None
) -> Document | None:
    """The host's summary driver wrote (or, with None, removed) the summary of the document
    at ``path``. ``firstresult``.

    Called by :meth:`RagApp.summary_saved <vancetope_rag.app.RagApp.summary_saved>`. The
    default plugin stores it and, when it changed, sets ``ragDirty`` (spec §4.2): the next
    indexer pass writes the document's summary chunk (with ``rag.project.includeSummaries``,
    true by default). Raises ``DocumentNotFoundError`` when no document has that path.
    Returns the stored document.
    """


@hookspec
def document_deleted(app: HostApp, tenant_id: str, project_id: str, path: str) -> None:
    """The host deleted a document; the default plugin removes it and its chunks at once."""


# -- chat turn ---------------------------------------------------------------------------


@hookspec
def pre_turn(
    app: HostApp,
    tenant_id: str,
    project_id: str,
    user_messages: Sequence[str],
    recipe: RagParams | None,
    tools: Sequence[Any] | None,
) -> list[str] | None:
    """Before the LLM call of a turn: return system message texts to add (or None).

    ``tools`` are the tools the turn's model was given (LlamaIndex tools, names or
    OpenAI-style tool dicts), None when the host did not say. Results of all plugins are
    concatenated in plugin registration order (the default plugin's first). The default
    plugin returns the ``<rag-context>`` block when AutoInject is on and something relevant
    was found (with ``rag.autoInject.whenToolsPresent=skip``, a cascade ON defers to a
    ``rag_query`` tool); it never raises for retrieval failures (the turn goes on without
    the block).
    """


# -- tools -------------------------------------------------------------------------------


@hookspec
def register_tools(
    register: Callable[[Any], None], app: HostApp, tenant_id: str, project_id: str
) -> None:
    """Hand agent tools (LlamaIndex ``FunctionTool``s) bound to this tenant and project to
    ``register``. Called by :meth:`RagApp.tools <vancetope_rag.app.RagApp.tools>`; the
    default plugin registers the ``rag_*`` tools of spec §9."""


__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]
