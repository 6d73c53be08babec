"""The worker's /metrics endpoint (:func:`serve_metrics`): the token as the REST API's."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loopback import ipv6_loopback
from vancetope_rag.metrics import Metrics, serve_metrics

TOKEN = "metrics-token-5f1c2e9a7b"


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize("token", [None, TOKEN])
def test_worker_metrics_endpoint(token: str | None) -> None:
    metrics = Metrics()
    metrics.indexed_documents.labels(result="written").inc(2)
    server = serve_metrics(metrics, "127.0.0.1", 0, token=token)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        if token:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
                code, body = _get(f"{base}/metrics", headers)
                assert code == 401 and token not in body
        code, body = _get(f"{base}/metrics", {"Authorization": f"Bearer {token}"})
        assert code == 200
        names = {f.name for f in text_string_to_metric_families(body)}
        assert {"vance_rag_indexed_documents", "vance_rag_documents"} <= names
        assert _get(f"{base}/elsewhere")[0] == 404
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_worker_metrics_endpoint_serves_on_ipv6() -> None:
    """Before, ``--metrics-host ::1`` (or ``::``) failed: the server was IPv4 only."""
    metrics = Metrics()
    server = serve_metrics(metrics, "::1", 0)
    try:
        code, body = _get(f"http://[::1]:{server.server_address[1]}/metrics")
        assert code == 200
        assert "vance_rag_indexed_documents" in {
            f.name for f in text_string_to_metric_families(body)
        }
    finally:
        server.shutdown()
        server.server_close()
