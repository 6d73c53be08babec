"""How a server counts a remote model's tokens: TEI's ``/tokenize`` route is asked
first, a RAG pinned with the estimate keeps it (no silent re-chunking), and the status line
says what sized the chunks."""

from __future__ import annotations

import json
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from loopback import LoopbackServer, OwnedHttp
from vancetope_rag.default_plugins import server_tokens
from vancetope_rag.default_plugins.openai import OpenAIProvider
from vancetope_rag.embeddings import EmbeddingSettings
from vancetope_rag.errors import EmbeddingConfigError
from vancetope_rag.model_profiles import (
    TOKENIZER_ESTIMATE,
    TOKENIZER_FILE,
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


def word_tokenizer(folder: Path) -> Path:
    """A tokenizer.json (Hugging Face ``tokenizers``) that reads one token per word."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = folder / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def test_a_tokenizer_the_user_names_sizes_the_chunks_and_is_pinned(tmp_path: Path) -> None:
    """``ai.embedding.tokenizer``: the model's own tokenizer.json counts exactly, without
    asking the server (nothing listens on its port), pinned by path with the RAG."""
    pytest.importorskip("tokenizers")
    path = word_tokenizer(tmp_path)
    provider = OpenAIProvider()
    new = EmbeddingSettings(
        provider="openai",
        api_key="placeholder",
        base_url="http://127.0.0.1:9/v1",
        dimension=384,
        tokenizer=str(tmp_path),  # a folder: its tokenizer.json
    )
    # a new RAG (a prefix set by hand: no input_type probe, and the dimension is the
    # profile's, so nothing is asked of the server that is not there)
    loaded = provider.load(replace(new, query_prefix="query: "), "multilingual-e5-small")
    text = "The committee reviewed the quarterly report before the meeting."
    assert len(loaded.tokenizer(text)) == len(text.split())
    assert loaded.profile is not None
    assert loaded.profile.tokenizer == TOKENIZER_FILE + str(path.resolve())
    pinned = profile_from_json(loaded.pinned_profile())
    assert pinned == loaded.profile
    assert str(path.resolve()) in provider.token_counting(pinned)
    # the pinned RAG reads the same file in any process
    again = provider.load(replace(new, pinned_profile=pinned), "multilingual-e5-small")
    assert len(again.tokenizer(text)) == len(text.split())
    # a file that is not a tokenizer is named when a RAG would pin it
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(EmbeddingConfigError, match=r"bad\.json"):
        provider.load(replace(new, tokenizer=str(bad), query_prefix="q: "), "e5-small-v2")
    # a pinned RAG that lost its file sizes by the estimate (smaller chunks, never over)
    path.unlink()
    lost = provider.load(replace(new, pinned_profile=pinned, tokenizer=None), "e5-small")
    assert lost.tokenizer is estimate_tokens
