"""Numbers that mean one thing. The CLI's ``query`` names the order the turn
uses and labels each number (cosine, fused, rerank); ``context --explain`` lists every
candidate with why it was shown or dropped (threshold, cut, cap, topK, budget); ``settings
get --scope effective`` prints the values turns use and where each comes from (not ``null``);
``status`` shows the pinned model profile next to the calibration. Against a real SQLite
store with the hashing embedder, calibrated (24 documents)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

TOPICS = [
    "zebra stripes on the savanna grass",
    "zebra herds crossing the river",
    "lions hunting zebra at dusk",
    "coffee beans roasted in small batches",
    "espresso machines and milk foam",
    "tea leaves steeped in hot water",
    "mountain trails above the tree line",
    "river kayaking through the canyon",
    "sailing boats in the harbour wind",
    "bread dough rising overnight",
    "sourdough starter fed every morning",
    "pasta rolled by hand with eggs",
    "violin lessons for young children",
    "piano scales practised every day",
    "guitar strings tuned before the concert",
    "tax returns filed before April",
    "pension plans and monthly savings",
    "insurance claims after a storm",
    "satellites orbiting the earth",
    "telescopes pointed at distant galaxies",
    "rockets launched from the coast",
    "chess openings and endgame studies",
    "football matches on rainy weekends",
    "marathon training in the winter",
]


@pytest.fixture
def indexed(run: Any, tmp_path: Path) -> Any:
    """The CLI (tests/cli/conftest.py ``run``) over 24 indexed notes, hashing embeddings."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, topic in enumerate(TOPICS):
        body = f"These notes are about {topic}, and they say a little more about {topic} here."
        (docs / f"n{i:02}.md").write_text(f"# {topic}\n\n{body}\n")
    run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    assert "24 created" in run("import", str(docs)).stdout
    run("index")
    return run


def test_query_names_the_order_and_labels_each_number(indexed: Any) -> None:
    hybrid = indexed("query", "zebra stripes savanna").stdout.splitlines()
    assert hybrid[0].endswith(
        "in the order the turn uses: "
        + ("by fused score (hybrid: dense and lexical ranks fused), not by cosine")
    ), hybrid[0]
    lines = [line for line in hybrid[1:] if line.startswith("#")]
    assert lines and lines[0].startswith("#1  documents/n00.md  fused ")
    pattern = re.compile(
        r"^#\d+  \S+  fused \d\.\d{4} \(dense (#\d+|-), lexical (#\d+|-)\)  cosine -?\d\.\d{3}$"
    )
    assert all(pattern.match(line) for line in lines), lines
    # the numbers shown are the hits' own, in the JSON's order
    data = json.loads(indexed("query", "zebra stripes savanna", "--json").stdout)
    for line, hit in zip(lines, data, strict=True):
        assert f"cosine {hit['score']:.3f}" in line and f"fused {hit['fusedScore']:.4f}" in line
    dense = indexed("query", "zebra stripes savanna", "--mode", "dense").stdout.splitlines()
    assert dense[0].endswith("in the order the turn uses: by cosine similarity (dense)")
    assert all(re.match(r"^#\d+  \S+  cosine \d\.\d{3}$", x) for x in dense[1:] if x[0] == "#")


def test_explain_lists_every_candidate_with_why(indexed: Any, tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: t\nparams:\n  rag:\n    autoInject: ON\n    topK: 4\n    maxPerDocument: 1\n"
        "    minScore: 0.2\n    relevanceCut: 0.05\n    maxTokens: 120\n"
    )
    result = indexed("context", "zebra stripes savanna", "--recipe", str(recipe), "--explain")
    err = result.stderr.splitlines()
    assert err[0].startswith("autoInject on (decided by recipe)")
    assert err[1].startswith("candidates in the order the turn used, by fused score")
    rows = err[2:]
    assert len(rows) >= 10, err
    shown = [r for r in rows if " shown " in r]
    assert shown and rows[0].split()[1] == "shown"
    # the block shows exactly the excerpts listed as shown, each line keeping (score 0.xx)
    for row in shown:
        path = row.split()[2]
        assert f"{path} (score " in result.stdout
    reasons = {r.split(": ", 1)[1].split(":")[0] for r in rows if " dropped " in r}
    assert {"threshold", "cut"} <= reasons, rows
    # every candidate is listed once, numbered in the order the turn used
    assert [int(r.split()[0][1:]) for r in rows] == list(range(1, len(rows) + 1))
    data = json.loads(
        indexed(
            "context", "zebra stripes savanna", "--recipe", str(recipe), "--explain", "--json"
        ).stdout
    )
    whys = [c["why"] for c in data["candidates"]]
    assert whys.count("shown") == len(data["hits"])
    assert all(
        w == "shown" or w.split(":")[0] in {"threshold", "cut", "cap", "topK", "budget"}
        for w in whys
    )
    assert any(w.startswith("threshold: cosine ") and "< minScore 0.2000" in w for w in whys)


def test_explain_names_the_cap_and_the_budget(indexed: Any, tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: t\nparams:\n  rag:\n    autoInject: ON\n    topK: 6\n    maxPerDocument: 1\n"
        "    minScore: -1\n    relevanceCut: 'off'\n    maxTokens: 100\n"
    )
    data = json.loads(
        indexed("context", "zebra", "--recipe", str(recipe), "--explain", "--json").stdout
    )
    whys = [c["why"] for c in data["candidates"]]
    assert any(w.startswith("budget: over rag.autoInject.maxTokens=100") for w in whys), whys
    assert whys.count("shown") == len(data["hits"]) >= 1
    assert sum(w.startswith("topK") for w in whys) >= 1


def test_settings_effective_prints_the_values_turns_use(indexed: Any) -> None:
    out = indexed("settings", "get").stdout
    assert "rag.topK = 5 (default)\n" in out
    assert "rag.maxPerDocument = 2 (default)\n" in out
    assert "rag.autoInject.maxTokens = 1500 (default)\n" in out
    assert "null" not in next(x for x in out.splitlines() if x.startswith("rag.minScore"))
    status = json.loads(indexed("status", "--json").stdout)["minScoreAuto"]
    day = status["calibratedAt"][:10]
    assert f"rag.minScore = {status['minScore']} (auto, calibrated {day})\n" in out
    gap = status["gap"]
    assert (
        f"rag.autoInject.relevanceCut = {gap} (auto, calibrated {day}; the relevance gap in "
        "hybrid mode)\n" in out
    )
    indexed("settings", "set", "rag.topK", "7")
    indexed("settings", "set", "rag.minScore", "0.4", "--scope", "tenant")
    out = indexed("settings", "get").stdout
    assert "rag.topK = 7 (project)\n" in out and "rag.minScore = 0.4 (tenant)\n" in out
    data = json.loads(indexed("settings", "get", "rag.topK", "--json").stdout)
    assert data["rag.topK"] == {
        "value": 7,
        "source": "project",
        "applied": 7,
        "appliedFrom": "project",
    }
    # the tenant scope still says what is set there
    assert indexed("settings", "get", "rag.topK", "--scope", "tenant").stdout == (
        "rag.topK = null (default; not set at tenant scope)\n"
    )


def test_status_shows_the_pinned_profile_and_the_calibration(indexed: Any) -> None:
    out = indexed("status").stdout
    data = json.loads(indexed("status", "--json").stdout)
    profile = data["modelProfile"]
    assert profile["dimension"] == 256 or profile["dimension"] > 0
    assert f"pinned model profile: dimension {profile['dimension']}, " in out
    auto = data["minScoreAuto"]
    assert f"minScore auto: {auto['minScore']:.4f}, relevance gap {auto['gap']:.4f}" in out
    assert auto["calibratedAt"] in out
