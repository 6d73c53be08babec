"""Splitting text into chunks that fit the pinned model's input window (DESIGN: counted in
the model's own tokenizer, so no chunk loses its tail to truncation), in bounded time and size
whatever the text's shape.

LlamaIndex's ``SentenceSplitter`` falls back from sentences to phrases, then words, then single
characters, tokenizing each piece alone: a long text without sentence punctuation costs one
tokenizer call per word, a long run without whitespace one per character, and a byte-pair
tokenizer's cost on one long "word" grows faster than its length. So, around the splitter:

* :class:`Segmenter` cuts a long document into segments of at most :data:`SEGMENT_CHARS` at
  paragraph, line or word boundaries, and any run without whitespace into pieces of at most
  :data:`MAX_RUN_CHARS`; the splitter then never sees more than one segment at once;
* the splitter groups words :func:`by the dozen <split_word_groups>` before splitting them one
  by one, and cuts an oversized word into fixed-width pieces instead of single characters;
* :class:`CapChars` cuts a chunk that holds more than :data:`CHARS_PER_TOKEN_CAP` characters
  per token of chunk size (runs of symbols a tokenizer reads as one unknown token), so an
  excerpt shown to a model stays readable;
* :class:`FitToWindow` re-splits anything still over the model's window.

Ordinary prose (segments shorter than 16,000 characters, phrases shorter than a chunk) is
split exactly as ``SentenceSplitter`` alone would.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core import Document as LIDocument
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.node_parser.text.utils import split_text_keep_separator
from llama_index.core.schema import BaseNode, MetadataMode, TransformComponent

from vancetope_rag.domain.records import RagRecord
from vancetope_rag.embeddings import CachedEmbedding, LoadedModel
from vancetope_rag.errors import InvalidInputError

#: A document longer than this goes to the splitter in segments of at most this many characters.
SEGMENT_CHARS = 16_000
#: A run without whitespace longer than this is cut into pieces of this many characters.
MAX_RUN_CHARS = 1_000
#: A chunk holds at most this many characters per token of the RAG's chunk size.
CHARS_PER_TOKEN_CAP = 16

_RUN = re.compile(r"\S+")
_BREAKS = ("\n\n", "\n", " ", "\t")


def _cut_point(text: str, start: int, end: int) -> int:
    """Where to end a piece of ``text[start:end]``: after the last paragraph break in its
    second half, else the last line break, else the last blank; else at ``end``."""
    floor = start + (end - start) // 2
    for sep in _BREAKS:
        found = text.rfind(sep, floor, end)
        if found >= 0:
            return found + len(sep)
    return end


def segment_text(
    text: str, max_chars: int = SEGMENT_CHARS, max_run: int = MAX_RUN_CHARS
) -> list[str]:
    """Consecutive pieces of ``text`` (joined, they are ``text``): each at most ``max_chars``
    long, cut at a paragraph, line or word boundary where one lies in the piece's second half,
    and every run without whitespace longer than ``max_run`` cut into pieces of ``max_run``.
    Linear in the length of ``text``.
    """
    max_run = max(1, min(max_run, max_chars))
    pieces: list[str] = []

    def soft(begin: int, stop: int) -> None:  # a stretch whose runs are all short
        while stop - begin > max_chars:
            cut = _cut_point(text, begin, begin + max_chars)
            pieces.append(text[begin:cut])
            begin = cut
        if stop > begin:
            pieces.append(text[begin:stop])

    done = 0
    for run in _RUN.finditer(text):
        if run.end() - run.start() <= max_run:
            continue
        soft(done, run.start())
        for at in range(run.start(), run.end(), max_run):
            pieces.append(text[at : min(at + max_run, run.end())])
        done = run.end()
    soft(done, len(text))
    return pieces


def split_word_groups(words: int) -> Callable[[str], list[str]]:
    """Split at blanks into groups of ``words`` words (separators kept); a text of fewer words
    stays whole, so the splitter goes on to its word-by-word split."""

    def split(text: str) -> list[str]:
        parts = split_text_keep_separator(text, " ")
        if len(parts) <= words:
            return [text]
        return ["".join(parts[i : i + words]) for i in range(0, len(parts), words)]

    return split


def split_fixed_width(width: int) -> Callable[[str], list[str]]:
    """Cut into pieces of ``width`` characters (single characters once that short)."""

    def split(text: str) -> list[str]:
        if len(text) <= width:
            return list(text)
        return [text[i : i + width] for i in range(0, len(text), width)]

    return split


def bounded_splitter(chunk_size: int, chunk_overlap: int, tokenizer: Any) -> SentenceSplitter:
    """A ``SentenceSplitter`` whose word- and character-level fallbacks cost a bounded number
    of tokenizer calls (see the module docstring)."""
    splitter = SentenceSplitter(
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        tokenizer=tokenizer,
        include_prev_next_rel=False,
    )
    phrase, by_word = splitter._sub_sentence_split_fns[0], splitter._sub_sentence_split_fns[1]
    splitter._sub_sentence_split_fns = [
        phrase,
        split_word_groups(max(1, chunk_size // 16)),
        by_word,
        split_fixed_width(max(1, chunk_size // 4)),
    ]
    return splitter


def _with_text(node: BaseNode, text: str) -> BaseNode:
    """A copy of ``node`` holding ``text`` under a new id."""
    return node.model_copy(update={"text": text, "id_": str(uuid.uuid4())})


class Segmenter(TransformComponent):
    """Cut documents into segments the splitter handles in bounded time (:func:`segment_text`)."""

    max_chars: int = SEGMENT_CHARS
    max_run: int = MAX_RUN_CHARS

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        out: list[BaseNode] = []
        for node in nodes:
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            pieces = segment_text(text, self.max_chars, self.max_run)
            if len(pieces) <= 1:
                out.append(node)
                continue
            for piece in pieces:
                doc = LIDocument(text=piece, metadata=dict(node.metadata))
                doc.excluded_embed_metadata_keys = list(node.excluded_embed_metadata_keys)
                doc.excluded_llm_metadata_keys = list(node.excluded_llm_metadata_keys)
                out.append(doc)
        return out


class CapChars(TransformComponent):
    """Cut any chunk longer than ``max_chars`` characters, at word boundaries where possible."""

    max_chars: int

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        out: list[BaseNode] = []
        for node in nodes:
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            if len(text) <= self.max_chars:
                out.append(node)
                continue
            for piece in segment_text(text, self.max_chars, self.max_chars):
                if piece.strip():
                    out.append(_with_text(node, piece.strip()))
        return out


class FitToWindow(TransformComponent):
    """Re-split any node the splitter left longer than the model's window (counted exactly)."""

    max_tokens: int
    tokenizer: Any

    def _fits(self, nodes: Sequence[BaseNode]) -> bool:
        return all(
            len(self.tokenizer(n.get_content(metadata_mode=MetadataMode.NONE))) <= self.max_tokens
            for n in nodes
        )

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        out: list[BaseNode] = []
        for node in nodes:
            if self._fits([node]):
                out.append(node)
                continue
            size = max(16, int(self.max_tokens * 0.8))
            while True:
                splitter = bounded_splitter(size, 0, self.tokenizer)
                parts = splitter.get_nodes_from_documents([node])  # type: ignore[list-item]
                if self._fits(parts) or size <= 16:
                    break
                size = max(16, int(size * 0.8))
            out.extend(parts)
        return out


def chunking_for(
    loaded: LoadedModel,
    chunk_size: int | None,
    chunk_overlap: int | None,
    *,
    default_size: int | None = None,
    default_overlap: int | None = None,
) -> tuple[int, int]:
    """(chunk size, overlap) for a new RAG: the caller's, else the engine's, else what fits
    the model's window; refused when the model would silently drop a chunk's tail.

    Raises:
        InvalidInputError: A size under 16 or over the model's window, or an overlap not
            below the size.
    """
    model_size, model_overlap = loaded.default_chunking()
    size = chunk_size if chunk_size is not None else default_size or model_size
    if chunk_overlap is not None:
        overlap = chunk_overlap
    elif default_overlap is not None:
        overlap = default_overlap
    else:
        overlap = min(model_overlap, size // 4)
    if not isinstance(size, int) or size < 16:
        raise InvalidInputError(f"chunkSize must be an integer of at least 16, got {size!r}")
    if size > loaded.max_chunk_tokens:
        raise InvalidInputError(
            f"chunkSize {size} exceeds what {loaded.model} reads ({loaded.max_chunk_tokens} "
            f"tokens); text past that would be silently dropped. Use at most "
            f"{loaded.max_chunk_tokens}."
        )
    if not isinstance(overlap, int) or not 0 <= overlap < size:
        raise InvalidInputError(
            f"chunkOverlap must be an integer from 0 to {size - 1}, got {overlap!r}"
        )
    return size, overlap


def ingestion_pipeline(
    rag: RagRecord, loaded: LoadedModel, embed: CachedEmbedding | None
) -> IngestionPipeline:
    """Segmenter, splitter sized in the model's tokens, the size cap and the window guard,
    then (optionally) the pinned model behind the embedding cache."""
    steps: list[TransformComponent] = [
        Segmenter(),
        bounded_splitter(rag.chunk_size, rag.chunk_overlap, loaded.tokenizer),
        CapChars(max_chars=rag.chunk_size * CHARS_PER_TOKEN_CAP),
        FitToWindow(max_tokens=loaded.max_chunk_tokens, tokenizer=loaded.tokenizer),
    ]
    if embed is not None:
        steps.append(embed)
    return IngestionPipeline(transformations=steps, disable_cache=True)
