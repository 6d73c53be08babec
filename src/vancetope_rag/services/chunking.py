"""Splitting text into chunks that fit the pinned model's input window (DESIGN: counted in
the model's own tokenizer, so no chunk loses its tail to truncation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import BaseNode, MetadataMode, TransformComponent

from vancetope_rag.domain.records import RagRecord
from vancetope_rag.embeddings import CachedEmbedding, LoadedModel


class FitToWindow(TransformComponent):
    """Re-split any node the splitter left longer than the model's window (counted exactly)."""

    max_tokens: int
    tokenizer: Any

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        out: list[BaseNode] = []
        for node in nodes:
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            if len(self.tokenizer(text)) <= self.max_tokens:
                out.append(node)
                continue
            size = max(16, int(self.max_tokens * 0.8))
            while True:
                splitter = SentenceSplitter(
                    chunk_size=size, chunk_overlap=0, tokenizer=self.tokenizer
                )
                parts = splitter.get_nodes_from_documents([node])  # type: ignore[list-item]
                if (
                    all(
                        len(self.tokenizer(p.get_content(metadata_mode=MetadataMode.NONE)))
                        <= self.max_tokens
                        for p in parts
                    )
                    or size <= 16
                ):
                    break
                size = max(16, int(size * 0.8))
            out.extend(parts)
        return out


def ingestion_pipeline(
    rag: RagRecord, loaded: LoadedModel, embed: CachedEmbedding | None
) -> IngestionPipeline:
    """Splitter sized in the model's tokens, the window guard, then (optionally) the pinned
    model behind the embedding cache."""
    splitter = SentenceSplitter(
        chunk_size=rag.chunk_size,
        chunk_overlap=rag.chunk_overlap,
        tokenizer=loaded.tokenizer,
        include_prev_next_rel=False,
    )
    fit = FitToWindow(max_tokens=loaded.max_chunk_tokens, tokenizer=loaded.tokenizer)
    steps: list[TransformComponent] = [splitter, fit]
    if embed is not None:
        steps.append(embed)
    return IngestionPipeline(transformations=steps, disable_cache=True)
