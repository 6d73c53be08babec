"""The multi-process acceptance tests of ``test_sync_multiprocess.py`` on the real PostgreSQL
store: two worker processes index every document once, and a SIGKILLed worker loses
nothing, mid-batch or mid-rebuild (its claims come back after their lease, measured on the
server's clock)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_sync_multiprocess import (  # noqa: F401 - collected here on PostgreSQL
    test_sigkill_mid_batch_loses_nothing,
    test_sigkill_mid_rebuild_resumes_and_switches_once,
    test_two_worker_processes_index_500_documents_once,
    workers,
)

import postgres_support


@pytest.fixture
def store_uri() -> Iterator[str]:
    """A fresh schema of the session's PostgreSQL server, initialised (``init``)."""
    with postgres_support.initialized_schema() as uri:
        yield uri
