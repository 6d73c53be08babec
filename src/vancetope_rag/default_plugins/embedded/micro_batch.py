"""Micro-batching of concurrent query embeddings, as embedding servers do.

A query that arrives while a slot is free goes straight through, alone: a lone turn waits
for nothing. One that arrives while every slot runs an embedding waits; when a call returns,
the first waiter embeds itself and the others waiting then (up to :data:`CAP`) in one call
and hands each its vector (:class:`~vancetope_rag.coalesce.Coalescer`). As many calls run at
once as the cores allow (``slots``): on ONNX Runtime one per core, since a call beside others
runs on the encoder's one-thread session (:class:`.onnx_backend.OnnxEncoder`).
Used only where the ``auto`` measurement found one call with several short queries faster
than one call each (:mod:`.onnx_backend`); the vectors are the single calls' (a batch pads to
its longest query, and the padding is masked out).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vancetope_rag.coalesce import Coalescer

#: The most queries embedded in one call.
CAP = 16

BatchEncode = Callable[[Sequence[str]], Any]  # texts → one vector (a sequence of floats) each


class QueryBatcher(Coalescer[str, list[float]]):
    """Embeds concurrent queries together: ``slots`` calls run at a time, the waiters batch
    up."""

    def __init__(
        self, encode: BatchEncode, cap: int = CAP, slots: int | Callable[[], int] = 1
    ) -> None:
        super().__init__(lambda texts: [[float(x) for x in v] for v in encode(texts)], cap, slots)

    def embed(self, text: str) -> list[float]:
        return self.submit(text)
