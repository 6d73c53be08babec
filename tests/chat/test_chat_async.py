"""Async turns: retrieval runs off the event loop, many turns at once on one app."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from chat_fakes import RecordingLLM, index_docs, rag_context_index
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from fakes import CallLog, P, ProbeProvider, T, registry
from vancetope_rag.app import RagApp
from vancetope_rag.integrations.llamaindex.llm import RagContextLLM

AppFactory = Callable[..., RagApp]

#: Each query embedding takes this long, as a remote provider's would.
EMBED_S = 0.2
TURNS = 50


class SlowQueries(CallLog):
    """Query embeddings take ``EMBED_S``; records how many ran at the same time."""

    def __init__(self) -> None:
        super().__init__()
        self.running = 0
        self.peak = 0
        self.threads: set[str] = set()
        self._guard = threading.Lock()

    def clear(self) -> None:
        super().clear()
        self.peak = 0
        self.threads.clear()

    def __call__(self, kind: str, texts: list[str]) -> None:
        super().__call__(kind, texts)
        if kind != "query":
            return
        with self._guard:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.threads.add(threading.current_thread().name)
        time.sleep(EMBED_S)
        with self._guard:
            self.running -= 1


def test_fifty_concurrent_async_turns_keep_the_loop_responsive(make_app: AppFactory) -> None:
    slow = SlowQueries()
    app = make_app(provider="probe", embeddings=registry(ProbeProvider(probe=slow)))
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    app.settings.set(T, None, "rag.minScore", 0.1)
    index_docs(app)
    # One turn first: loading the tokenizer's tables once holds the GIL for a moment.
    assert app.pre_turn(T, P, ["zebra stripes"])
    slow.clear()
    inner = RecordingLLM()
    llm = RagContextLLM(inner, app, T, P)
    #: How many query embeddings were running at each beat of the loop. A turn that embedded
    #: on the loop would hold it for the whole embedding: no beat could see one running.
    seen_running: list[int] = []

    async def heartbeat(stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(0.005)
            seen_running.append(slow.running)

    async def turn(i: int) -> str:
        question = ChatMessage(role=MessageRole.USER, content=f"zebra stripes, question {i}")
        reply = await llm.achat([question])
        return reply.message.content or ""

    async def main() -> list[str]:
        stop = asyncio.Event()
        beat = asyncio.create_task(heartbeat(stop))
        try:
            return await asyncio.gather(*(turn(i) for i in range(TURNS)))
        finally:
            stop.set()
            await beat

    replies = asyncio.run(main())

    assert replies == ["ok"] * TURNS
    assert len(inner.calls) == TURNS
    for sent in inner.calls:  # every turn got its own block
        index = rag_context_index(sent)
        assert index is not None and "documents/zebra.md" in (sent[index].content or "")
    assert sorted(q for q in slow.queries) == sorted(
        f"zebra stripes, question {i}" for i in range(TURNS)
    )
    # Off the loop: turns overlapped, and the loop kept ticking while they embedded. What
    # happened, not how long it took: a busy machine stretches gaps, never these counts.
    assert slow.peak > 1 and "MainThread" not in slow.threads
    assert sum(1 for n in seen_running if n > 0) >= 2, seen_running
