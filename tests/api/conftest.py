"""Fixtures of the REST API and web UI tests: apps on a real SQLite store, a test client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from api_support import SECRET, ApiAppFactory, api_providers
from fastapi.testclient import TestClient

from fakes import P, T, registry
from vancetope_rag.api import create_api
from vancetope_rag.app import RagApp


@pytest.fixture
def make_api_app(make_app: Callable[..., RagApp]) -> ApiAppFactory:
    """Apps with the JWT secret set and project t1/p1 brought up."""

    def factory(provider: str = "hashing", **config: Any) -> RagApp:
        app = make_app(
            provider=provider,
            embeddings=registry(*api_providers()),
            config={"jwt_secret": SECRET, "max_attempts": 1, **config},
        )
        app.bring(T, P)
        return app

    return factory


@pytest.fixture
def api_app(make_api_app: ApiAppFactory) -> RagApp:
    return make_api_app()


@pytest.fixture
def client(api_app: RagApp) -> Iterator[TestClient]:
    with TestClient(create_api(api_app)) as c:
        yield c
