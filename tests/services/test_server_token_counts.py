"""How a server counts a remote model's tokens (issue 43): TEI's ``/tokenize`` route is asked
first, a RAG pinned with the estimate keeps it (no silent re-chunking), and the status line
says what sized the chunks."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

from loopback import LoopbackServer, OwnedHttp
from vancetope_rag.default_plugins import server_tokens
from vancetope_rag.default_plugins.openai import OpenAIProvider
from vancetope_rag.embeddings import EmbeddingSettings
from vancetope_rag.model_profiles import (
    TOKENIZER_ESTIMATE,
    TOKENIZER_SERVER_TOKENIZE,
    estimate_tokens,
    known_profile,
    profile_from_json,
    profile_to_json,
)


class _Tei(BaseHTTPRequestHandler):
    """TEI's ``POST /tokenize``: one token per word here; any other route is a 404."""

    server: OwnedHttp

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        owner = self.server.owner
        with owner.lock:
            owner.seen.append((self.path, body))
        if self.path != "/tokenize":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        tokens = [
            [{"id": i, "text": w, "special": False} for i, w in enumerate(text.split())]
            for text in body["inputs"]
        ]
        out = json.dumps(tokens).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def test_the_tokenize_route_counts_without_embedding_anything() -> None:
    tei: LoopbackServer[tuple[str, dict[str, Any]]] = LoopbackServer(_Tei)
    tei.up()
    try:
        found = server_tokens.measure(
            base_url=f"http://127.0.0.1:{tei.port}/v1",
            api_key="placeholder",
            client=None,  # never asked: /tokenize answered
            model="e5",
            input_type="passage",
            prefix="",
            special_tokens=2,
        )
    finally:
        tei.down()
    assert [path for path, _ in tei.seen] == ["/tokenize"]
    assert tei.seen[0][1]["add_special_tokens"] is False
    words = [len(t.split()) / len(estimate_tokens(t)) for t in server_tokens.CALIBRATION_TEXTS]
    assert found == (TOKENIZER_SERVER_TOKENIZE, round(max(words) * server_tokens.MARGIN, 3))


def test_a_rag_pinned_with_the_estimate_keeps_it_and_status_says_so() -> None:
    """A RAG created before server counts is not re-chunked behind its back: its pinned
    profile keeps the estimate (a rebuild adopts the server's counts), with no call."""
    e5 = known_profile("intfloat/multilingual-e5-small")
    assert e5 is not None and e5.tokenizer == TOKENIZER_ESTIMATE
    pinned = profile_from_json(profile_to_json(e5))
    assert pinned.token_ratio is None
    provider = OpenAIProvider()
    settings = EmbeddingSettings(
        provider="openai",
        api_key="placeholder",
        base_url="http://127.0.0.1:9/v1",  # nothing listens: any call would fail
        dimension=384,
        pinned_profile=pinned,
    )
    loaded = provider.load(settings, "intfloat/multilingual-e5-small")
    assert loaded.tokenizer is estimate_tokens
    assert "estimate" in provider.token_counting(pinned)


def test_the_servers_ratio_is_pinned_and_read_back() -> None:
    e5 = known_profile("multilingual-e5-small")
    assert e5 is not None
    from dataclasses import replace

    counted = replace(e5, tokenizer=TOKENIZER_SERVER_TOKENIZE, token_ratio=0.812)
    back = profile_from_json(profile_to_json(counted))
    assert back == counted
    provider = OpenAIProvider()
    loaded = provider.load(
        EmbeddingSettings(
            provider="openai",
            api_key="placeholder",
            base_url="http://127.0.0.1:9/v1",
            dimension=384,
            pinned_profile=back,
        ),
        "multilingual-e5-small",
    )
    text = "The committee reviewed the quarterly report before the meeting."
    assert len(loaded.tokenizer(text)) == -(-len(estimate_tokens(text)) * 812 // 1000)
    assert "/tokenize" in provider.token_counting(back)
