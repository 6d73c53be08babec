"""What the SQL chunk stores (sqlite-vec, pgvector) do alike, over the store's
:class:`~.sql.dialect.Dialect`: the checks before a source's chunks are replaced, the chunk
selection of a removal or a read, and the answers of an index that is always current. Each
engine's ``chunks`` module keeps how it stores and ranks vectors and texts.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, Protocol, TypeVar

from vancetope_rag.errors import InvalidInputError
from vancetope_rag.store.sql.dialect import Dialect
from vancetope_rag.store.sql.rows import chunk_filter_sql
from vancetope_rag.store.types import ChunkFilter

__all__ = ["SqlChunkCommon", "check_chunk_version"]


class _Snapshots(Protocol):
    def snapshot(self) -> AbstractContextManager[None]: ...


S = TypeVar("S", bound=_Snapshots)


def check_chunk_version(chunk_version: int | None) -> None:
    """Refuse a ``replace_source`` fencing version that is not a positive integer."""
    if chunk_version is not None and (not isinstance(chunk_version, int) or chunk_version < 1):
        raise InvalidInputError(f"chunk_version must be a positive integer, not {chunk_version!r}")


class SqlChunkCommon(Generic[S]):
    """The :class:`~vancetope_rag.store.port.ChunkStore` methods both SQL chunk stores answer
    the same way (a base of each; ``dialect`` and ``db`` are the store's)."""

    dialect: Dialect
    db: S

    def _chunk_where(
        self, filters: ChunkFilter | None, chunk_ids: Sequence[str] | None
    ) -> tuple[str, list[Any]] | None:
        """`` AND …`` on the chunk alias ``c`` for a filter and chunk ids, and parameters;
        None when ``chunk_ids`` is an empty list (nothing can match)."""
        where, params = chunk_filter_sql(filters, self.dialect)
        if chunk_ids is not None:
            if not chunk_ids:
                return None
            listed, more = self.dialect.in_list("c.id", list(chunk_ids))
            where += f" AND {listed}"
            params += more
        return where, params

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
