"""Extraction in worker processes: a hanging, crashing or memory-hungry extractor ends with a
clear error in bounded time, and the next extraction works."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import hostile_extractors
from fakes import default_extractors
from vancetope_rag.extraction.registry import (
    ExtractionTimeoutError,
    ExtractOptions,
    ExtractorDependencyMissing,
    ExtractorRegistry,
    NoTextLayerError,
)
from vancetope_rag.extraction.sandbox import ExtractionSandbox
from vancetope_rag.services.extraction import ExtractionPlan, ExtractionService


@pytest.fixture(scope="module")
def sandbox() -> ExtractionSandbox:
    box = ExtractionSandbox(max_workers=2, memory_bytes=768 * 1024**2)
    yield box  # type: ignore[misc]
    box.close()


def service(sandbox: ExtractionSandbox, **extractors: object) -> ExtractionService:
    registry = default_extractors()
    for ext, fn in extractors.items():
        registry.register([f"application/x-{ext}"], fn, extensions=[f".{ext}"])  # type: ignore[arg-type]
    return ExtractionService(registry=registry, sandbox=sandbox)


PLAN = ExtractionPlan(ExtractOptions(), timeout_s=1.5)


def test_a_hanging_extractor_is_stopped_and_the_next_file_works(
    sandbox: ExtractionSandbox,
) -> None:
    svc = service(sandbox, hang=hostile_extractors.hang)
    started = time.monotonic()
    read = svc.extract(b"x", path="loop.hang", mime="application/x-hang", plan=PLAN)
    assert time.monotonic() - started < 20  # 10x the 1.5 s limit plus a worker's restart
    assert read.failed and read.record.error_code == ExtractionTimeoutError.code
    assert "rag.extract.timeoutSeconds" in (read.record.error or "")
    ok = svc.extract(b"# fine", path="ok.md", mime="text/markdown", plan=PLAN)
    assert ok.text is not None and ok.text.text == "# fine"


def test_a_crashing_extractor_is_a_clear_error(sandbox: ExtractionSandbox) -> None:
    svc = service(sandbox, crash=hostile_extractors.crash)
    read = svc.extract(b"x", path="boom.crash", mime="application/x-crash", plan=PLAN)
    assert read.failed and "extraction process ended (exit code 3)" in (read.record.error or "")
    assert svc.extract(b"a", path="a.txt", mime="text/plain", plan=PLAN).text is not None


def test_an_extractor_past_the_memory_limit_fails(sandbox: ExtractionSandbox) -> None:
    svc = service(sandbox, hog=hostile_extractors.hog)
    plan = ExtractionPlan(ExtractOptions(), timeout_s=30)
    read = svc.extract(b"x", path="big.hog", mime="application/x-hog", plan=plan)
    assert read.failed and "memory" in (read.record.error or "")


def test_errors_come_back_as_their_own_class(sandbox: ExtractionSandbox) -> None:
    registry = ExtractorRegistry()
    registry.register(["image/png"], _needs_ocr)
    registry.register(["application/pdf"], _needs_extra)
    box_entry = registry.find_entry("image/png", "a.png")
    assert box_entry is not None
    with pytest.raises(NoTextLayerError, match="no text layer"):
        sandbox.run(box_entry, b"", "a.png", "image/png", ExtractOptions(), 100, timeout_s=5)
    entry = registry.find_entry("application/pdf", "a.pdf")
    assert entry is not None
    with pytest.raises(ExtractorDependencyMissing) as info:
        sandbox.run(entry, b"", "a.pdf", "application/pdf", ExtractOptions(), 100, timeout_s=5)
    assert info.value.extra == "pdf"


def test_a_lambda_runs_in_process(sandbox: ExtractionSandbox) -> None:
    svc = service(sandbox, shout=lambda data, path: data.decode().upper())
    read = svc.extract(b"hi", path="x.shout", mime="application/x-shout", plan=PLAN)
    assert read.text is not None and read.text.text == "HI"


def test_an_extractor_of_the_main_script_runs_in_process_with_a_warning(
    sandbox: ExtractionSandbox, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A host script's own function (``__main__.fn``) pickles by reference, but a worker's
    ``__main__`` is not that script: it would fail to load the job and die. It runs here."""
    import logging
    import os
    import sys

    def own_pid(data: bytes, path: str) -> str:
        return str(os.getpid())

    own_pid.__module__, own_pid.__qualname__ = "__main__", "vtr_script_extractor"
    monkeypatch.setattr(sys.modules["__main__"], "vtr_script_extractor", own_pid, raising=False)
    registry = ExtractorRegistry()
    registry.register(["application/x-script"], own_pid, name="acme.script")
    entry = registry.find_entry("application/x-script", "a")
    assert entry is not None
    with caplog.at_level(logging.WARNING, logger="vancetope_rag"):
        for _ in range(2):
            text = sandbox.run(
                entry, b"", "a", "application/x-script", ExtractOptions(), 100, timeout_s=5
            )
            assert text.text == str(os.getpid())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once per extractor, not per file
    assert "acme.script" in warnings[0] and "__main__" in warnings[0]
    assert "move it into a module" in warnings[0]


def test_an_extractor_no_worker_can_import_is_a_clear_error(
    sandbox: ExtractionSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module made at run time pickles by reference here and exists nowhere else: the
    worker says what it could not load, and stays up for the next file."""
    import sys
    import types

    made = types.ModuleType("vtr_made_at_run_time")

    def upper(data: bytes, path: str) -> str:
        return data.decode().upper()

    upper.__module__, upper.__qualname__ = made.__name__, "upper"
    made.upper = upper  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, made.__name__, made)
    svc = service(sandbox, made=upper)
    read = svc.extract(b"hi", path="a.made", mime="application/x-made", plan=PLAN)
    assert read.failed and "could not load the extractor" in (read.record.error or "")
    assert "vtr_made_at_run_time" in (read.record.error or "")
    ok = service(sandbox, pid=hostile_extractors.pid)
    assert ok.extract(b"", path="a.pid", mime="application/x-pid", plan=PLAN).text is not None


def test_the_worker_really_runs_elsewhere(sandbox: ExtractionSandbox) -> None:
    registry = ExtractorRegistry()
    registry.register(["application/x-pid"], hostile_extractors.pid)
    entry = registry.find_entry("application/x-pid", "a")
    assert entry is not None
    import os

    text = sandbox.run(entry, b"", "a", "application/x-pid", ExtractOptions(), 100, timeout_s=5)
    assert text.text != str(os.getpid())


def _needs_ocr(data: bytes, path: str) -> str:
    raise NoTextLayerError(f"cannot extract text from {path!r}: no text layer")


def _needs_extra(data: bytes, path: str) -> str:
    raise ExtractorDependencyMissing("PDF text extraction", "pdf")


def test_a_script_without_a_main_guard_can_import_files(tmp_path: Path) -> None:
    """A host's plain script (no ``if __name__ == "__main__"``) must not be run again by the
    worker processes it starts (multiprocessing's spawn re-imports the main module)."""
    import subprocess
    import sys

    import filemakers as fm

    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a.pdf").write_bytes(fm.text_pdf(["unguarded script text"]))
    script = tmp_path / "host.py"
    script.write_text(
        "from pathlib import Path\n"
        "from vancetope_rag import EngineConfig, RagApp\n"
        "print('host starts')\n"
        f"app = RagApp.open(EngineConfig(store='sqlite:///{tmp_path}/rag.db'))\n"
        "app.bring('t', 'p')\n"
        f"s = app.importer.import_directory('t', 'p', Path({str(tmp_path / 'files')!r}))\n"
        "print('created', s.created, 'failed', [f.reason for f in s.failed_files])\n"
    )
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "created 1 failed []" in run.stdout, run.stdout + run.stderr[-2000:]
    assert run.stdout.count("host starts") == 1
