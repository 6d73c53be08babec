"""Fixtures of the service tests: the loopback OpenAI-compatible embeddings server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from openai_server import EmbeddingsServer, serve


@pytest.fixture
def server() -> Iterator[EmbeddingsServer]:
    """A loopback OpenAI-compatible embeddings server that takes the key ``KEY``."""
    yield from serve()
