"""The files_visualize tests' loopback vision server: an OpenAI-compatible chat-completions
server that "looks at" images: it answers a fixed sentence naming each image it receives
(its number in arrival order and its width), so a test sees which pages reached the model,
and how many calls were paid. ``status`` makes it answer an error instead (a 503 outage, a
401 refused key).
"""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: What the fake model "sees" in every image: a sentence found in no file.
SEEN = "The vision model sees a lighthouse drawn in blue ink"
MODEL = "vision-mini"
KEY = "sk-bridge-test-7Hq2LlVx0a9"


@dataclass
class VisionServer:
    url: str = ""
    status: int = 200
    images: list[int] = field(default_factory=list)  # the width of each image received
    auth: set[str | None] = field(default_factory=set)
    models: list[str] = field(default_factory=list)  # the model each call asked for
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def calls(self) -> int:
        return len(self.images)

    def answer(self, headers: Any, body: bytes) -> tuple[int, bytes]:
        from PIL import Image

        if self.status != 200:
            return self.status, json.dumps({"error": {"message": f"no ({KEY})"}}).encode()
        request = json.loads(body)
        parts = request["messages"][0]["content"]
        url = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
        png = base64.b64decode(url.split(",", 1)[1])
        with Image.open(io.BytesIO(png)) as image, self.lock:
            self.images.append(image.size[0])
            self.auth.add(headers.get("Authorization"))
            self.models.append(str(request.get("model")))
            number = len(self.images)
        text = f"{SEEN} (image {number}, {image.size[0]}px wide)"
        reply = {"choices": [{"message": {"role": "assistant", "content": text}}]}
        return 200, json.dumps(reply).encode()


@contextmanager
def vision_server() -> Iterator[VisionServer]:
    state = VisionServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status, data = state.answer(self.headers, body)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
