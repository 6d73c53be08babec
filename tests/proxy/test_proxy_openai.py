"""The chat proxy with the official ``openai`` SDK as its client — sync, async, streaming —
against the proxy under uvicorn and a loopback upstream that records what it received."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from pathlib import Path

import httpx
import pytest
from proxy_process import running_proxy
from proxy_support import (
    ACME_DOCS,
    ACME_KEY,
    ACME_OFF_KEY,
    ACME_ON_KEY,
    ACME_SLOW_KEY,
    ACME_WIKI_KEY,
    GLOBEX_DOCS,
    GLOBEX_KEY,
    PROJECT,
    SECRET,
    ProxyFactory,
    base,
    key_file,
)

from chat_upstream import ChatUpstream
from request_ids import REQUEST_IDS
from vancetope_rag.api.auth import issue_token
from vancetope_rag.app import RagApp
from vancetope_rag.hookspecs import hookimpl

openai = pytest.importorskip("openai")

SYSTEM = "You are the Acme assistant."
DEVELOPER = "Answer in one sentence."
QUESTION = "How many vacation days do employees get per year?"


def client(proxy_url: str, key: str = ACME_KEY, project: str = PROJECT) -> openai.OpenAI:
    return openai.OpenAI(base_url=base(proxy_url, project), api_key=key, max_retries=0)


def conversation(question: str = QUESTION) -> list[dict[str, object]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "developer", "content": DEVELOPER},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi, how can I help?"},
        {"role": "user", "content": [{"type": "text", "text": question}]},
    ]


def blocks_in(messages: list[dict[str, object]]) -> list[int]:
    return [i for i, m in enumerate(messages) if "<rag-context>" in str(m.get("content"))]


def test_the_block_pre_turn_gives_arrives_once_after_the_system_messages(
    proxy_url: str, upstream: ChatUpstream, rag: RagApp
) -> None:
    raw = client(proxy_url).chat.completions.with_raw_response.create(
        model="echo-1", messages=conversation()
    )
    answer = raw.parse()
    assert answer.choices[0].message.content == f"echo: {QUESTION}"
    (seen,) = upstream.chats
    assert seen.body is not None
    messages = seen.body["messages"]
    assert blocks_in(messages) == [2]  # once, right after system + developer
    assert messages[:2] == conversation()[:2] and messages[3:] == conversation()[2:]
    expected = rag.pre_turn("t1", PROJECT, [QUESTION])
    assert messages[2] == {"role": "system", "content": expected[0]}
    assert "thirty vacation days" in messages[2]["content"]
    # The upstream got its own key, never the caller's.
    assert seen.headers["authorization"] == f"Bearer {upstream.key}"
    assert ACME_KEY not in json.dumps(seen.headers) + json.dumps(seen.body)
    # The client learns which sources were injected.
    assert raw.headers["x-vancetope-rag"] == "injected"
    assert raw.headers["server-timing"].startswith("rag;dur=")
    sources = json.loads(raw.headers["x-vancetope-rag-sources"])
    assert {"label": "S1", "path": "documents/vacation.md"} in sources


def test_merge_placement_appends_the_block_to_the_last_system_message(
    start_proxy: ProxyFactory, upstream: ChatUpstream, rag: RagApp
) -> None:
    url = start_proxy(placement="merge")
    client(url).chat.completions.create(model="echo-1", messages=conversation())
    messages = upstream.chats[0].body["messages"]  # type: ignore[index]
    block = rag.pre_turn("t1", PROJECT, [QUESTION])[0]
    assert [m["role"] for m in messages] == ["system", "developer", "user", "assistant", "user"]
    assert messages[1]["content"] == f"{DEVELOPER}\n\n{block}"


def test_async_streaming_passes_the_upstream_stream_through(
    proxy_url: str, upstream: ChatUpstream
) -> None:
    tool = {
        "type": "function",
        "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
    }

    async def run() -> list[object]:
        aclient = openai.AsyncOpenAI(base_url=base(proxy_url), api_key=ACME_KEY, max_retries=0)
        stream = await aclient.chat.completions.create(
            model="echo-1",
            messages=conversation(),
            stream=True,
            stream_options={"include_usage": True},
            tools=[tool],  # type: ignore[list-item]
        )
        chunks = [chunk async for chunk in stream]
        await aclient.close()
        return chunks

    chunks = asyncio.run(run())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)  # type: ignore[attr-defined]
    assert text.strip() == f"echo: {QUESTION}"
    calls = [
        c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls
    ]  # type: ignore[attr-defined]
    assert calls[0][0].function.name == "lookup"
    assert chunks[-1].usage.total_tokens == 14  # type: ignore[attr-defined]
    sent = upstream.chats[0].body
    assert sent is not None and sent["stream_options"] == {"include_usage": True}
    assert blocks_in(sent["messages"]) == [2]


def test_a_stream_arrives_byte_for_byte(proxy_url: str, upstream: ChatUpstream) -> None:
    body = {"model": "echo-1", "messages": conversation(), "stream": True}
    via = httpx.post(
        f"{base(proxy_url)}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {ACME_KEY}"},
    )
    forwarded = upstream.chats[0].body
    direct = httpx.post(
        f"{upstream.base_url}/chat/completions",
        json=forwarded,
        headers={"Authorization": f"Bearer {upstream.key}"},
    )
    assert via.status_code == direct.status_code == 200
    assert via.headers["content-type"] == "text/event-stream"
    assert via.content == direct.content and via.content.endswith(b"data: [DONE]\n\n")


def test_another_tenants_key_never_sees_this_tenants_documents(
    proxy_url: str, upstream: ChatUpstream
) -> None:
    raw = client(proxy_url, GLOBEX_KEY).chat.completions.with_raw_response.create(
        model="echo-1", messages=conversation()
    )
    sent = json.dumps(upstream.chats[0].body)
    assert "twelve vacation days" in sent  # Globex's own handbook
    for text in ACME_DOCS.values():
        assert text not in sent
    assert GLOBEX_DOCS["documents/vacation.md"] not in json.dumps(dict(raw.headers))
    # A key bound to another project of the tenant cannot reach this one.
    with pytest.raises(openai.PermissionDeniedError, match="does not grant access"):
        client(proxy_url, ACME_WIKI_KEY).chat.completions.create(
            model="echo-1", messages=conversation()
        )
    assert len(upstream.chats) == 1


def test_a_jwt_caller_gets_its_tokens_tenant_whatever_the_request_says(
    proxy_url: str, upstream: ChatUpstream
) -> None:
    token = issue_token(SECRET, subject="webui", tenant="t2", projects=[PROJECT])
    client(proxy_url, token).chat.completions.create(
        model="echo-1",
        messages=conversation(),
        extra_headers={"X-Tenant": "t1"},
        extra_body={"user": "t1", "tenant": "t1"},
    )
    sent = json.dumps(upstream.chats[0].body)
    assert "twelve vacation days" in sent and "thirty vacation days" not in sent
    assert token not in json.dumps(upstream.chats[0].headers)
    other = issue_token(SECRET, subject="webui", tenant="t2", projects=["wiki"])
    with pytest.raises(openai.PermissionDeniedError):
        client(proxy_url, other).chat.completions.create(model="echo-1", messages=conversation())


def test_an_upstream_401_reaches_the_client_without_either_key(
    start_proxy: ProxyFactory, upstream: ChatUpstream
) -> None:
    wrong = "stale-upstream-key-d00d1e"
    url = start_proxy(upstream_api_key=wrong)
    with pytest.raises(openai.AuthenticationError) as caught:
        client(url).chat.completions.create(model="echo-1", messages=conversation())
    assert caught.value.status_code == 401
    text = json.dumps(caught.value.body) + caught.value.response.text
    assert "Incorrect API key provided" in text
    assert wrong not in text and ACME_KEY not in text and upstream.key not in text
    assert upstream.chats[0].headers["authorization"] == f"Bearer {wrong}"  # it did quote it


def test_a_request_may_opt_out_by_header_or_body_field(
    proxy_url: str, upstream: ChatUpstream
) -> None:
    c = client(proxy_url)
    raw = c.chat.completions.with_raw_response.create(
        model="echo-1", messages=conversation(), extra_headers={"X-Vancetope-Rag-Inject": "off"}
    )
    c.chat.completions.create(
        model="echo-1", messages=conversation(), extra_body={"vancetope_rag": {"inject": "off"}}
    )
    assert raw.headers["x-vancetope-rag"] == "opted-out"
    for seen in upstream.chats:
        assert seen.body is not None
        assert blocks_in(seen.body["messages"]) == []
        assert "vancetope_rag" not in seen.body  # the extension never reaches the upstream
    with pytest.raises(openai.BadRequestError, match="only 'off'"):
        c.chat.completions.create(
            model="echo-1", messages=conversation(), extra_body={"vancetope_rag": {"inject": "on"}}
        )


def test_the_keys_recipe_decides_and_when_tools_present_applies(
    proxy_url: str, upstream: ChatUpstream, rag: RagApp
) -> None:
    client(proxy_url, ACME_OFF_KEY).chat.completions.create(model="echo-1", messages=conversation())
    assert blocks_in(upstream.chats[-1].body["messages"]) == []  # type: ignore[index]
    # The cascade ON defers to a rag_query tool the request declares ...
    rag.settings.set("t1", None, "rag.autoInject.whenToolsPresent", "skip")
    rag_query = {"type": "function", "function": {"name": "rag_query", "parameters": {}}}
    client(proxy_url).chat.completions.create(
        model="echo-1",
        messages=conversation(),
        tools=[rag_query],  # type: ignore[list-item]
    )
    assert blocks_in(upstream.chats[-1].body["messages"]) == []  # type: ignore[index]
    # ... an explicit recipe ON still injects.
    client(proxy_url, ACME_ON_KEY).chat.completions.create(
        model="echo-1",
        messages=conversation(),
        tools=[rag_query],  # type: ignore[list-item]
    )
    assert blocks_in(upstream.chats[-1].body["messages"]) == [2]  # type: ignore[index]
    # AUTO everywhere is OFF.
    rag.settings.set("t1", None, "rag.autoInject.enabled", "AUTO")
    raw = client(proxy_url).chat.completions.with_raw_response.create(
        model="echo-1", messages=conversation()
    )
    assert raw.headers["x-vancetope-rag"] == "off"
    assert blocks_in(upstream.chats[-1].body["messages"]) == []  # type: ignore[index]


def test_routes_other_than_chat_and_models_answer_a_clear_404(proxy_url: str) -> None:
    c = client(proxy_url)
    with pytest.raises(openai.NotFoundError, match="serves only"):
        c.responses.create(model="echo-1", input="hi")
    with pytest.raises(openai.NotFoundError, match="serves only"):
        c.embeddings.create(model="echo-1", input="hi")
    for path in ("/v1/chat/completions", "/", "/p/handbook/v2/chat/completions"):
        r = httpx.post(proxy_url + path, json={}, headers={"Authorization": f"Bearer {ACME_KEY}"})
        assert r.status_code == 404 and "base URL" in r.json()["error"]["message"]
    r = httpx.get(f"{base(proxy_url)}/chat/completions")
    assert r.status_code == 405 and r.headers["allow"] == "POST"


def test_models_pass_through(proxy_url: str, upstream: ChatUpstream) -> None:
    c = client(proxy_url)
    assert [m.id for m in c.models.list()] == ["echo-1"]
    assert c.models.retrieve("echo-2").id == "echo-2"
    assert all(r.headers["authorization"] == f"Bearer {upstream.key}" for r in upstream.received)


def test_callers_without_a_valid_key_are_refused_before_the_upstream(
    proxy_url: str, upstream: ChatUpstream
) -> None:
    for key in ("vrk_not-a-key-of-ours", "eyJhbGciOiJIUzI1NiJ9.e30.bad"):
        with pytest.raises(openai.AuthenticationError):
            client(proxy_url, key).chat.completions.create(model="echo-1", messages=conversation())
    r = httpx.post(f"{base(proxy_url)}/chat/completions", json={"messages": []})
    assert r.status_code == 401 and "Authorization: Bearer" in r.json()["error"]["message"]
    assert upstream.received == []


def test_a_keys_rate_limit_answers_429_with_retry_after(proxy_url: str) -> None:
    c = client(proxy_url, ACME_SLOW_KEY)
    c.chat.completions.create(model="echo-1", messages=conversation())
    with pytest.raises(openai.RateLimitError) as caught:
        c.chat.completions.create(model="echo-1", messages=conversation())
    assert int(caught.value.response.headers["retry-after"]) >= 1


def test_bodies_over_the_limit_are_refused(start_proxy: ProxyFactory) -> None:
    url = start_proxy(max_body_bytes=4096)
    with pytest.raises(openai.APIStatusError) as caught:
        client(url).chat.completions.create(model="echo-1", messages=conversation("x" * 5000))
    assert caught.value.status_code == 413
    assert "VANCETOPE_RAG_PROXY_MAX_BODY_BYTES" in caught.value.message


def test_bad_request_bodies_get_a_400_that_says_why(proxy_url: str) -> None:
    auth = {"Authorization": f"Bearer {ACME_KEY}"}
    url = f"{base(proxy_url)}/chat/completions"
    r = httpx.post(url, content=b"{not json", headers=auth)
    assert r.status_code == 400 and "invalid JSON" in r.json()["error"]["message"]
    r = httpx.post(url, json={"model": "m", "messages": [1]}, headers=auth)
    assert r.status_code == 400 and "messages[0]" in r.json()["error"]["message"]


def test_a_client_that_gives_up_cancels_the_upstream_request(
    proxy_url: str, upstream: ChatUpstream
) -> None:
    upstream.delay_s = 3.0  # the model "thinks"; the client waits 0.5 s
    c = openai.OpenAI(base_url=base(proxy_url), api_key=ACME_KEY, max_retries=0, timeout=0.5)
    with pytest.raises(openai.APITimeoutError):
        c.chat.completions.create(model="echo-1", messages=conversation())
    assert upstream.aborted.wait(2.0), "the upstream request went on after the client left"
    upstream.aborted.clear()
    upstream.delay_s = 0.3  # now mid-stream: the client reads one chunk and leaves
    with httpx.stream(
        "POST",
        f"{base(proxy_url)}/chat/completions",
        json={"model": "echo-1", "messages": conversation(), "stream": True},
        headers={"Authorization": f"Bearer {ACME_KEY}"},
    ) as r:
        next(r.iter_raw())
    assert upstream.aborted.wait(2.0), "the upstream stream went on after the client left"


class BrokenPlugin:
    """A third-party pre-turn plugin with a bug."""

    @hookimpl
    def pre_turn(self) -> list[str]:
        raise RuntimeError("plugin bug")


def test_our_own_failure_never_blocks_the_turn(
    proxy_url: str, upstream: ChatUpstream, rag: RagApp
) -> None:
    rag.plugins.register(BrokenPlugin())
    raw = client(proxy_url).chat.completions.with_raw_response.create(
        model="echo-1", messages=conversation()
    )
    assert raw.parse().choices[0].message.content == f"echo: {QUESTION}"
    assert raw.headers["x-vancetope-rag"] == "failed"
    assert blocks_in(upstream.chats[0].body["messages"]) == []  # type: ignore[index]


def test_cors_is_off_unless_origins_are_set(start_proxy: ProxyFactory) -> None:
    preflight = {
        "Origin": "https://chat.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    closed = start_proxy()
    r = httpx.options(f"{base(closed)}/chat/completions", headers=preflight)
    assert "access-control-allow-origin" not in r.headers
    opened = start_proxy(cors_origins="https://chat.example")
    r = httpx.options(f"{base(opened)}/chat/completions", headers=preflight)
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "https://chat.example"
    r = httpx.post(
        f"{base(opened)}/chat/completions",
        json={"model": "echo-1", "messages": conversation()},
        headers={"Authorization": f"Bearer {ACME_KEY}", "Origin": "https://chat.example"},
    )
    assert "x-vancetope-rag-sources" in r.headers["access-control-expose-headers"]


def test_the_proxy_command_serves_with_the_upstream_key_from_the_environment(
    rag: RagApp, upstream: ChatUpstream, tmp_path: Path
) -> None:
    keys = key_file(tmp_path / "keys.yaml")
    with running_proxy(rag.config.store, upstream, keys, tmp_path) as process:
        answer = client(process.url).chat.completions.create(
            model="echo-1", messages=conversation()
        )
        assert answer.choices[0].message.content == f"echo: {QUESTION}"
        assert blocks_in(upstream.chats[-1].body["messages"]) == [2]  # type: ignore[index]
        assert upstream.chats[-1].headers["authorization"] == f"Bearer {upstream.key}"
        process.child.terminate()
        assert process.child.wait(20) == 0


def test_an_unreachable_upstream_is_a_502_that_names_no_key(start_proxy: ProxyFactory) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    url = start_proxy(upstream=dead)
    with pytest.raises(openai.InternalServerError) as caught:
        client(url).chat.completions.create(model="echo-1", messages=conversation())
    assert caught.value.status_code == 502
    assert "cannot reach the upstream" in caught.value.message
    assert ACME_KEY not in caught.value.response.text


def test_an_upstream_silent_past_the_timeout_is_a_504(
    start_proxy: ProxyFactory, upstream: ChatUpstream
) -> None:
    url = start_proxy(timeout_s=0.3)
    upstream.delay_s = 2.0
    with pytest.raises(openai.APIStatusError) as caught:
        client(url).chat.completions.create(model="echo-1", messages=conversation())
    assert caught.value.status_code == 504
    assert "did not answer" in caught.value.message


def test_access_records_carry_their_numbers_as_fields(
    proxy_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """What a JSON log formatter turns into fields: method, route template, status, duration
    and request id, on the ``vancetope_rag.access`` logger."""
    caplog.set_level(logging.INFO, logger="vancetope_rag.access")
    client(proxy_url).chat.completions.create(
        model="echo-1", messages=conversation(), extra_headers={"X-Request-Id": "fields-1"}
    )
    deadline = time.monotonic() + 10
    while not [r for r in caplog.records if getattr(r, "request_id", None) == "fields-1"]:
        assert time.monotonic() < deadline, "no access record"
        time.sleep(0.02)
    record = next(r for r in caplog.records if getattr(r, "request_id", None) == "fields-1")
    assert record.name == "vancetope_rag.access" and record.levelno == logging.INFO
    fields = {k: getattr(record, k) for k in ("method", "route", "status")}
    assert fields == {"method": "POST", "route": "/p/{project}/v1/chat/completions", "status": 200}
    assert isinstance(record.duration_ms, float) and record.duration_ms > 0
    assert ACME_KEY not in record.getMessage() and QUESTION not in record.getMessage()


@pytest.mark.parametrize(("given", "kept"), REQUEST_IDS)
def test_the_proxy_keeps_a_request_id_by_the_rule_serve_keeps_it(
    proxy_url: str, upstream: ChatUpstream, given: str, kept: bool
) -> None:
    before = len(upstream.received)
    headers = {"Authorization": f"Bearer {ACME_KEY}", "X-Request-Id": given}
    body = {"model": "echo-1", "messages": conversation()}
    answer = httpx.post(f"{base(proxy_url, PROJECT)}/chat/completions", headers=headers, json=body)
    assert answer.status_code == 200, answer.text
    sent = upstream.received[before:][0].headers.get("x-request-id")
    assert (sent == given) is kept
    assert sent and len(sent) <= 128 and " " not in sent


def test_probe_access_lines_are_debug_like_serves(
    proxy_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Probes and scrapes come every few seconds: DEBUG on the proxy as on ``serve`` (they
    were INFO on the proxy)."""
    caplog.set_level(logging.DEBUG, logger="vancetope_rag.access")
    for path in ("/healthz", "/readyz", "/metrics"):
        assert httpx.get(proxy_url + path, headers={"X-Request-Id": f"probe-{path[1:]}"}).is_success
    client(proxy_url).chat.completions.create(
        model="echo-1", messages=conversation(), extra_headers={"X-Request-Id": "chat-1"}
    )
    wanted = {"probe-healthz", "probe-readyz", "probe-metrics", "chat-1"}
    deadline = time.monotonic() + 10
    while not wanted <= {getattr(r, "request_id", None) for r in caplog.records}:
        assert time.monotonic() < deadline, "no access record"
        time.sleep(0.02)
    levels = {
        r.request_id: r.levelname  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "request_id", None) in wanted
    }
    assert levels == {
        "probe-healthz": "DEBUG",
        "probe-readyz": "DEBUG",
        "probe-metrics": "DEBUG",
        "chat-1": "INFO",
    }


def test_readyz_says_unavailable_like_serve_and_worker(proxy_url: str, tmp_path: Path) -> None:
    """One word for a 503 ``/readyz`` on every process (the proxy said ``not ready``)."""
    (tmp_path / "keys.yaml").write_text("", encoding="utf-8")  # the key file fails to load
    ready = httpx.get(proxy_url + "/readyz")
    assert ready.status_code == 503
    assert ready.json()["status"] == "unavailable"
    assert "key file" in ready.json()["reason"]
