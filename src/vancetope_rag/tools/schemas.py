"""What a model is told about the ``rag_*`` tools: when to use each, and every parameter.

One Pydantic model per tool: LlamaIndex turns it into the JSON schema the model sees (each
field's ``description`` included), while the tool functions in :mod:`vancetope_rag.tools` keep
validating the values themselves (a model's arguments are never trusted to match the schema).
A test checks that each model's fields are exactly its function's parameters.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_RAG_ID = (
    "The RAG to use: its ragId from rag_list or rag_create, or its name "
    "('_documents' is the project's documents)."
)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RagCreateArgs(_Args):
    name: str = Field(
        description="Name of the new RAG: 1-100 letters, digits, spaces, '_', '-' or '.'; "
        "must not start with '_' (reserved for the system)."
    )
    title: str | None = Field(default=None, description="Short human-readable title.")
    description: str | None = Field(
        default=None, description="What the RAG holds, for people and models listing it."
    )
    chunkSize: int | None = Field(
        default=None,
        description="Chunk size in the embedding model's tokens; omit to fit the model.",
    )
    chunkOverlap: int | None = Field(
        default=None, description="Tokens shared by neighbouring chunks; omit for the default."
    )


class RagAddTextArgs(_Args):
    ragId: str = Field(description=_RAG_ID)
    text: str = Field(description="The text to index (split into chunks and embedded).")
    sourceRef: str | None = Field(
        default=None,
        description="Where the text comes from (a URL, a file name); groups its chunks and "
        "is shown as the citation. Omit for a generated id.",
    )
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="Flat key/value pairs stored with each chunk (strings, numbers, "
        "booleans); 'path' sets the path shown in citations.",
    )


class RagAddWorkspaceFileArgs(_Args):
    ragId: str = Field(description=_RAG_ID)
    path: str = Field(
        description="The file's path relative to the project's workspace folder, "
        "e.g. 'reports/q3.pdf'."
    )
    sourceRef: str | None = Field(
        default=None, description="Citation label; defaults to 'workspace:<path>'."
    )


class RagAddDocumentArgs(_Args):
    ragId: str = Field(description=_RAG_ID)
    documentId: str = Field(description="Id of one project document to add (or re-add).")


class RagAddPathArgs(_Args):
    ragId: str = Field(description=_RAG_ID)
    pathPrefix: str = Field(
        description="Add every project document whose path starts with this, "
        "e.g. 'documents/notes/'."
    )


class RagQueryArgs(_Args):
    ragId: str = Field(description=_RAG_ID)
    query: str = Field(
        description="What to look for, in natural language (a question or key words)."
    )
    topK: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="How many excerpts to return at most (1-1000); omit for the project's setting.",
    )
    relevanceCut: str | None = Field(
        default=None,
        description="'auto': return only the excerpts likely relevant next to the best one "
        "(the RAG's calibrated cut); a number such as '0.15': that cosine gap; omitted or "
        "'off': topK excerpts.",
    )


class RagDeleteArgs(_Args):
    ragId: str = Field(description="The RAG to delete, by ragId or name.")


class RagListArgs(_Args):
    projectId: str | None = Field(
        default=None,
        description="Omit: the tools only ever see the current project.",
    )


class FilesVisualizeArgs(_Args):
    filePath: str | None = Field(
        default=None,
        description="A file in the project's workspace, relative to it, e.g. "
        "'reports/q3.pdf'. Give this or documentId.",
    )
    documentId: str | None = Field(
        default=None,
        description="A project document's id: its stored text is returned, no model call.",
    )
    offset: int | None = Field(
        default=None,
        ge=0,
        description="Where to start in the file's text: the 'next.offset' of a previous "
        "answer that was truncated. Omit for the start.",
    )
    pages: str | None = Field(
        default=None,
        description="Pages to read, e.g. '3-4' (PDF pages, TIFF frames; for other files the "
        "sections in order: sheets, slides): the 'next.pages' of a previous answer.",
    )
    vision: bool | None = Field(
        default=None,
        description="true: let the vision model look at the pages even where they have text "
        "(charts, drawings, layout). Omit otherwise: text is read locally, and the model "
        "only reads pages and images without text.",
    )


#: Per tool: the model of its arguments and what the model is told about when to use it.
TOOL_SPECS: dict[str, tuple[type[BaseModel], str]] = {
    "rag_create": (
        RagCreateArgs,
        "Create a new, empty RAG (a searchable vector index) in this project. Use it when the "
        "user wants to keep a separate collection of texts to search later; then fill it with "
        "rag_add_text, rag_add_workspace_file, rag_add_document or rag_add_path. The project's "
        "documents are already searchable in '_documents' without creating anything.",
    ),
    "rag_add_text": (
        RagAddTextArgs,
        "Add a text to a RAG so later rag_query calls find it. Use it for text you have in the "
        "conversation (notes, a pasted article). Texts longer than the engine's limit are "
        "refused: split them.",
    ),
    "rag_add_workspace_file": (
        RagAddWorkspaceFileArgs,
        "Extract the text of a file in the project's workspace (PDF, DOCX, Markdown, code, …) "
        "and index it in a RAG, replacing what that file added before. Use it when the user "
        "names a workspace file to make searchable.",
    ),
    "rag_add_document": (
        RagAddDocumentArgs,
        "Index one project document (by id) in a RAG, replacing its earlier chunks there. Use "
        "it to put a specific document into a manual RAG.",
    ),
    "rag_add_path": (
        RagAddPathArgs,
        "Index every project document under a path prefix in a RAG (at most 1000 documents). "
        "Use it to put a whole folder into a manual RAG.",
    ),
    "rag_query": (
        RagQueryArgs,
        "Search a RAG and get the best-matching excerpts, each with a label (S1, S2, …), its "
        "source and a similarity score. Use it whenever the answer may be in the project's "
        "documents ('_documents') or in a RAG the user made, before answering from memory; "
        "cite the sources you use by their labels.",
    ),
    "rag_delete": (
        RagDeleteArgs,
        "Delete a RAG and all its chunks, for good. Use it only when the user asks to remove "
        "a RAG; system RAGs (names starting with '_') cannot be deleted.",
    ),
    "rag_list": (
        RagListArgs,
        "List the RAGs of this project with their ids, names, models and chunk counts, the "
        "default '_documents' included. Use it to find a ragId or to see what can be searched.",
    ),
    "files_visualize": (
        FilesVisualizeArgs,
        "Read one file on demand, without indexing it: a workspace file (filePath) or a "
        "project document (documentId). Returns its text in sections (pages, sheets, slides, "
        "cells, frames), the limits applied, whether it was truncated and how to continue "
        "('next': an offset or a page range to call again with). Text files, code, data, "
        "office files and PDFs with text are read locally; a vision model reads only scans, "
        "images and video frames, or pages when vision is true. Use it when the user asks "
        "about a specific file's content or look.",
    ),
}
