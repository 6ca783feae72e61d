"""A local OpenAI-compatible chat-completions server for tests: real HTTP on 127.0.0.1, answering each
request with the next scripted behaviour, and recording what it was sent."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Behaviour:
    """One response: a chat completion with `content`, or an HTTP error, a garbled body, or a stall."""

    content: str = "ok"
    finish_reason: str = "stop"
    reasoning: dict[str, str] = field(default_factory=dict)  # extra message fields, e.g. reasoning_content
    status: int = 200
    body: bytes | None = None  # sent as it is instead of a completion
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    usage: bool = True
    echo_authorization: bool = False  # the error names the request's Authorization header, as careless servers do


def completion(b: Behaviour) -> bytes:
    message = {"role": "assistant", "content": b.content, **b.reasoning}
    data: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": [{"index": 0, "finish_reason": b.finish_reason, "message": message}],
    }
    if b.usage:
        data["usage"] = {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290}
    return json.dumps(data).encode()


class OpenAIServer:
    def __init__(self) -> None:
        self.script: deque[Behaviour] = deque()
        self.default = Behaviour()
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                server.requests.append(
                    {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                )
                b = server.script.popleft() if server.script else server.default
                if b.delay_s:
                    time.sleep(b.delay_s)
                if b.echo_authorization:
                    auth = self.headers.get("authorization", "")
                    key = auth.split()[-1] if auth else ""
                    message = f"Incorrect API key provided: {auth}" if b.status == 401 else f"failed for key {key}"
                    payload = json.dumps({"error": {"message": message, "headers": dict(self.headers)}}).encode()
                elif b.status != 200:
                    payload = b.body or json.dumps({"error": {"message": f"scripted {b.status}"}}).encode()
                else:
                    payload = b.body if b.body is not None else completion(b)
                try:
                    self.send_response(b.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for k, v in b.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a time-out test)
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def __enter__(self) -> OpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Recorder:
    """What a policy reports (a Journal's event and say), kept for a test to look at."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []
        self.lines: list[str] = []

    def event(self, name: str, **fields: Any) -> None:
        self.events.append((name, fields))

    def say(self, text: str) -> None:
        self.lines.append(text)
