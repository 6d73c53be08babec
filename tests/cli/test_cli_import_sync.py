"""``import`` syncs a folder, and ``documents list`` / ``documents delete``,
end to end through the CLI on a real SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from vancetope_rag.cli import cli


@pytest.fixture
def run(tmp_path: Path):
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    runner = CliRunner()

    def invoke(*args: str, code: int = 0) -> Result:
        result = runner.invoke(cli, ["--store", store, "--tenant", "t", "--project", "p", *args])
        assert result.exit_code == code, result.output + result.stderr
        return result

    invoke("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    return invoke


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in {
        "cats.md": "Cats purr when they are content.",
        "dogs.md": "Dogs bark at strangers.",
        "owls.md": "Owls hunt at night.",
    }.items():
        (root / name).write_text(text)
    return root


def listed(run) -> dict[str, str]:
    data = json.loads(run("documents", "list", "--json").stdout)
    return {d["path"]: d["state"] for d in data["documents"]}


def test_import_prunes_a_deleted_file_and_moves_a_renamed_one(run, folder: Path) -> None:
    run("import", str(folder))
    run("index")
    (folder / "dogs.md").unlink()
    (folder / "owls.md").rename(folder / "night-owls.md")
    out = run("import", str(folder)).stdout
    assert "moved documents/owls.md -> documents/night-owls.md" in out
    assert "deleted documents/dogs.md (its file is gone)" in out
    assert "0 created, 0 updated, 1 moved, 1 deleted, 1 unchanged" in out
    assert set(listed(run)) == {"documents/cats.md", "documents/night-owls.md"}
    hits = json.loads(run("query", "dogs bark at strangers", "--json").stdout)
    assert all(h["path"] != "documents/dogs.md" for h in hits)


def test_dry_run_changes_nothing_and_json_counts_everything(run, folder: Path) -> None:
    run("import", str(folder))
    (folder / "dogs.md").unlink()
    dry = json.loads(run("import", str(folder), "--dry-run", "--json").stdout)
    assert dry["dryRun"] is True and dry["deleted"] == 1
    assert dry["deletedPaths"] == ["documents/dogs.md"]
    assert {k: dry[k] for k in ("created", "updated", "moved", "unchanged", "failed")} == {
        "created": 0,
        "updated": 0,
        "moved": 0,
        "unchanged": 2,
        "failed": 0,
    }
    assert "documents/dogs.md" in listed(run)
    text = run("import", str(folder), "--dry-run").stdout
    assert "would be deleted documents/dogs.md" in text and "nothing was changed" in text


def test_deleting_more_than_half_needs_yes(run, folder: Path) -> None:
    run("import", str(folder))
    (folder / "dogs.md").unlink()
    (folder / "owls.md").unlink()
    refused = run("import", str(folder), code=1)
    assert "2 of the 3 documents" in refused.stderr and "--yes" in refused.stderr
    assert len(listed(run)) == 3
    run("import", str(folder), "--yes")
    assert set(listed(run)) == {"documents/cats.md"}


def test_no_prune_keeps_documents_of_gone_files(run, folder: Path) -> None:
    run("import", str(folder))
    (folder / "dogs.md").unlink()
    out = run("import", str(folder), "--no-prune").stdout
    assert "0 deleted" in out and "documents/dogs.md" in listed(run)


def test_documents_list_shows_the_id_files_visualize_takes(run, folder: Path) -> None:
    run("import", str(folder))
    [cats] = [
        d
        for d in json.loads(run("documents", "list", "--json").stdout)["documents"]
        if d["path"] == "documents/cats.md"
    ]
    assert cats["id"]
    [line] = [x for x in run("documents", "list").stdout.splitlines() if "cats.md" in x]
    assert line.split("\t")[:3] == ["documents/cats.md", "pending (queued)", cats["id"]]
    seen = json.loads(run("files", "visualize", "--document-id", cats["id"], "--json").stdout)
    assert "Cats purr when they are content." in "".join(s["text"] for s in seen["sections"])


def test_documents_list_by_state_and_delete(run, folder: Path) -> None:
    (folder / "scan.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    run("import", str(folder))
    failed = run("documents", "list", "--state", "failed").stdout
    assert failed.startswith("documents/scan.png\tfailed\t") and "no text layer" in failed
    assert "cats.md" not in failed
    refused = run("documents", "delete", "documents/cats.md", "documents/nope.md", code=1)
    assert "'documents/nope.md'" in refused.stderr and "nothing was deleted" in refused.stderr
    assert "documents/cats.md" in listed(run)
    out = run("documents", "delete", "documents/cats.md", "documents/scan.png").stdout
    assert out.splitlines() == ["deleted documents/cats.md", "deleted documents/scan.png"]
    assert set(listed(run)) == {"documents/dogs.md", "documents/owls.md"}
    bad = run("documents", "delete", "/etc/passwd", code=1)
    assert "relative to the project" in bad.stderr


def test_a_scan_queued_after_a_new_read_drops_its_old_error(run, folder: Path) -> None:
    """A scan failed ("no text layer"); with a vision model configured the next import reads
    it and queues it: until the indexer takes it, documents list showed the old error."""
    import filemakers as fm
    from vision_server import serve_vision, vision_settings

    (folder / "scan.png").write_bytes(fm.text_image("GLACIER SURVEY"))
    run("import", str(folder))
    run("index", code=1)  # the scan failed
    failed = run("documents", "list", "--state", "failed").stdout
    assert "documents/scan.png" in failed and "no text layer" in failed
    with serve_vision() as vision:
        for key, value in vision_settings(vision).items():
            run("settings", "set", key, value, "--scope", "tenant")
        run("import", str(folder))
    data = json.loads(run("documents", "list", "--json").stdout)
    [scan] = [d for d in data["documents"] if d["path"] == "documents/scan.png"]
    assert scan["queued"] is True
    assert scan["error"] is None and scan["extractionError"] is None, json.dumps(scan)
    [line] = [x for x in run("documents", "list").stdout.splitlines() if "scan.png" in x]
    assert "no text layer" not in line and "(queued)" in line
    run("index")
    assert "documents/scan.png" not in run("documents", "list", "--state", "failed").stdout
