"""The web UI's HTML shell and assets (the browser test drives it for real)."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_page_is_served_without_token_and_holds_no_data(client: TestClient) -> None:
    response = client.get("/ui/t1/p1")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert response.headers["referrer-policy"] == "no-referrer"
    html = response.text
    for element in ("btn-reindex", "btn-rebuild", "btn-refresh", "chunk-count", "failed-table"):
        assert f'id="{element}"' in html
    assert 'data-tenant="t1"' in html and 'data-project="p1"' in html
    assert "<script>" not in html  # no inline script: the CSP forbids it
    assert "http://" not in html and "https://" not in html  # no CDN


def test_ids_in_the_page_are_escaped(client: TestClient) -> None:
    response = client.get('/ui/t1/"><img src=x onerror=alert(1)>')
    assert response.status_code == 200
    assert "<img src=x" not in response.text
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in response.text


def test_assets_are_served(client: TestClient) -> None:
    js = client.get("/static/rag.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    assert "innerHTML" not in js.text  # data goes in as text only
    css = client.get("/static/rag.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
