"""How much a chunk document shrinks with BSON binary vectors (the claim to
check: "3.3× smaller at 1,536 dimensions"), and what decoding costs.

Builds the chunk document the MongoDB adapter writes (``mongo_queries.chunk_documents``: a
binary float32 ``embedding``) and the same document with the vector as an array of doubles
(what stores of schema 1 hold), and prints their BSON sizes, the vector's share alone, and the
median time to decode 10,000 vectors of each form (``mongo_queries.decode_vector``).

    python bench/mongo_vectors.py
"""

from __future__ import annotations

import statistics
import time

import bson
import numpy as np
from _machine import machine_line

from vancetope_rag.domain.records import Chunk
from vancetope_rag.store.mongo.builders.queries import chunk_documents, decode_vector
from vancetope_rag.store.port.types import RagScope

TEXT = "A chunk of about two hundred words of prose. " * 25


def sizes(dim: int) -> tuple[int, int, int, int]:
    scope = RagScope("tenant", "project", "rag", dim)
    vector = np.random.default_rng(dim).standard_normal(dim).astype(np.float32).tolist()
    (doc,) = chunk_documents(scope, [Chunk("c1", "rag", "doc-1", TEXT, vector)])
    as_array = {**doc, "embedding": [float(x) for x in vector]}
    binary_vec = len(bson.encode({"embedding": doc["embedding"]}))
    array_vec = len(bson.encode({"embedding": as_array["embedding"]}))
    return len(bson.encode(doc)), len(bson.encode(as_array)), binary_vec, array_vec


def decode_ms(values: list[object], repeats: int = 5) -> float:
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for v in values:
            decode_vector(v)
        runs.append((time.perf_counter() - start) * 1000)
    return statistics.median(runs)


def main() -> None:
    print(machine_line())
    print(
        f"{'dim':>5} {'doc binary':>11} {'doc array':>10} {'ratio':>6} "
        f"{'vector binary':>14} {'vector array':>13} {'ratio':>6}"
    )
    for dim in (384, 768, 1024, 1536, 3072):
        doc_b, doc_a, vec_b, vec_a = sizes(dim)
        print(
            f"{dim:>5} {doc_b:>11,} {doc_a:>10,} {doc_a / doc_b:>6.2f} "
            f"{vec_b:>14,} {vec_a:>13,} {vec_a / vec_b:>6.2f}"
        )
    scope = RagScope("t", "p", "r", 1536)
    vectors = np.random.default_rng(0).standard_normal((10_000, 1536)).astype(np.float32)
    docs = chunk_documents(
        scope, [Chunk(f"c{i}", "r", "d", "t", v.tolist()) for i, v in enumerate(vectors[:1])]
    )
    binary = [docs[0]["embedding"]] * len(vectors)
    arrays = [v.tolist() for v in vectors]
    print(
        f"decode 10,000 × 1536: binary {decode_ms(binary):.1f} ms, "
        f"array of doubles {decode_ms(arrays):.1f} ms (median of 5)"
    )


if __name__ == "__main__":
    main()
