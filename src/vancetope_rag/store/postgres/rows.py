"""pgvector's forms of a vector: the text literal a write sends, the binary form a read gets.

The row ↔ record codecs are shared with the SQLite store (:mod:`vancetope_rag.store.sql.rows`):
the two schemas share their column names and value encodings (see :mod:`.postgres.schema`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = [
    "vector_literal",
    "vector_of",
]


def vector_literal(vector: npt.NDArray[np.float32]) -> str:
    """pgvector's text form of a float32 vector (``[x,y,…]``, every float32 digit kept)."""
    return "[" + ",".join(repr(float(x)) for x in vector.tolist()) + "]"


def vector_of(data: bytes) -> npt.NDArray[np.float32]:
    """A ``vector`` column read in binary (``query_dicts(…, binary=True)``): pgvector's send
    format is the dimension and an unused word (two int16), then the float32 values, big
    endian. The exact values stored, with no text to format and parse (that cost ~5 ms per
    100 384-dimension rows, a third of a hybrid query's store time at 100k chunks;
    docs/benchmarks.md)."""
    return np.frombuffer(data, dtype=">f4", offset=4).astype(np.float32)
