"""Async turns run in the app's own threads, not the event loop's default executor,
and end with the app."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from chat_fakes import index_docs

from fakes import CallLog, P, ProbeProvider, T, registry
from vancetope_rag.app import RagApp
from vancetope_rag.errors import EngineClosedError

AppFactory = Callable[..., RagApp]


def test_async_turns_run_in_the_apps_turn_threads(make_app: AppFactory) -> None:
    app = make_app(config={"turn_workers": 3})
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    app.settings.set(T, None, "rag.minScore", 0.1)
    index_docs(app)
    seen: set[str] = set()
    original = app.pre_turn

    def recording(*args: object) -> list[str]:
        seen.add(threading.current_thread().name)
        return original(*args)  # type: ignore[arg-type]

    app.pre_turn = recording  # type: ignore[method-assign]

    async def main() -> list[list[str]]:
        # A default executor that would deadlock a turn sent to it: turns must not use it.
        loop = asyncio.get_running_loop()
        blocked = threading.Event()
        loop.set_default_executor(ThreadPoolExecutor(1))
        hog = loop.run_in_executor(None, blocked.wait)
        try:
            return await asyncio.wait_for(
                asyncio.gather(*(app.apre_turn(T, P, [f"zebra stripes {i}"]) for i in range(9))),
                timeout=30,
            )
        finally:
            blocked.set()
            await hog

    blocks = asyncio.run(main())
    assert all(b and "documents/zebra.md" in b[0] for b in blocks)
    assert seen and all(name.startswith("vrag-turn") for name in seen), seen
    assert len(seen) <= 3


def test_closing_the_app_ends_its_turn_threads(make_app: AppFactory) -> None:
    app = make_app()
    app.bring(T, P)
    assert asyncio.run(app.apre_turn(T, P, ["anything"])) == []
    threads = [t for t in threading.enumerate() if t.name.startswith("vrag-turn")]
    assert threads
    app.close()
    for t in threads:
        t.join(timeout=5)
        assert not t.is_alive()
    with pytest.raises(EngineClosedError, match="closed"):
        asyncio.run(app.apre_turn(T, P, ["anything"]))


def test_turn_workers_is_validated() -> None:
    from pydantic import ValidationError

    from vancetope_rag.config import EngineConfig

    with pytest.raises(ValidationError):
        EngineConfig(turn_workers=0)


def test_a_failing_turn_among_concurrent_ones_fails_alone(make_app: AppFactory) -> None:
    """One turn's query embedding raises while 11 others run beside it in the turn threads:
    it gets no block (AutoInject skips a failed retrieval), every other turn gets its own."""

    class Failing(CallLog):
        def __call__(self, kind: str, texts: list[str]) -> None:
            super().__call__(kind, texts)
            if kind == "query" and any("boom" in t for t in texts):
                raise RuntimeError("the model failed on this query")

    app = make_app(provider="probe", embeddings=registry(ProbeProvider(probe=Failing())))
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    app.settings.set(T, None, "rag.minScore", 0.1)
    index_docs(app)
    texts = [f"zebra stripes {i}" for i in range(11)]
    texts.insert(5, "zebra stripes boom")

    async def main() -> list[list[str]]:
        return await asyncio.gather(*(app.apre_turn(T, P, [q]) for q in texts))

    blocks = asyncio.run(main())
    assert blocks[5] == []
    assert all(b and "documents/zebra.md" in b[0] for i, b in enumerate(blocks) if i != 5)
