"""A loopback OpenAI-compatible chat-completions server that "reads" PNG images, for the
vision OCR tests: it answers a fixed text naming each image it receives (its width), checks
the key, the model and the request's shape, counts requests and those in flight, and can
answer an error, slowly, or with a body of the test's choosing.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from PIL import Image

from vancetope_rag.extraction.registry import OcrConfig

#: What the fake vision model "reads" in every image: a sentence that exists nowhere else.
TRANSCRIPTION = "Page transcription: the turbine inspection interval is 90 days"
KEY = "sk-test-Zq7SECRETkey0042"
MODEL = "vision-mini"


@dataclass
class VisionServer:
    """An OpenAI-compatible chat-completions endpoint that "reads" PNG images."""

    status: int = 200
    delay: float = 0.0
    answer: str | None = None  # None: TRANSCRIPTION and the image's width
    raw_answer: bytes | None = None
    error_body: bytes = b""
    requests: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    base_url: str = ""

    def handle(self, path: str, headers: Any, body: bytes) -> tuple[int, bytes]:
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
            return self._answer(path, headers, body)
        finally:
            with self.lock:
                self.in_flight -= 1

    def _answer(self, path: str, headers: Any, body: bytes) -> tuple[int, bytes]:
        if path != "/v1/chat/completions":
            self.problems.append(f"path {path}")
            return 404, b'{"error": {"message": "no such route"}}'
        if self.status != 200:
            return self.status, self.error_body
        request = json.loads(body)
        with self.lock:
            self.requests.append(request)
        if headers.get("Authorization") != f"Bearer {KEY}":
            self.problems.append(f"authorization {headers.get('Authorization')!r}")
        if request.get("model") != MODEL or request.get("temperature") != 0:
            self.problems.append(f"model {request.get('model')!r}")
        content = request["messages"][0]["content"]
        text = [part["text"] for part in content if part["type"] == "text"]
        urls = [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
        if not text or "verbatim" not in text[0] or len(urls) != 1:
            self.problems.append("not one instruction and one image")
            return 400, b'{"error": {"message": "bad request"}}'
        prefix = "data:image/png;base64,"
        if not urls[0].startswith(prefix):
            self.problems.append("not a PNG data URL")
            return 400, b"{}"
        png = base64.b64decode(urls[0][len(prefix) :], validate=True)
        with Image.open(io.BytesIO(png)) as image:
            if image.format != "PNG":
                self.problems.append(f"image format {image.format}")
            width = image.size[0]
        if self.raw_answer is not None:
            return 200, self.raw_answer
        answer = self.answer if self.answer is not None else f"{TRANSCRIPTION} ({width}px)"
        # Content as a list of parts, as some compatible servers send it.
        message = {"role": "assistant", "content": [{"type": "text", "text": answer}]}
        return 200, json.dumps({"choices": [{"index": 0, "message": message}]}).encode()

    def config(self, **overrides: Any) -> OcrConfig:
        settings: dict[str, Any] = {
            "engine": "vision",
            "vision_model": MODEL,
            "frame_model": MODEL,
            "vision_base_url": self.base_url + "/",
            "api_key": KEY,
        }
        return OcrConfig(**{**settings, **overrides})


def vision_settings(server: VisionServer, **more: str) -> dict[str, str]:
    """The tenant settings that read scans (and describe video frames) with ``server``."""
    return {
        "rag.extract.ocr": "vision",
        "rag.extract.vision.model": MODEL,
        "rag.extract.vision.baseUrl": server.base_url,
        "rag.extract.vision.apiKey": KEY,
        **more,
    }


@contextlib.contextmanager
def serve_vision() -> Iterator[VisionServer]:
    """A :class:`VisionServer` on a free port of 127.0.0.1 while the block runs; the
    problems it saw (a wrong key, model or request shape) fail the block at its end."""
    state = VisionServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status, answer = state.handle(self.path, self.headers, body)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        assert not state.problems, state.problems
