"""The RAG tab (spec §8.2) and the documents' ``ragEnabled`` tristate (§8.1) as one page.

Server-rendered shell (Jinja2) plus a small vanilla script that calls the JSON API with the
bearer token the user pasted (kept in ``sessionStorage``) or passed as ``?token=`` /
``#token=``. The page itself holds no project data, so it needs no token; the script strips a
token from the address bar at once so it is not bookmarked or shared.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, PackageLoader, select_autoescape

STATIC_URL = "/static"
_STATIC_DIR = Path(__file__).parent / "static"

#: Only our own script and stylesheet; the page calls only its own origin.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def _asset_version() -> str:
    """Appended to asset URLs so an upgrade is not served stale scripts from a cache."""
    try:
        return version("vancetope-rag")
    except PackageNotFoundError:  # running from a source tree
        return "dev"


def _environment() -> Environment:
    return Environment(
        loader=PackageLoader("vancetope_rag.api", "templates"),
        autoescape=select_autoescape(["html"]),
    )


def install_web_ui(api: FastAPI) -> None:
    """Mount the static files and add ``GET /ui/{tenant}/{project}``."""
    env = _environment()
    router = APIRouter()

    @router.get("/ui/{tenant}/{project}", response_class=HTMLResponse, include_in_schema=False)
    def rag_page(tenant: str, project: str) -> HTMLResponse:
        html = env.get_template("rag.html").render(
            tenant=tenant, project=project, static=STATIC_URL, version=_asset_version()
        )
        return HTMLResponse(html, headers=PAGE_HEADERS)

    api.include_router(router)
    api.mount(STATIC_URL, StaticFiles(directory=_STATIC_DIR), name="static")
