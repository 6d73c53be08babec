"""PostgreSQL's :class:`~vancetope_rag.store.sql.dialect.Dialect`: psycopg's ``%s``
marker, lists bound as one array, claims ``FOR UPDATE SKIP LOCKED``, floats cast where a
``CASE`` cannot infer them."""

from __future__ import annotations

from vancetope_rag.store.sql.dialect import Dialect

__all__ = ["POSTGRES"]

POSTGRES = Dialect(
    mark="%s",
    arrays=True,
    lock=" FOR UPDATE",
    real="::float8",
    insertion_order="seq",
    list_batch=1000,
    bytewise=' COLLATE "C"',
    lone_write_transaction=False,
    unindexed="",
    prefix_test="starts_with({column}, ?)",
)
