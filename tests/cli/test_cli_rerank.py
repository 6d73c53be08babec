"""``ai.rerank.apiKey`` is write-only in the CLI, like ``ai.embedding.apiKey``: set, shown as
``********`` at every scope and in the full listing, never printed by a query that uses it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

KEY = "rerank-live-DO-NOT-PRINT-81c2"  # not key-shaped: only its registration can hide it


def test_the_rerank_key_is_never_shown(run: Any, tmp_path: Path) -> None:
    outputs: list[str] = []
    for scope in ("tenant", "project"):
        result = run("settings", "set", "ai.rerank.apiKey", KEY, "--scope", scope)
        assert result.stdout == f'ai.rerank.apiKey = "********" ({scope})\n'
        outputs.append(result.output)
    for scope in ("tenant", "project", "effective"):
        outputs.append(run("settings", "get", "--scope", scope).output)
        listed = json.loads(run("settings", "get", "--json", "--scope", scope).stdout)
        assert listed["ai.rerank.apiKey"]["value"] == "********"
    run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    run("settings", "set", "ai.rerank.provider", "cohere", "--scope", "tenant")
    # a reranker that refuses connections (the loopback discard port): the query still answers
    run("settings", "set", "ai.rerank.baseUrl", "http://127.0.0.1:9/v1", "--scope", "tenant")
    docs = tmp_path / "ws" / "documents"
    docs.mkdir(parents=True)
    (docs / "zebra.md").write_text("Zebras graze on the savanna grass.", encoding="utf-8")
    run("import", str(tmp_path / "ws"))
    run("index")
    query = run("-vv", "query", "zebras savanna", "--min-score", "-1", "--json")
    assert json.loads(query.stdout)  # the query answers without its reranker
    outputs.append(query.output)
    assert not any(KEY in out for out in outputs)
    bad = run("settings", "set", "ai.rerank.provider", "cohre", ok=False)
    assert bad.exit_code == 1 and "did you mean cohere" in bad.stderr
