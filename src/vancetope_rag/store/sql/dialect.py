"""What tells one SQL engine's statements from another's: the :class:`Dialect` the shared SQL
stores (:mod:`vancetope_rag.store.sql`) are given.

The stores write their SQL once, with ``?`` for a parameter, and send it through
:meth:`Dialect.sql`. Where the engines differ in more than the marker (a claim that skips
locked rows, a list bound as one array or as one marker per value, a cast, the column that
orders rows by insertion) the statement asks its dialect. Each engine package builds its one
dialect (``sqlite.dialect``, ``postgres.dialect``); this module imports no engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

__all__ = ["D", "Dialect", "Marked", "SqlDatabase"]


class SqlDatabase(Protocol):
    """What the shared SQL stores need of an engine's database wrapper."""

    def query(self, statement: str, params: Any = ()) -> list[tuple[Any, ...]]: ...

    def query_dicts(self, statement: str, params: Any = ()) -> list[dict[str, Any]]: ...

    def execute(self, statement: str, params: Any = ()) -> int: ...

    def transaction(self) -> AbstractContextManager[Any]: ...

    def executemany(self, statement: str, rows: Any) -> None: ...

    def query_packed(
        self, columns: Sequence[str], rest: str, params: Any = ()
    ) -> list[dict[str, Any]]: ...

    def check_ready(self) -> str | None: ...

    def close(self) -> None: ...

    def next_sequence(self) -> int: ...


#: An engine's database wrapper, as the shared stores keep it (its own methods stay typed).
D = TypeVar("D", bound=SqlDatabase)


@dataclass(frozen=True)
class Dialect:
    """One SQL engine's spelling of the statements the shared SQL stores send."""

    #: The driver's parameter marker (``?`` or ``%s``).
    mark: str
    #: The engine binds a list as one array parameter (``= ANY(?)``, ``unnest``); else one
    #: marker per value, and bulk writes are one statement per row.
    arrays: bool
    #: The clause that locks the rows a ``SELECT`` reads until the transaction ends (``""``
    #: where a write transaction holds the whole database already).
    lock: str
    #: What a ``?`` is cast with where the engine cannot infer a float (``CASE … ELSE ?``).
    real: str
    #: The column that orders a table's rows by insertion.
    insertion_order: str
    #: How many values one statement binds at most in a list.
    list_batch: int
    #: The collation that orders text by its bytes (``""`` where that is the default).
    bytewise: str
    #: A lone write statement runs in a transaction of its own (SQLite: ``BEGIN
    #: IMMEDIATE`` takes the write lock first, so a statement never upgrades a read snapshot
    #: another writer made stale); else it is atomic alone and saves the round trips.
    lone_write_transaction: bool
    #: A prefix that keeps a column's index out of a plan (SQLite's unary ``+``), or ``""``.
    unindexed: str
    #: ``column`` starts with a ``?`` (each ``?`` is bound to the prefix), ``{column}``
    #: in its place.
    prefix_test: str

    def sql(self, statement: str) -> str:
        """``statement``, written with ``?``, in the driver's marker."""
        return statement if self.mark == "?" else statement.replace("?", self.mark)

    def insert(self, table: str, row: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
        """``INSERT INTO table (columns) VALUES (…)`` for a row, and its parameters."""
        marks = ", ".join([self.mark] * len(row))
        return f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})", tuple(row.values())

    def starts_with(self, column: str, prefix: str) -> tuple[str, list[str]]:
        """``column`` starts with ``prefix``, written with ``?``, and its parameters."""
        test = self.prefix_test.format(column=column)
        return test, [prefix] * test.count("?")

    def per_statement(self, values: list[Any]) -> list[list[Any]]:
        """The lists a bulk write binds, one statement each: all at once where a list binds
        as one array, else one value a statement."""
        if self.arrays:
            return [values] if values else []
        return [[v] for v in values]

    def in_list(
        self, column: str, values: Sequence[Any], *, negated: bool = False
    ) -> tuple[str, list[Any]]:
        """``column`` is (not) one of ``values``, in the driver's marker, and its parameters."""
        if self.arrays:
            clause = f"{column} = ANY({self.mark})"
            return (f"NOT ({clause})" if negated else clause), [list(values)]
        marks = ",".join([self.mark] * len(values))
        return f"{column} {'NOT IN' if negated else 'IN'} ({marks})", list(values)

    def claim(
        self,
        table: str,
        key: str,
        pick: str,
        sets: str,
        *,
        scope: str = "",
    ) -> str:
        """An ``UPDATE … RETURNING`` of the rows of ``table`` that ``pick`` selects.

        ``pick`` is a ``SELECT key FROM table WHERE …`` (with its order and limit), ``sets``
        the ``SET`` list, ``scope`` more ``AND``-ed conditions on the updated rows. Where the
        engine locks rows (:attr:`lock`), the picked rows are taken ``SKIP LOCKED``, so
        workers of many processes never wait on each other nor take the same row. The
        parameters: the pick's, then the sets', then the scope's. Written with ``?``.
        """
        where = f"{scope} AND " if scope else ""
        if not self.lock:
            # The write transaction holds the database: no other claim runs meanwhile.
            return (
                f"WITH picked AS ({pick}) UPDATE {table} SET {sets} "
                f"WHERE {where}{key} IN (SELECT {key} FROM picked) RETURNING *"
            )
        return (
            f"WITH picked AS ({pick}{self.lock} SKIP LOCKED) UPDATE {table} t SET {sets} "
            f"FROM picked WHERE {where}t.{key} = picked.{key} RETURNING t.*"
        )


class Marked:
    """A database whose statements are written with ``?``: each is sent in the dialect's
    marker (the shared SQL stores' one way to the database)."""

    def __init__(self, db: SqlDatabase, dialect: Dialect) -> None:
        self.db = db
        self.dialect = dialect

    def query(self, statement: str, params: Any = ()) -> list[tuple[Any, ...]]:
        return self.db.query(self.dialect.sql(statement), params)

    def query_dicts(self, statement: str, params: Any = ()) -> list[dict[str, Any]]:
        return self.db.query_dicts(self.dialect.sql(statement), params)

    def execute(self, statement: str, params: Any = ()) -> int:
        return self.db.execute(self.dialect.sql(statement), params)

    def write(self, statement: str, params: Any = ()) -> int:
        """:meth:`execute` of one write that stands alone (atomic, in the dialect's way)."""
        if not self.dialect.lone_write_transaction:
            return self.execute(statement, params)
        with self.db.transaction():
            return self.execute(statement, params)
