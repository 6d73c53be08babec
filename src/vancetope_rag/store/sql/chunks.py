"""What the SQL chunk stores (sqlite-vec, pgvector) do alike, over the store's
:class:`~.sql.dialect.Dialect`: the checks before a source's chunks are replaced, the chunk
selection of a removal or a read, and the answers of an index that is always current. Each
engine's ``chunks`` module keeps how it stores and ranks vectors and texts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, Protocol, TypeVar

from vancetope_rag.domain.records import Hit
from vancetope_rag.store.port.chunks import ChunkStore
from vancetope_rag.store.port.shared import source_counts_of, unique_batches
from vancetope_rag.store.port.types import ChunkFilter, RagScope
from vancetope_rag.store.sql.dialect import Dialect
from vancetope_rag.store.sql.rows import HIT_COLUMNS, chunk_filter_sql, row_to_hit

__all__ = ["CHUNK_COLUMNS", "SCOPE", "SqlChunkCommon"]

#: A chunk's row as every read returns it (:data:`~.sql.rows.HIT_COLUMNS` on the alias ``c``;
#: never its vector).
CHUNK_COLUMNS = ", ".join(f"c.{column}" for column in HIT_COLUMNS)

#: The chunk rows of one scope (the alias ``c``; its parameters: tenant, project, RAG id).
SCOPE = "c.tenant_id = ? AND c.project_id = ? AND c.rag_id = ?"


class _Snapshots(Protocol):
    def query(self, statement: str, params: Any = ()) -> list[tuple[Any, ...]]: ...

    def query_dicts(self, statement: str, params: Any = ()) -> list[dict[str, Any]]: ...

    def snapshot(self) -> AbstractContextManager[None]: ...


S = TypeVar("S", bound=_Snapshots)


class SqlChunkCommon(ChunkStore, Generic[S]):
    """The :class:`~vancetope_rag.store.port.ChunkStore` methods both SQL chunk stores answer
    the same way (a base of each; ``dialect`` and ``db`` are the store's). A source's chunks
    are replaced in one transaction: no reader ever sees it between its old and new chunks."""

    dialect: Dialect
    db: S

    def _chunk_where(
        self, filters: ChunkFilter | None, chunk_ids: Sequence[str] | None
    ) -> tuple[str, list[Any]]:
        """`` AND …`` on the chunk alias ``c`` for a filter and chunk ids, and parameters."""
        where, params = chunk_filter_sql(filters, self.dialect)
        if chunk_ids is not None:
            listed, more = self.dialect.in_list("c.id", list(chunk_ids))
            where += f" AND {listed}"
            params += more
        return where, params

    def _remove_chunks(
        self, scope: RagScope, chunk_ids: Sequence[str] | None, filters: ChunkFilter | None
    ) -> int:
        return self._remove_where(scope, *self._chunk_where(filters, chunk_ids))

    def _remove_where(self, scope: RagScope, where: str, params: list[Any]) -> int:
        """Remove the scope's chunks the ``AND …`` conditions select, in one transaction."""
        raise NotImplementedError

    def _chunk_table(self, scope: RagScope) -> str | None:
        """The table of the scope's chunk rows; None when there is none yet (nothing
        stored in that dimension)."""
        raise NotImplementedError

    def _scope_params(self, scope: RagScope) -> tuple[str, str, str]:
        return scope.tenant_id, scope.project_id, scope.rag_id

    def source_refs(self, scope: RagScope) -> list[str]:
        table = self._chunk_table(scope)
        if table is None:
            return []
        rows = self.db.query(
            self.dialect.sql(
                f"SELECT DISTINCT c.source_ref FROM {table} c WHERE {SCOPE} ORDER BY c.source_ref"
            ),
            self._scope_params(scope),
        )
        return [r[0] for r in rows]

    def count_chunks(self, scope: RagScope, *, filters: ChunkFilter | None = None) -> int:
        where, params = chunk_filter_sql(filters, self.dialect)  # a bad filter raises first
        table = self._chunk_table(scope)
        if table is None:
            return 0
        rows = self.db.query(
            self.dialect.sql(f"SELECT count(*) FROM {table} c WHERE {SCOPE}") + where,
            (*self._scope_params(scope), *params),
        )
        return int(rows[0][0])

    def source_counts(
        self, scope: RagScope, paths: Mapping[str, str]
    ) -> dict[str, tuple[int, int]]:
        rows: list[tuple[str, str, int]] = []
        table = self._chunk_table(scope)
        for part in unique_batches(paths, self.dialect.list_batch) if table else ():
            listed, params = self.dialect.in_list("c.source_ref", part)
            rows += self.db.query(
                self.dialect.sql(f"SELECT c.source_ref, c.path, count(*) FROM {table} c WHERE ")
                + self.dialect.sql(SCOPE)
                + f" AND {listed} GROUP BY c.source_ref, c.path",
                (*self._scope_params(scope), *params),
            )
        return source_counts_of(paths, rows)

    def _get_chunks(
        self, scope: RagScope, chunk_ids: Sequence[str] | None, filters: ChunkFilter | None
    ) -> list[Hit]:
        where, params = self._chunk_where(filters, chunk_ids)
        table = self._chunk_table(scope)
        if table is None:
            return []
        rows = self.db.query_dicts(
            self.dialect.sql(f"SELECT {CHUNK_COLUMNS} FROM {table} c WHERE {SCOPE}")
            + f"{where} ORDER BY c.source_ref, c.rowid",
            (*self._scope_params(scope), *params),
        )
        return [row_to_hit(r, 0.0) for r in rows]

    def discard_chunk_version(self, scope: Any, source_ref: str, chunk_version: int) -> int:
        return 0  # the write and its clean mark commit (or roll back) in one transaction

    def dimension_ready(self, dimension: int) -> bool:
        return True  # answered from the rows, or an index built by the statement creating it

    def sweep(self, *, limit: int = 100) -> int:
        return 0  # a swap is one transaction: nothing is ever left to sweep

    def visible(self, scope: Any) -> bool:
        return True  # queries read the committed rows themselves

    def snapshot(self) -> AbstractContextManager[None]:
        return self.db.snapshot()  # one read transaction
