"""The embedded model on ONNX Runtime: export once, check against torch, pick the faster.

The export is the shipped all-MiniLM-L6-v2 traced by torch's TorchScript exporter (opset 17)
with mean pooling and normalisation inside the graph, so a session returns the sentence vector
torch returns. It lives in ``<cache dir>/<export key>/model.onnx``; the key hashes the model's
files and the torch, onnx and ONNX Runtime versions, so an upgrade exports again. Writers write
a temporary file and rename it into place, so concurrent processes end with one good file.
Every process checks the file it loads against torch on :data:`CHECK_TEXTS` and refuses it
below :data:`MIN_COSINE`: the backend changes speed, never vectors, so pinned RAGs, the
embedding cache and stored vectors stay valid.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vancetope_rag.errors import OnnxExportRefusedError
from vancetope_rag.machine import atomic_write
from vancetope_rag.machine import machine_key as shared_machine_key
from vancetope_rag.running import SEARCHES, Gauge

from .micro_batch import CAP

logger = logging.getLogger(__name__)

#: A fixed set of texts the export must reproduce: short, long, punctuation, non-ASCII.
CHECK_TEXTS: tuple[str, ...] = (
    "hello",
    "How do I rotate the API keys of a project?",
    "The indexer claims dirty documents in batches and embeds their chunks.",
    "Größe, café, naïve — 東京 and emoji 🙂 in one line.",
    " ".join(["long input that runs past the window of the model"] * 40),
)
#: The least cosine between torch's and the export's vector of every check text.
MIN_COSINE = 0.99999
OPSET = 17
MODEL_FILE = "model.onnx"
BACKENDS = ("auto", "torch", "onnx")
BATCH = 32
#: How much faster ONNX Runtime must embed a batch to take indexing from torch.
BATCH_MARGIN = 1.2
#: Short queries per call in the micro-batching measurement: the batcher's cap.
QUERY_BATCH = CAP
#: How much faster one call with :data:`QUERY_BATCH` queries must be than as many single calls
#: (on the backend serving queries) for concurrent queries to be micro-batched.
QUERY_BATCH_MARGIN = 1.2

Encode = Callable[[Sequence[str]], Any]  # texts → (n, dim) float array, rows normalised

#: How a session's threads wait (docs/operations.md, "Threads"): they spin only inside a run
#: (woken for each of the graph's ~100 small ops instead, a query takes ~1 ms longer) and stop
#: when it ends, so nothing spins between calls. Part of the machine key: a choice measured
#: under other settings is measured again.
SESSION_CONFIG = {
    "session.intra_op.allow_spinning": "1",
    "session.force_spinning_stop": "1",
    "session.inter_op.allow_spinning": "0",
}


def versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import torch

    return {"torch": torch.__version__, "onnx": onnx.__version__, "ort": onnxruntime.__version__}


#: How the graph is traced (:func:`export_model`), part of the export key: 2 traces eager
#: attention (1 traced torch's SDPA path: its mask handling made 32-passage batches 1.5× slower).
EXPORT_RECIPE = 2


def export_key(model_dir: Path, versions: dict[str, str], recipe: int = EXPORT_RECIPE) -> str:
    """What the export depends on: every model file's bytes, the three versions and the
    export recipe."""
    h = hashlib.sha256()
    h.update(f"recipe {recipe}".encode())
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(model_dir)).encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    h.update(json.dumps(versions, sort_keys=True).encode())
    return h.hexdigest()[:24]


def machine_key(threads: int, versions: dict[str, str]) -> str:
    """The machine an ``auto`` measurement holds for: CPU model and flags, threads, versions,
    and how the sessions' threads wait."""
    return shared_machine_key(threads, versions, SESSION_CONFIG)


def export_model(st_model: Any, dest: Path) -> None:
    """Trace ``st_model`` (a SentenceTransformer: transformer + mean pooling + normalise) into
    ``dest``, atomically: a temporary file beside it is renamed over it when complete.

    A copy of the transformer is traced with eager attention: the plain matrix products trace
    to a graph ONNX Runtime runs faster than torch's SDPA path (one query 4.3 against 4.5 ms on
    one thread, a 32-passage batch 0.93 against 1.38 s on two: docs/benchmarks.md),
    and the model serving torch's queries meanwhile is left as it is."""
    import torch

    transformer = copy.deepcopy(st_model[0].auto_model)
    transformer.set_attn_implementation("eager")

    class _Sentence(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, ids: Any, mask: Any, types: Any) -> Any:
            out = self.transformer(input_ids=ids, attention_mask=mask, token_type_ids=types)
            m = mask.unsqueeze(-1).to(out[0].dtype)
            pooled = (out[0] * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    ids = torch.ones((2, 8), dtype=torch.long)

    def write(tmp: Path) -> None:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on code paths it fixed
            torch.onnx.export(
                _Sentence().eval(),
                (ids, torch.ones_like(ids), torch.zeros_like(ids)),
                str(tmp),
                dynamo=False,
                opset_version=OPSET,
                input_names=["input_ids", "attention_mask", "token_type_ids"],
                output_names=["embedding"],
                dynamic_axes={
                    "input_ids": {0: "batch", 1: "seq"},
                    "attention_mask": {0: "batch", 1: "seq"},
                    "token_type_ids": {0: "batch", 1: "seq"},
                    "embedding": {0: "batch"},
                },
            )

    atomic_write(dest, write)


class OnnxEncoder:
    """An ONNX Runtime session over an export, with a copy of the model's tokenizer.

    With more than one thread, a second session of one thread serves while ``crowded()``
    (other searches run beside this one, :data:`vancetope_rag.running.SEARCHES`): runs that
    share one session's thread pool wait on each other's share of the work, spinning, while
    the other turns' scans and Python need the cores. It is opened in the background the first
    time it is wanted (~90 MB more), so a process that never runs turns side by side never
    pays for it; the session of every thread serves until it is open.
    """

    def __init__(
        self,
        path: Path,
        tokenizer: Any,
        max_length: int,
        threads: int,
        crowded: Callable[[], bool] | None = None,
    ) -> None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise OnnxExportRefusedError("ONNX Runtime needs the model's fast tokenizer")
        self.path = path
        self._session = self._open(threads)
        self._crowded = crowded if threads > 1 else None
        #: The one-thread session, once open (None: not wanted yet, opening, or failed).
        self.narrow: Any | None = None
        self._narrow_wanted = threading.Lock()  # taken once: by the first crowded call
        # The model's tokenizer sets its truncation and padding at every call (two threads
        # at once: "Already borrowed") and encodes a batch on a thread pool whose idle
        # workers then spin in sched_yield, taking cores from the turns: a copy of its Rust
        # tokenizer, set once, encodes one text at a time (what the batch did text by text).
        self._tokenizer = copy.deepcopy(backend)
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length)
        self._pad_id = int(tokenizer.pad_token_id or 0)

    def _open(self, threads: int) -> Any:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        for name, value in SESSION_CONFIG.items():
            opts.add_session_config_entry(name, value)
        opts.log_severity_level = 3
        try:
            return ort.InferenceSession(
                str(self.path), sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own types for unreadable graphs
            raise OnnxExportRefusedError(
                f"ONNX export {self.path} cannot be loaded: {exc}"
            ) from exc

    def encode(self, texts: Sequence[str]) -> Any:
        """Vectors of ``texts``: on one thread while other searches run beside this one."""
        session = self._session
        if self._crowded is not None and self._crowded():
            session = self.narrow or session
            if self.narrow is None and self._narrow_wanted.acquire(blocking=False):
                threading.Thread(
                    target=self._open_narrow, name="vancetope-rag-onnx-narrow", daemon=False
                ).start()
        return self._run(session, texts)

    def encode_alone(self, texts: Sequence[str]) -> Any:
        """Vectors of ``texts`` on every thread, whatever runs beside: what is measured."""
        return self._run(self._session, texts)

    def _open_narrow(self) -> None:
        try:
            self.narrow = self._open(1)
        except Exception as exc:  # the session of every thread keeps serving
            logger.warning("no one-thread ONNX Runtime session for concurrent turns: %s", exc)

    def _run(self, session: Any, texts: Sequence[str]) -> Any:
        return session.run(["embedding"], self.feeds(texts))[0]

    def feeds(self, texts: Sequence[str]) -> dict[str, Any]:
        """The graph's inputs for ``texts``: token ids, attention mask and token types, padded
        on the right to the longest."""
        import numpy as np

        encodings = [self._tokenizer.encode(text) for text in texts]
        shape = (len(encodings), max((len(e.ids) for e in encodings), default=0))
        ids = np.full(shape, self._pad_id, dtype=np.int64)
        mask = np.zeros(shape, dtype=np.int64)
        types = np.zeros(shape, dtype=np.int64)
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[row, :n], mask[row, :n], types[row, :n] = enc.ids, enc.attention_mask, enc.type_ids
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def check_export(onnx_encode: Encode, torch_encode: Encode) -> float:
    """The least cosine over :data:`CHECK_TEXTS` (each text alone, as a query is embedded).

    Raises:
        OnnxExportRefusedError: Below :data:`MIN_COSINE`, or vectors of another shape.
    """
    import numpy as np

    worst = 1.0
    for text in CHECK_TEXTS:
        a = np.asarray(onnx_encode([text]), dtype=np.float64).reshape(-1)
        b = np.asarray(torch_encode([text]), dtype=np.float64).reshape(-1)
        if a.shape != b.shape or not np.all(np.isfinite(a)):
            raise OnnxExportRefusedError(f"ONNX export gives {a.shape} vectors, torch {b.shape}")
        cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) or 1.0))
        worst = min(worst, cos)
    if worst < MIN_COSINE:
        raise OnnxExportRefusedError(
            f"ONNX export refused: cosine {worst:.7f} to torch's vectors is below {MIN_COSINE}"
        )
    return worst


#: Rounds of ``auto``'s timings: each backend is timed this many times, the two alternating
#: (their order flips each round), and each one's median counts.
MEASURE_ROUNDS = 3


def time_batch(encode: Encode, runs: int = 1) -> float:
    """Least milliseconds of one :data:`BATCH`-passage batch of window-filling passages."""
    texts = [f"{CHECK_TEXTS[-1]} {i}" for i in range(BATCH)]
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        encode(texts)
        samples.append((time.perf_counter() - start) * 1000)
    return min(samples)


def time_query(encode: Encode, runs: int = 10) -> float:
    """Median milliseconds of one single-query embedding (after a warm-up)."""
    texts = CHECK_TEXTS[:4]
    for text in texts:
        encode([text])
    samples = []
    for i in range(runs):
        start = time.perf_counter()
        encode([texts[i % len(texts)]])
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def time_query_batch(encode: Encode, runs: int = 3) -> tuple[float, float]:
    """Median milliseconds of :data:`QUERY_BATCH` short queries as single calls, and as one
    call (the two alternating, after a warm-up)."""
    texts = [f"{CHECK_TEXTS[i % 4]} ({i})" for i in range(QUERY_BATCH)]  # 6-24 tokens
    encode(texts)
    singles: list[float] = []
    batches: list[float] = []
    for i in range(runs):
        for one_by_one in (True, False) if i % 2 == 0 else (False, True):
            start = time.perf_counter()
            if one_by_one:
                for text in texts:
                    encode([text])
            else:
                encode(texts)
            ms = (time.perf_counter() - start) * 1000
            (singles if one_by_one else batches).append(ms)
    return statistics.median(singles), statistics.median(batches)


@dataclass(frozen=True)
class Choice:
    """What ``auto`` picked on one machine key, and why."""

    backend: str
    torch_ms: float
    onnx_ms: float
    machine: str
    #: What embeds indexing batches (of :data:`BATCH` passages), and the two timings.
    batches: str
    torch_batch_ms: float
    onnx_batch_ms: float
    #: Whether concurrent query embeddings are micro-batched (:mod:`.micro_batch`), and the
    #: two timings on the query backend: :data:`QUERY_BATCH` single calls, one call.
    micro_batch: bool
    query_singles_ms: float
    query_batch_ms: float

    @property
    def reason(self) -> str:
        return (
            f"auto: measured single-query {self.onnx_ms:.1f} ms on ONNX Runtime, "
            f"{self.torch_ms:.1f} ms on torch on this machine; a {BATCH}-passage batch "
            f"{self.onnx_batch_ms:.0f} ms against {self.torch_batch_ms:.0f} ms, batches on "
            f"{self.batches}; "
            + micro_batch_reason(self.micro_batch, self.query_singles_ms, self.query_batch_ms)
        )


def micro_batches(singles_ms: float, batch_ms: float) -> bool:
    """Whether one call with :data:`QUERY_BATCH` queries beats as many single calls by
    :data:`QUERY_BATCH_MARGIN` (no timings: no)."""
    return batch_ms > 0 and batch_ms * QUERY_BATCH_MARGIN <= singles_ms


def micro_batch_reason(micro_batch: bool, singles_ms: float, batch_ms: float) -> str:
    micro = "micro-batched" if micro_batch else "not micro-batched"
    return (
        f"{QUERY_BATCH} queries in one call {batch_ms:.0f} ms against {singles_ms:.0f} ms "
        f"one by one, concurrent queries {micro}"
    )


def choose(
    torch_ms: float,
    onnx_ms: float,
    machine: str,
    torch_batch_ms: float,
    onnx_batch_ms: float,
    query_singles_ms: float = 0.0,
    query_batch_ms: float = 0.0,
) -> Choice:
    """ONNX Runtime for queries when it is faster (a tie keeps torch, the path with no
    export); for indexing batches only when it wins by :data:`BATCH_MARGIN`. Concurrent
    queries are micro-batched when one call with :data:`QUERY_BATCH` queries beats as many
    single calls by :data:`QUERY_BATCH_MARGIN` (no timings: not micro-batched)."""
    return Choice(
        "onnx" if onnx_ms < torch_ms else "torch",
        torch_ms,
        onnx_ms,
        machine,
        "onnx" if onnx_batch_ms * BATCH_MARGIN <= torch_batch_ms else "torch",
        torch_batch_ms,
        onnx_batch_ms,
        micro_batches(query_singles_ms, query_batch_ms),
        query_singles_ms,
        query_batch_ms,
    )


def read_choice(path: Path) -> Choice | None:
    try:
        data = json.loads(path.read_text())
        return Choice(
            str(data["backend"]),
            float(data["torch_ms"]),
            float(data["onnx_ms"]),
            str(data["machine"]),
            str(data["batches"]),
            float(data["torch_batch_ms"]),
            float(data["onnx_batch_ms"]),
            bool(data["micro_batch"]),
            float(data["query_singles_ms"]),
            float(data["query_batch_ms"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or unreadable: measured again


def write_choice(path: Path, choice: Choice) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(choice.__dict__, sort_keys=True)))


def stored_choice(options: BackendOptions) -> Choice | None:
    """The ``auto`` choice stored for this machine key under ``options``' folders, read without
    loading the model (what ``status`` shows in a process that has not loaded it); None when
    none is stored, the backend is forced, or ONNX Runtime is not installed."""
    if options.backend != "auto":
        return None
    dirs = [d for d in (options.readonly_dir, options.cache_dir) if d is not None]
    stored = [path for d in dirs for path in sorted(d.glob("*/choice-*.json"))]
    if not stored:
        return None  # the versions (importing torch and ONNX Runtime) are not read for nothing
    try:
        machine = machine_key(options.threads or torch_threads(), versions())
    except ImportError:
        return None
    for path in stored:
        choice = read_choice(path) if path.name == f"choice-{machine}.json" else None
        if choice is not None and choice.machine == machine:
            return choice
    return None


@dataclass(frozen=True)
class BackendOptions:
    """``VANCETOPE_RAG_EMBEDDED_BACKEND`` and where exports live."""

    backend: str = "auto"
    #: Exports are written here (and read).
    cache_dir: Path | None = None
    #: Exports are read here first and never written (one baked into an image by ``prepare``).
    readonly_dir: Path | None = None
    threads: int | None = None


@dataclass(frozen=True)
class BackendState:
    """The backend serving query embeddings now, and why."""

    backend: str
    reason: str
    export: str | None = None
    ready: bool = True
    #: What embeds indexing batches.
    batches: str = "torch"
    #: Whether concurrent query embeddings are embedded together (:mod:`.micro_batch`).
    micro_batch: bool = False


class Accelerator:
    """Moves one embedded model's query embeddings to ONNX Runtime when that is faster.

    Until :meth:`prepare` has finished (in the background, or ahead by ``vancetope-rag
    prepare``) torch serves every query: no export or measurement ever runs inside a turn.
    """

    def __init__(
        self,
        options: BackendOptions,
        model_dir: Path,
        st_model: Any,
        torch_encode: Encode,
        *,
        exporter: Callable[[Any, Path], None] = export_model,
        measure: Callable[[Encode], float] = time_query,
        torch_batch_encode: Encode | None = None,
        measure_batch: Callable[[Encode], float] = time_batch,
        measure_query_batch: Callable[[Encode], tuple[float, float]] = time_query_batch,
        searches: Gauge = SEARCHES,
    ) -> None:
        self.options = options
        self._model_dir = model_dir
        self._st_model = st_model
        self._torch_encode = torch_encode
        self._exporter = exporter
        self._measure = measure
        self._torch_batch_encode = torch_batch_encode or torch_encode
        self._measure_batch = measure_batch
        self._measure_query_batch = measure_query_batch
        self._searches = searches
        #: Set when indexing batches run on ONNX Runtime too.
        self.batch_encoder: OnnxEncoder | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.encoder: OnnxEncoder | None = None
        self.state = BackendState("torch", "ONNX Runtime not prepared yet", ready=False)
        if options.backend == "torch":
            self.state = BackendState("torch", "VANCETOPE_RAG_EMBEDDED_BACKEND=torch")

    def start(self) -> None:
        """Prepare in a background thread (once); torch serves meanwhile."""
        if self.state.ready:
            return
        with self._lock:
            if self._thread is not None:
                return
            # Not a daemon: a daemon killed inside torch's or ONNX Runtime's native code at
            # exit aborts the interpreter. At exit the thread stops after its current step.
            self._thread = threading.Thread(target=self.prepare, name="vancetope-rag-onnx")
            _at_threading_exit(self._stop.set)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> BackendState:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self.state

    def prepare(self) -> BackendState:
        """Export (when no good export exists), check, and pick the backend. Never raises:
        whatever fails leaves torch serving, with the reason in :attr:`state`."""
        with self._lock:
            if self.state.ready:
                return self.state
        try:
            encoder, state = self._prepare()
        except _Stopped:
            encoder, state = None, BackendState("torch", "stopped: the process is exiting")
        except Exception as exc:  # an export can fail in many ways; torch keeps serving
            logger.warning("embedded model stays on torch: %s", exc)
            encoder, state = None, BackendState("torch", f"ONNX Runtime not used: {exc}")
        with self._lock:
            self.encoder = encoder if state.backend == "onnx" else None
            self.batch_encoder = encoder if state.batches == "onnx" else None
            self.state = state
        return state

    def _prepare(self) -> tuple[OnnxEncoder | None, BackendState]:
        try:
            vers = versions()
        except ImportError:
            return None, BackendState(
                "torch", "onnxruntime is not installed: pip install 'vancetope-rag[onnx]'"
            )
        key = export_key(self._model_dir, vers)
        threads = self.options.threads or torch_threads()
        tokenizer = self._st_model.tokenizer
        max_len = int(self._st_model.max_seq_length or 256)
        refused: list[str] = []

        def load(path: Path) -> tuple[OnnxEncoder, float] | None:
            self._check_stop()
            try:
                enc = OnnxEncoder(path, tokenizer, max_len, threads, self._searches.crowded)
                return enc, check_export(enc.encode_alone, self._torch_encode)
            except OnnxExportRefusedError as exc:
                refused.append(str(exc))
                logger.warning("%s", exc)
                return None

        found: tuple[OnnxEncoder, float] | None = None
        if self.options.readonly_dir is not None:
            path = self.options.readonly_dir / key / MODEL_FILE
            if path.is_file():
                found = load(path)
        if found is None and self.options.cache_dir is not None:
            path = self.options.cache_dir / key / MODEL_FILE
            if path.is_file():
                found = load(path)
            if found is None:  # none yet, or refused: export (again) from the shipped weights
                self._check_stop()
                self._exporter(self._st_model, path)
                found = load(path)
        if found is None:
            why = refused[-1] if refused else "no export and no cache directory to write one"
            return None, BackendState("torch", f"ONNX Runtime not used: {why}")
        encoder, cosine = found
        export = str(encoder.path)
        if self.options.backend == "onnx":  # measured for micro-batching alone, not stored
            self._check_stop()
            singles_ms, batch_ms = self._measure_query_batch(encoder.encode_alone)
            micro = micro_batches(singles_ms, batch_ms)
            reason = (
                f"VANCETOPE_RAG_EMBEDDED_BACKEND=onnx (export checked, cosine {cosine:.7f}; "
                f"{micro_batch_reason(micro, singles_ms, batch_ms)})"
            )
            return encoder, BackendState("onnx", reason, export, batches="onnx", micro_batch=micro)
        choice = self._choice(encoder, key, machine_key(threads, vers))
        return encoder, BackendState(
            choice.backend,
            choice.reason,
            export,
            batches=choice.batches,
            micro_batch=choice.micro_batch,
        )

    def _choice(self, encoder: OnnxEncoder, key: str, machine: str) -> Choice:
        """The stored ``auto`` choice of this machine key, or one measured now and stored."""
        name = f"choice-{machine}.json"
        dirs = [d / key for d in (self.options.readonly_dir, self.options.cache_dir) if d]
        for folder in dirs:
            stored = read_choice(folder / name)
            if stored is not None and stored.machine == machine:
                return stored
        self._check_stop()
        # Queries this process answers meanwhile (torch serves them) skew the timings: such
        # a choice serves this process but is not stored, so the next one measures again.
        quiet, begun = self._searches.count == 0, self._searches.begun
        torch_ms, onnx_ms = self._alternating(
            self._measure, self._torch_encode, encoder.encode_alone
        )
        torch_batch_ms, onnx_batch_ms = self._alternating(
            self._measure_batch, self._torch_batch_encode, encoder.encode_alone
        )
        self._check_stop()
        # Micro-batching is measured on the backend that will serve queries.
        singles_ms, batch_ms = self._measure_query_batch(
            encoder.encode_alone if onnx_ms < torch_ms else self._torch_encode
        )
        choice = choose(
            torch_ms, onnx_ms, machine, torch_batch_ms, onnx_batch_ms, singles_ms, batch_ms
        )
        if not (quiet and self._searches.begun == begun):
            logger.warning(
                "embedded backend measured while this process answered queries: used here, "
                "not stored (the next process measures again; `vancetope-rag prepare` on a "
                "quiet machine stores it)"
            )
        elif self.options.cache_dir is not None:
            try:
                write_choice(self.options.cache_dir / key / name, choice)
            except OSError as exc:  # measured again by the next process; nothing lost
                logger.warning("cannot store the embedded backend choice: %s", exc)
        return choice

    def _alternating(
        self, measure: Callable[[Encode], float], torch_encode: Encode, onnx_encode: Encode
    ) -> tuple[float, float]:
        """Medians of ``measure`` on torch and on ONNX Runtime over :data:`MEASURE_ROUNDS`
        rounds, the two alternating: a load that comes or goes while they are timed (another
        process's) weighs on both alike, not on whichever ran first."""
        timings: dict[str, list[float]] = {"torch": [], "onnx": []}
        order = [("torch", torch_encode), ("onnx", onnx_encode)]
        for _ in range(MEASURE_ROUNDS):
            self._check_stop()
            for name, encode in order:
                timings[name].append(measure(encode))
            order.reverse()
        return statistics.median(timings["torch"]), statistics.median(timings["onnx"])

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise _Stopped


class _Stopped(Exception):
    """The process is exiting: the background preparation ends between two steps."""


def _at_threading_exit(stop: Callable[[], None]) -> None:
    # threading's own exit hook runs before the interpreter joins non-daemon threads (atexit
    # runs after); concurrent.futures uses it the same way.
    register = getattr(threading, "_register_atexit", None)
    if callable(register):
        try:
            register(stop)
        except RuntimeError:  # already shutting down: nothing to stop
            stop()


def torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())
