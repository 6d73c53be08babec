"""What the chat proxy tests share: the callers' keys, the two tenants' documents, the key
file that binds the keys, and the base URL an OpenAI client is given."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from vancetope_rag.app import RagApp
from vancetope_rag.proxy import hash_key
from vancetope_rag.recipes import load_recipe

ROOT = Path(__file__).resolve().parents[2]
SECRET = "jwt-proxy-secret-0123456789abcdefghijklmnop"
PROJECT = "handbook"
#: One key per caller; the key file holds their hashes only.
ACME_KEY = "vrk_acme-test-key-4c6f1e0b9a"
GLOBEX_KEY = "vrk_globex-test-key-91d2a7c3"
ACME_OFF_KEY = "vrk_acme-discussion-key-55aa"
ACME_ON_KEY = "vrk_acme-docs-key-6b7c8d"
ACME_SLOW_KEY = "vrk_acme-one-a-minute-key-0f"
ACME_WIKI_KEY = "vrk_acme-wiki-only-key-3e2d"
#: Bound to every project of Globex at 5 requests a minute: one budget, whatever the project.
GLOBEX_FIVE_KEY = "vrk_globex-five-a-minute-key-7a"
FIVE_A_MINUTE = 5

ACME_DOCS = {
    "documents/vacation.md": (
        "Acme employees get thirty vacation days per year, booked in the portal."
    ),
    "documents/cluster.md": "The cluster runs three pods with leases and a Mongo centric state.",
}
GLOBEX_DOCS = {
    "documents/vacation.md": "Globex staff get twelve vacation days, approved by the tribunal.",
}


def populate(app: RagApp) -> RagApp:
    """Tenants t1 (Acme) and t2 (Globex), each with an indexed project ``handbook``,
    AutoInject ON."""
    for tenant, docs in (("t1", ACME_DOCS), ("t2", GLOBEX_DOCS)):
        app.settings.set(tenant, None, "ai.embedding.provider", "hashing")
        app.settings.set(tenant, None, "rag.autoInject.enabled", "ON")
        app.bring(tenant, PROJECT)
        for path, text in docs.items():
            app.document_saved(tenant, PROJECT, path, text)
    app.scheduler.run_until_idle(timeout_s=60)
    return app


def key_file(path: Path) -> Path:
    shutil.copy(load_recipe("discussion").source, path.parent / "discussion.yaml")
    shutil.copy(load_recipe("docs-assistant").source, path.parent / "docs.yaml")

    def entry(name: str, key: str, tenant: str, **more: Any) -> dict[str, Any]:
        return {"name": name, "hash": hash_key(key), "tenant": tenant, **more}

    keys = [
        entry("acme", ACME_KEY, "t1", projects=[PROJECT]),
        entry("globex", GLOBEX_KEY, "t2", projects="*"),
        entry("acme-discussion", ACME_OFF_KEY, "t1", projects=[PROJECT], recipe="discussion.yaml"),
        entry("acme-docs", ACME_ON_KEY, "t1", projects=[PROJECT], recipe="docs.yaml"),
        entry("acme-slow", ACME_SLOW_KEY, "t1", projects=[PROJECT], requestsPerMinute=1),
        entry("acme-wiki", ACME_WIKI_KEY, "t1", projects=["wiki"]),
        entry("globex-five", GLOBEX_FIVE_KEY, "t2", projects="*", requestsPerMinute=FIVE_A_MINUTE),
    ]
    path.write_text(yaml.safe_dump({"keys": keys}), encoding="utf-8")
    return path


#: Starts a proxy with config overrides; gives its URL, ``http://127.0.0.1:<port>``.
ProxyFactory = Callable[..., str]


def base(proxy_url: str, project: str = PROJECT) -> str:
    """What an OpenAI client takes as its base URL."""
    return f"{proxy_url}/p/{project}/v1"
