"""Red team: a caller holding one valid proxy key attacks a running ``vancetope-rag proxy``
process, and an operator probes its health, metrics and logs.

The upstream is the loopback chat server, which records every request it receives and
answers ``/v1/files`` with other tenants' uploads on the same account: what a path that
escapes ``/models`` would reach with the operator's key. Requests go out through a raw HTTP
client (:func:`proxy_process.raw_request`): httpx and requests clean ``../`` before sending.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proxy_process import ProxyProcess, prepared_store, running_proxy
from proxy_support import (
    ACME_KEY,
    FIVE_A_MINUTE,
    GLOBEX_FIVE_KEY,
    PROJECT,
    SECRET,
    key_file,
)

from chat_upstream import LEAKY, LEAKY_401, OTHER_TENANTS_FILES, ChatUpstream, running_upstream
from loopback import Answer, raw_request
from vancetope_rag.api.auth import issue_token
from vancetope_rag.proxy import hash_key

pytest.importorskip("uvicorn", reason="needs the 'server' extra")

METRICS_TOKEN = "metrics-token-for-the-red-team-5d1e"
QUESTION = "How many vacation days do employees get per year?"
CHAT = f"/p/{PROJECT}/v1/chat/completions"
ACME = {"Authorization": f"Bearer {ACME_KEY}", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[ChatUpstream]:
    with running_upstream() as server:
        yield server


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return prepared_store(tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="module")
def proxy(
    store: str, upstream: ChatUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyProcess]:
    directory = tmp_path_factory.mktemp("proxy")
    keys = key_file(directory / "keys.yaml")
    env = {
        "VANCETOPE_RAG_METRICS_TOKEN": METRICS_TOKEN,
        # Keys without a rate of their own are not limited: the fuzzer sends many requests.
        "VANCETOPE_RAG_PROXY_REQUESTS_PER_MINUTE": "0",
    }
    with running_proxy(store, upstream, keys, directory, env) as process:
        yield process


def chat_body(model: str = "echo-1", *, stream: bool = False, question: str = QUESTION) -> bytes:
    messages = [{"role": "user", "content": question}]
    return json.dumps({"model": model, "messages": messages, "stream": stream}).encode()


def leaks(answer: Answer, *secrets: str) -> list[str]:
    """Where any of ``secrets`` shows in ``answer``: header names or 'body'."""
    found = [name for name, value in answer.headers if any(s in value for s in secrets)]
    return found + (["body"] if any(s.encode() in answer.body for s in secrets) else [])


# -- 1. the model route never reaches past /models ------------------------------------------

TRAVERSALS = (
    "/p/handbook/v1/models/../files",  # plain
    "/p/handbook/v1/models/%2e%2e/files",  # encoded dots
    "/p/handbook/v1/models/..%2ffiles",  # encoded slash
    "/p/handbook/v1/models/%2E%2E%2Fbatches",  # all encoded, upper case
    "/p/handbook/v1/models/%252e%252e%252ffiles",  # double encoding
    "/p/handbook/v1/models/..\\files",  # backslash
    "/p/handbook/v1/models/..%5cfiles",  # encoded backslash
    "/p/handbook/v1/models/echo-1%00/../../files",  # NUL
    "/p/handbook/v1/models/./../files",  # dot segment
    "/p/handbook/v1/models/echo-1/../../files",  # back out of a good id
    "/p/handbook/v1%2Fmodels/../files",  # the route's own slash encoded
)


@pytest.mark.parametrize("path", TRAVERSALS)
def test_a_model_path_never_reaches_past_the_models_route(
    proxy: ProxyProcess, upstream: ChatUpstream, path: str
) -> None:
    before = len(upstream.received)
    answer = raw_request(proxy.url, "GET", path, {"Authorization": f"Bearer {ACME_KEY}"})
    reached = [r.path for r in upstream.received[before:]]
    assert (answer.status, reached) == (404, []), answer.text
    assert OTHER_TENANTS_FILES not in answer.text
    assert "model" in json.loads(answer.body)["error"]["message"]


@pytest.mark.parametrize(
    ("sent", "forwarded"),
    [
        ("echo-2", "/v1/models/echo-2"),
        ("meta-llama/Llama-3.1-8B-Instruct", "/v1/models/meta-llama/Llama-3.1-8B-Instruct"),
        # the openai SDK's own spelling of a model id with a slash
        ("meta-llama%2FLlama-3.1-8B-Instruct", "/v1/models/meta-llama/Llama-3.1-8B-Instruct"),
        ("openai/gpt-4o", "/v1/models/openai/gpt-4o"),
        ("llama3.1:8b", "/v1/models/llama3.1:8b"),
        ("", "/v1/models"),  # models/ is the list
    ],
)
def test_model_ids_with_segments_are_forwarded_on_a_path_the_proxy_builds(
    proxy: ProxyProcess, upstream: ChatUpstream, sent: str, forwarded: str
) -> None:
    before = len(upstream.received)
    answer = raw_request(
        proxy.url, "GET", f"/p/{PROJECT}/v1/models/{sent}", {"Authorization": f"Bearer {ACME_KEY}"}
    )
    assert answer.status == 200, answer.text
    assert [r.path for r in upstream.received[before:]] == [forwarded]


# -- 2. one budget per key, spent by every route ----------------------------------------------


def test_a_keys_budget_is_one_bucket_across_projects_and_routes(proxy: ProxyProcess) -> None:
    auth = {"Authorization": f"Bearer {GLOBEX_FIVE_KEY}"}
    statuses = [
        raw_request(proxy.url, "GET", f"/p/project-{i}/v1/models", auth).status
        for i in range(FIVE_A_MINUTE + 3)
    ]
    assert statuses == [200] * FIVE_A_MINUTE + [429] * 3
    refused = raw_request(
        proxy.url,
        "POST",
        "/p/another/v1/chat/completions",
        {**auth, "Content-Type": "application/json"},
        chat_body(),
    )
    assert refused.status == 429
    assert int(refused.header("retry-after") or 0) >= 1
    assert "key" in json.loads(refused.body)["error"]["message"]


# -- 3. the upstream's key never comes back ---------------------------------------------------

#: Response headers a client may see: the allow-list, and the proxy's own.
ALLOWED = {
    "content-type",
    "content-length",
    "cache-control",
    "transfer-encoding",
    "date",
    "server",
    "x-request-id",
    "x-vancetope-rag",
    "x-vancetope-rag-sources",
    "server-timing",
}


def _check_scrubbed(answer: Answer, upstream: ChatUpstream) -> None:
    assert leaks(answer, upstream.key) == []
    names = {name for name, _ in answer.headers}
    extra = {n for n in names - ALLOWED if not n.startswith("x-ratelimit-")}
    assert extra == set(), f"headers passed that are not on the allow-list: {extra}"


@pytest.mark.parametrize("stream", [False, True])
def test_a_key_echoed_in_a_200_answer_never_reaches_the_caller(
    proxy: ProxyProcess, upstream: ChatUpstream, stream: bool
) -> None:
    answer = raw_request(proxy.url, "POST", CHAT, ACME, chat_body(LEAKY, stream=stream))
    assert answer.status == 200, answer.text
    _check_scrubbed(answer, upstream)
    assert answer.header("x-request-id") == "req-upstream-1"  # what a client needs stays
    assert answer.header("x-ratelimit-remaining-requests") == "99"
    if stream:
        assert answer.body.endswith(b"data: [DONE]\n\n")
        assert b"data: ********\n\n" in answer.body  # scrubbed across the chunk boundary


@pytest.mark.parametrize("model", [LEAKY, LEAKY_401])
def test_a_key_echoed_by_the_models_route_never_reaches_the_caller(
    proxy: ProxyProcess, upstream: ChatUpstream, model: str
) -> None:
    path = f"/p/{PROJECT}/v1/models/{model}"
    answer = raw_request(proxy.url, "GET", path, {"Authorization": f"Bearer {ACME_KEY}"})
    assert answer.status == (401 if model == LEAKY_401 else 200)
    _check_scrubbed(answer, upstream)


def test_a_scrubbed_stream_is_passed_on_as_it_comes(
    proxy: ProxyProcess, upstream: ChatUpstream
) -> None:
    import http.client
    from urllib.parse import urlparse

    where = urlparse(proxy.url)
    upstream.finished.clear()
    upstream.delay_s = 0.3
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
    try:
        conn.request("POST", CHAT, chat_body(LEAKY, stream=True, question="hi there"), ACME)
        response = conn.getresponse()
        assert response.status == 200
        first = response.readline()
        assert first.startswith(b"data: ")
        assert not upstream.finished.is_set(), "the first event came only after the last"
        response.read()
    finally:
        upstream.delay_s = 0.0
        conn.close()


# -- 4. revocation that works: a key file that fails to load admits no key --------------------


def test_a_key_file_that_fails_to_load_admits_no_proxy_key_until_it_is_fixed(
    store: str, upstream: ChatUpstream, tmp_path: Path
) -> None:
    keys = key_file(tmp_path / "keys.yaml")
    good = keys.read_text(encoding="utf-8")
    token = issue_token(SECRET, subject="webui", tenant="t1", projects=[PROJECT])

    def status(credential: str = ACME_KEY) -> int:
        auth = {"Authorization": f"Bearer {credential}", "Content-Type": "application/json"}
        return raw_request(process.url, "POST", CHAT, auth, chat_body()).status

    def replace(text: str) -> None:  # what docs/proxy.md tells operators: write, then rename
        new = tmp_path / "keys.yaml.new"
        new.write_text(text, encoding="utf-8")
        os.replace(new, keys)

    with running_proxy(store, upstream, keys, tmp_path) as process:
        assert status() == 200
        keys.write_text("", encoding="utf-8")  # emptied (0 bytes)
        assert [status(), status(), status()] == [503, 503, 503]
        assert status(token) == 200  # JWT callers are not affected
        ready = raw_request(process.url, "GET", "/readyz")
        assert ready.status == 503 and "key file" in ready.text
        assert process.log().count("no proxy key is accepted") == 1  # said once
        replace(good)
        assert status() == 200
        assert raw_request(process.url, "GET", "/readyz").status == 200
        keys.unlink()  # deleted
        assert status() == 503
        replace("keys: [{name: broken")  # invalid
        assert status() == 503
        replace("keys: []")  # the way to say "no keys": valid, and ready
        assert status() == 401
        assert raw_request(process.url, "GET", "/readyz").status == 200
        entry = {"name": "acme", "hash": hash_key(ACME_KEY), "tenant": "t1", "projects": ["*"]}
        replace(yaml.safe_dump({"keys": [entry | {"projects": "*"}]}))
        assert status() == 200
        log = process.log()
    assert ACME_KEY not in log and upstream.key not in log


# -- 5. no 500 from a request -----------------------------------------------------------------


def test_deeply_nested_json_is_a_400_that_names_the_limit(proxy: ProxyProcess) -> None:
    for body in (b"[" * 200_000, b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}"):
        answer = raw_request(proxy.url, "POST", CHAT, ACME, body)
        assert answer.status == 400, answer.text
        message = json.loads(answer.body)["error"]["message"]
        assert "nest" in message and "64" in message


def test_a_request_id_that_is_not_ascii_is_dropped_not_a_500(
    proxy: ProxyProcess, upstream: ChatUpstream
) -> None:
    before = len(upstream.received)
    bad = {**ACME, "X-Request-Id": "réq-ü-1".encode()}
    assert raw_request(proxy.url, "POST", CHAT, bad, chat_body()).status == 200
    good = {**ACME, "X-Request-Id": "client-req-7"}
    assert raw_request(proxy.url, "POST", CHAT, good, chat_body()).status == 200
    sent = [r.headers.get("x-request-id") for r in upstream.received[before:]]
    assert sent[1] == "client-req-7"
    assert sent[0] is None or sent[0].isascii()


_HEADER_VALUES = st.binary(max_size=60).map(
    lambda b: bytes(c for c in b if c >= 0x20 and c != 0x7F)
) | st.sampled_from([b"off", b"application/json", "réq-ü".encode(), b"\xff\xfe", b""])
_HEADERS = st.dictionaries(
    st.sampled_from(
        [
            "X-Request-Id",
            "User-Agent",
            "Content-Type",
            "Accept",
            "Accept-Encoding",
            "X-Vancetope-Rag-Inject",
            "Origin",
        ]
    ),
    _HEADER_VALUES,
    max_size=4,
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "developer", "assistant", "tool", 3])},
    optional={"content": _JSON | st.text(max_size=40)},
)
_CHAT = st.fixed_dictionaries(
    {"messages": st.lists(_MESSAGE, min_size=1, max_size=4) | _JSON},
    optional={
        "model": st.text(max_size=10) | _JSON,
        "stream": st.booleans() | _JSON,
        "tools": _JSON,
        "vancetope_rag": st.fixed_dictionaries({"inject": _JSON}) | _JSON,
    },
).map(lambda body: json.dumps(body).encode())
_BODIES = (
    _CHAT
    | _JSON.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=200)
    | st.integers(1, 300).map(lambda n: b"[" * n + b"]" * n)
    | st.integers(1, 300).map(lambda n: b'{"a":' * n + b"1" + b"}" * n)
)
_MODEL_PATHS = st.text(alphabet="abc./\\%2eEfF05:-_", max_size=16)
_PROJECTS = st.just(PROJECT) | st.text(alphabet="ab.%2eEfF5c_-~", min_size=1, max_size=8)
#: Mostly a valid key (to get past the gate), else what a prober sends: JWT-shaped garbage,
#: other schemes, bytes that are not UTF-8.
_AUTHORIZATION = st.sampled_from([f"Bearer {ACME_KEY}".encode()] * 3) | st.one_of(
    st.binary(max_size=40).map(lambda b: b"Bearer " + b.replace(b"\r", b"").replace(b"\n", b"")),
    st.lists(st.text(alphabet="abcXYZ012-_é", max_size=12), min_size=3, max_size=3).map(
        lambda parts: ("Bearer " + ".".join(parts)).encode()
    ),
    st.sampled_from([b"Basic YTpi", b"Bearer", b"", "Bearer vrk_é".encode()]),
)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    body=_BODIES,
    headers=_HEADERS,
    auth=_AUTHORIZATION,
    project=_PROJECTS,
    model=_MODEL_PATHS,
    stream=st.booleans(),
)
def test_no_request_makes_the_proxy_answer_5xx(
    proxy: ProxyProcess,
    body: bytes,
    headers: dict[str, bytes],
    auth: bytes,
    project: str,
    model: str,
    stream: bool,
) -> None:
    sent = {"Authorization": auth, **headers}
    if stream:  # a chat body as an OpenAI client sends it, the headers fuzzed
        body = chat_body(stream=True)
    answer = raw_request(proxy.url, "POST", f"/p/{project}/v1/chat/completions", sent, body)
    assert answer.status < 500, answer.text
    answer = raw_request(proxy.url, "GET", f"/p/{project}/v1/models/{model}", sent)
    assert answer.status < 500, answer.text
    assert "Traceback" not in proxy.log()  # nor an error after the answer started


#: The proxy's default body limit (16 MiB): more than the sockets' buffers hold, so a body of
#: that size is still arriving when the proxy has answered.
LIMIT = 16 * 1024 * 1024


@pytest.mark.parametrize(
    ("authorization", "more", "size", "status"),
    [
        (b"Bearer \x00\xff", {}, LIMIT, 400),  # uvicorn's own 400: a header it cannot parse
        (f"Bearer {ACME_KEY}".encode(), {}, LIMIT + 1, 413),  # the body limit
        (b"Bearer vrk_unknown", {"Connection": "close"}, LIMIT, 401),  # the client asks to close
    ],
)
def test_a_refused_request_gets_its_answer_not_a_connection_reset(
    proxy: ProxyProcess, authorization: bytes, more: dict[str, str], size: int, status: int
) -> None:
    """The proxy answers these before reading the body, then closes the connection. Before,
    it closed while the body was still arriving: the kernel then resets the connection, and
    the client (sending its body, then reading) got ECONNRESET instead of the answer; under
    load, a small body sent after its headers (as http.client sends it) was enough."""
    headers = {"Authorization": authorization, "Content-Type": "application/json", **more}
    answer = raw_request(proxy.url, "POST", CHAT, headers, b"x" * size)
    assert answer.status == status, answer.text


def test_a_client_that_stops_sending_a_refused_body_is_not_waited_for(
    proxy: ProxyProcess,
) -> None:
    """A client that stops halfway through its body gets the 413 and the end of the answer at
    once. How long the proxy lingers then is bounded (tests/api/test_api_lingering.py waits
    the bounds out with shorter ones)."""
    port = int(proxy.url.rsplit(":", 1)[1])
    head = f"POST {CHAT} HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer {ACME_KEY}\r\n"
    head += f"Content-Length: {LIMIT + 1}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode() + b"x" * 1024 * 1024)
        answer = b""
        while chunk := sock.recv(65536):  # until the proxy's side ends
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 413 "), answer


# -- 6, 7, 9: health, metrics, access lines ---------------------------------------------------


def test_health_routes_answer_without_credentials(proxy: ProxyProcess) -> None:
    live = raw_request(proxy.url, "GET", "/healthz")
    assert live.status == 200 and json.loads(live.body)["status"] == "ok"
    ready = raw_request(proxy.url, "GET", "/readyz")
    assert ready.status == 200, ready.text
    assert json.loads(ready.body)["status"] == "ready"


def test_metrics_count_requests_injections_refusals_and_reloads(proxy: ProxyProcess) -> None:
    assert raw_request(proxy.url, "POST", CHAT, ACME, chat_body()).status == 200
    answer = raw_request(proxy.url, "GET", "/metrics")
    assert answer.status == 401
    answer = raw_request(proxy.url, "GET", "/metrics", {"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert answer.status == 200
    text = answer.text
    for line in (
        'vance_rag_http_requests_total{method="POST",route="/p/{project}/v1/chat/completions",'
        'status="200"}',
        'vance_rag_proxy_injections_total{outcome="injected"}',
        'vance_rag_proxy_injections_total{outcome="skipped"}',
        "vance_rag_proxy_upstream_seconds_count",
        "vance_rag_proxy_rate_limited_total",
        'vance_rag_proxy_key_file_reloads_total{outcome="failed"}',
        "process_cpu_seconds_total",
        "python_info",
    ):
        assert line in text, line
    injected = next(
        line
        for line in text.splitlines()
        if line.startswith("vance_rag_proxy_injections_total") and 'outcome="injected"' in line
    )
    assert float(injected.rsplit(" ", 1)[1]) >= 1


def test_access_lines_name_the_route_template_and_request_id_never_a_key_or_query(
    proxy: ProxyProcess, upstream: ChatUpstream
) -> None:
    headers = {**ACME, "X-Request-Id": "red-team-req-42"}
    path = CHAT + "?api-version=query-text-1"
    assert raw_request(proxy.url, "POST", path, headers, chat_body()).status == 200
    deadline = time.monotonic() + 10
    while "red-team-req-42" not in proxy.log():
        assert time.monotonic() < deadline, proxy.log()
        time.sleep(0.05)
    line = next(line for line in proxy.log().splitlines() if "red-team-req-42" in line)
    assert "POST" in line and "/p/{project}/v1/chat/completions" in line and " 200 " in line
    log = proxy.log()
    for secret in (ACME_KEY, upstream.key, QUESTION, "query-text-1", METRICS_TOKEN):
        assert secret not in log
