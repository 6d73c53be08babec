"""Shared fixtures: a real SQLite store in tmp_path and apps wired around it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import postgres_support
from media_makers import LEGACY_DOC, LEGACY_PPT, LEGACY_XLS, legacy_office
from vancetope_rag.app import RagApp
from vancetope_rag.config import EngineConfig

# The embedded model serves on torch in tests unless a test prepares ONNX Runtime itself
# (tests/plugins/test_embedded_onnx.py): no export in the user's cache, no timing-dependent
# backend under the other tests.
os.environ.setdefault("VANCETOPE_RAG_EMBEDDED_BACKEND", "torch")
# The vector pass's kernel choice is measured and stored per machine: each test process
# (xdist worker) keeps its own, never the user's ~/.cache, and no two workers write one file.
os.environ.setdefault(
    "VANCETOPE_RAG_KERNEL_CACHE_DIR", tempfile.mkdtemp(prefix="vtr-test-kernels-")
)


class FakeClock:
    """A settable clock for lease/backoff tests (no sleeps)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the cores, at most 4. Many tests wait on what they
    started (a server, a worker process, LibreOffice) and leave their core idle meanwhile;
    the extra worker fills it (the figures: docs/testing.md)."""
    return min((os.cpu_count() or 1) + 1, 4)


@pytest.fixture(scope="session", autouse=True)
def _postgres_server() -> Iterator[None]:
    """The PostgreSQL server ``postgres_support`` starts on first use, stopped at the end."""
    yield
    postgres_support.shutdown()


@pytest.fixture(scope="session")
def legacy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """``report.doc``, ``budget.xls`` and ``deck.ppt`` saved by LibreOffice, each holding its
    ``media_makers.LEGACY_*`` sentence: made once per session (a LibreOffice start costs
    seconds) for every test that reads legacy Office files."""
    if shutil.which("soffice") is None:
        pytest.skip("LibreOffice is not installed (Debian's libreoffice-*-nogui)")
    return legacy_office(tmp_path_factory.mktemp("legacy"), LEGACY_DOC, LEGACY_XLS, LEGACY_PPT)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'rag.db'}"


def make_config(store_uri: str, **overrides: object) -> EngineConfig:
    base: dict[str, object] = {
        "store": store_uri,
        "node_id": "test-node",
        "indexer_initial_delay_s": 0.0,
        "indexer_interval_s": 0.05,
        "retry_backoff_s": 0.0,
        "claim_ttl_s": 60.0,
    }
    base.update(overrides)
    return EngineConfig(**base)  # type: ignore[arg-type]


AppFactory = Callable[..., RagApp]


@pytest.fixture
def make_app(store_uri: str) -> Iterator[AppFactory]:
    """Build apps on the test's store. ``provider`` sets the tenant's embedding provider."""
    apps: list[RagApp] = []

    def factory(
        *, provider: str | None = "hashing", tenant: str = "t1", **kwargs: object
    ) -> RagApp:
        config_overrides = kwargs.pop("config", {})
        assert isinstance(config_overrides, dict)
        app = RagApp.open(make_config(store_uri, **config_overrides), **kwargs)  # type: ignore[arg-type]
        if provider is not None:
            app.settings.set(tenant, None, "ai.embedding.provider", provider)
        apps.append(app)
        return app

    yield factory
    for app in apps:
        app.close()


@pytest.fixture
def app(make_app: AppFactory) -> RagApp:
    """An app on a fresh store; tenant t1 uses the fast lexical ``hashing`` provider."""
    return make_app()


@pytest.fixture
def embedded_app(make_app: AppFactory) -> RagApp:
    """An app whose tenant t1 uses the real embedded all-MiniLM-L6-v2 model."""
    return make_app(provider="embedded")
