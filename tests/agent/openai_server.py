"""A local OpenAI-compatible chat-completions server for tests: real HTTP on 127.0.0.1, answering each
request with the next scripted behaviour, and recording what it was sent. Given a context window it behaves as
vLLM does: a request whose prompt plus max_completion_tokens exceeds it is refused with vLLM's 400 message
(the prompt counted as the loop counts it, plus `extra_prompt_tokens` for a tokenizer that counts more), and an
answer longer than max_completion_tokens is cut there with finish_reason "length". `responder`, where given,
answers whatever the script does not from the request itself (so runs in parallel each get their own answer):
`tool_agent` is one that plays a tool-calling model."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import tiktoken

from agent.loop.records import Message
from agent.loop.tokens import ENCODING, count_messages  # the loop's own count


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
    content_type: str = "application/json"
    message: dict[str, Any] = field(default_factory=dict)  # message fields beside content, e.g. tool_calls


def completion(b: Behaviour, prompt_tokens: int = 1234, completion_tokens: int = 56) -> bytes:
    message = {"role": "assistant", "content": b.content, **b.reasoning, **b.message}
    data: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": [{"index": 0, "finish_reason": b.finish_reason, "message": message}],
    }
    if b.usage:
        data["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                         "total_tokens": prompt_tokens + completion_tokens}  # fmt: skip
    return json.dumps(data).encode()


def tool_calls(*calls: tuple[str, dict[str, Any] | str]) -> Behaviour:
    """A reply calling tools, as an endpoint sends it: the arguments as a JSON string (a str is sent as it is)."""
    sent = [{"id": f"call_{i}", "type": "function",
             "function": {"name": name, "arguments": a if isinstance(a, str) else json.dumps(a)}}
            for i, (name, a) in enumerate(calls)]  # fmt: skip
    return Behaviour(content="", finish_reason="tool_calls", message={"content": None, "tool_calls": sent})


def tool_agent(answer: str) -> Callable[[dict[str, Any]], Behaviour]:
    """A model that, offered tools, compiles `answer`, evaluates it, then submits it (by how many replies the
    conversation holds); asked without tools, answers with it."""

    def respond(body: dict[str, Any]) -> Behaviour:
        if not body.get("tools"):
            return Behaviour(content=answer)
        replies = sum(m["role"] == "assistant" for m in body["messages"])
        return tool_calls((("compile", "evaluate", "submit")[min(replies, 2)], {"answer": answer}))

    return respond


class OpenAIServer:
    def __init__(
        self,
        context_tokens: int | None = None,
        extra_prompt_tokens: int = 0,
        responder: Callable[[dict[str, Any]], Behaviour] | None = None,
    ) -> None:
        self.script: deque[Behaviour] = deque()
        self.default = Behaviour()
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.context_tokens, self.extra_prompt_tokens = context_tokens, extra_prompt_tokens
        self.refused = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                server.requests.append(
                    {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                )
                if server.script:
                    b = server.script.popleft()
                else:
                    b = server.responder(body) if server.responder else server.default
                if b.delay_s:
                    time.sleep(b.delay_s)
                if b.echo_authorization:
                    auth = self.headers.get("authorization", "")
                    key = auth.split()[-1] if auth else ""
                    message = f"Incorrect API key provided: {auth}" if b.status == 401 else f"failed for key {key}"
                    payload = json.dumps({"error": {"message": message, "headers": dict(self.headers)}}).encode()
                elif b.status != 200:
                    payload = b.body or json.dumps({"error": {"message": f"scripted {b.status}"}}).encode()
                elif server.context_tokens is not None:
                    b, payload = server.within_context(body, b)
                else:
                    payload = b.body if b.body is not None else completion(b)
                try:
                    self.send_response(b.status)
                    self.send_header("content-type", b.content_type)
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

    def within_context(self, body: dict[str, Any], b: Behaviour) -> tuple[Behaviour, bytes]:
        """The answer as a server with a context window gives it: refused when too long, cut at max tokens."""
        chat = [m for m in body["messages"] if m["role"] in ("system", "user", "assistant")]  # a tool's: not counted
        prompt = count_messages([Message(role=m["role"], content=m.get("content") or "") for m in chat])
        prompt += self.extra_prompt_tokens
        wanted = body.get("max_completion_tokens") or 0
        if prompt + wanted > self.context_tokens:
            self.refused += 1
            message = (f"This model's maximum context length is {self.context_tokens} tokens. However, you requested "
                       f"{prompt + wanted} tokens ({prompt} in the messages, {wanted} in the completion). Please "
                       "reduce the length of the messages or completion.")  # fmt: skip
            return replace(b, status=400), json.dumps({"error": {"message": message, "code": 400}}).encode()
        encoding = tiktoken.get_encoding(ENCODING)
        tokens = encoding.encode(b.content, disallowed_special=())
        if wanted and len(tokens) > wanted:
            b = replace(b, content=encoding.decode(tokens[:wanted]), finish_reason="length")
        return b, completion(b, prompt, min(len(tokens), wanted or len(tokens)))

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
