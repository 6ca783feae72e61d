"""Any OpenAI-compatible chat-completions endpoint, with our own retries so each one is logged.

Retried with exponential back-off (the server's Retry-After wins when it gives a usable one): 408, 409,
429, 5xx, time-outs, dropped connections, and replies that are not a chat completion; each retry is said on
the terminal with its wait. Replies that will never read as an answer are not retried but answered at once,
as a Reply whose `unreadable` says why (the turn's extract error): a streamed (server-sent events) body, a
message with only tool calls (in tools mode, mode=tools, those are the reply: `act` sends the tools and
reads the calls), empty content that the model ended on purpose. Refusals that retrying cannot
fix end the run: a bad key or unknown model is a
configuration error, a request longer than the model's context a ContextOverflow (the loop compacts the
conversation and asks once more), any other 4xx a ModelError. Every text taken from the endpoint is redacted
(agent/loop/redact.py) before it goes anywhere: servers echo the key in their errors.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import openai

from agent.cli import ConfigError
from agent.loop.config import OpenAIConfig
from agent.loop.journal import Journal
from agent.loop.policies.base import ContextOverflow, ModelError, Reply
from agent.loop.records import Message, ToolCall
from agent.loop.redact import redact, register, register_url

RETRY_STATUS = {408, 409, 429}
MAX_WAIT_S = 60.0
# How servers say a request is longer than the model's context: OpenAI's code, vLLM's and SGLang's wording.
_TOO_LONG = re.compile(r"context[_ ]length|maximum context|context window|prompt is too long|too many tokens", re.I)
_LIMIT = re.compile(r"maximum context length is (\d+)")
_PROMPT = re.compile(r"(\d+) (?:tokens )?in the messages")


class MalformedReply(Exception):
    """The server answered 200 with something that is not a usable chat completion."""


class OpenAIPolicy:
    max_answers = None
    max_steps = None

    def __init__(self, config: OpenAIConfig, journal: Journal):
        if not config.model:
            raise ConfigError("llm=openai needs llm.model=NAME (the model name the endpoint serves)")
        key = os.environ.get(config.api_key_env)
        if not key:
            raise ConfigError(
                f"llm=openai reads its API key from ${config.api_key_env}, which is not set "
                f"(for a server without authentication, set it to any value, e.g. {config.api_key_env}=EMPTY)"
            )
        register(key)
        register_url(config.base_url)
        self.config = config
        self.journal = journal
        self.client = openai.OpenAI(base_url=config.base_url, api_key=key, max_retries=0, timeout=config.timeout_s)

    def describe(self) -> str:
        return f"openai {self.config.model} at {redact(self.config.base_url)}"  # errors and records carry it

    def close(self) -> None:
        self.client.close()

    def respond(self, messages: list[Message], turn: int, max_tokens: int | None = None) -> Reply:
        return self._ask([m.model_dump() for m in messages], turn, max_tokens)

    def act(self, messages: list[dict[str, Any]], step: int, tools: list[dict[str, Any]],
            max_tokens: int | None = None) -> Reply:  # fmt: skip
        return self._ask(messages, step, max_tokens, tools)

    def _ask(self, messages: list[dict[str, Any]], turn: int, max_tokens: int | None,
             tools: list[dict[str, Any]] | None = None) -> Reply:  # fmt: skip
        request: dict[str, Any] = {"model": self.config.model, "messages": messages}
        if tools:
            request["tools"] = tools
        if self.config.temperature is not None:
            request["temperature"] = self.config.temperature
        if (limit := max_tokens if max_tokens is not None else self.config.max_tokens) is not None:
            request["max_completion_tokens"] = limit
        if self.config.extra:
            request["extra_body"] = self.config.extra
        for attempt in range(self.config.retries + 1):
            try:
                raw = self.client.chat.completions.with_raw_response.create(**request)
                return _streamed(raw.text) or _reply(raw.parse(), tools=bool(tools))
            except Exception as e:  # sorted below: only transient failures come round again
                reason, wait = self._classify(e, attempt)
                if attempt == self.config.retries:
                    raise ModelError(f"{self.describe()}: {reason} (gave up after {attempt + 1} tries)") from None
                self.journal.event("llm.retry", turn=turn, attempt=attempt + 1, wait_s=round(wait, 2), reason=reason)
                self.journal.say(f"turn {turn}: {reason}; retry {attempt + 1} of {self.config.retries} in {wait:.1f} s")
                time.sleep(wait)
        raise AssertionError("unreachable")

    def _classify(self, error: Exception, attempt: int) -> tuple[str, float]:
        """(reason, seconds to wait) for a transient failure; raises for the others."""
        wait = min(self.config.backoff_s * 2**attempt, MAX_WAIT_S)
        if isinstance(error, openai.APITimeoutError):
            return f"no answer within {self.config.timeout_s:g} s", wait
        if isinstance(error, openai.APIConnectionError):
            return f"connection failed ({_short(str(error.__cause__ or error))})", wait
        if isinstance(error, openai.APIStatusError):
            detail = _short(error.message)
            if error.status_code in RETRY_STATUS or error.status_code >= 500:
                return f"HTTP {error.status_code}: {detail}", _retry_after(error.response, wait)
            if error.status_code in (400, 413) and _TOO_LONG.search(error.message or ""):
                limit, prompt = _LIMIT.search(error.message), _PROMPT.search(error.message)
                raise ContextOverflow(
                    f"{self.describe()} refused the request as too long (HTTP {error.status_code}: {detail})",
                    int(limit.group(1)) if limit else None,
                    int(prompt.group(1)) if prompt else None,
                ) from None
            if error.status_code in (401, 403, 404):
                raise ConfigError(
                    f"{self.describe()} refused the request (HTTP {error.status_code}: {detail}); "
                    f"check llm.base_url, llm.model and ${self.config.api_key_env}"
                ) from None
            raise ModelError(f"{self.describe()} refused the request (HTTP {error.status_code}: {detail})") from None
        if isinstance(
            error, MalformedReply | openai.APIResponseValidationError | json.JSONDecodeError | UnicodeDecodeError
        ):
            return f"unusable reply: {_short(str(error))}", wait
        raise error


def _streamed(body: str) -> Reply | None:
    """The Reply for a body of server-sent events (`data: {...}` lines: a streamed reply, which the loop never
    asks for), or None for any other body."""
    if not body.lstrip().startswith(("data:", "event:")):
        return None
    return Reply(
        text="",
        unreadable="the endpoint answered with a stream (server-sent events) where one chat completion was asked "
        "for, so there is no answer to read: the server streams every reply (check its settings and llm.extra)",
    )


def _unreadable(text: str, message: Any, finish_reason: str | None, reasoning: str | None) -> str | None:
    """Why a well-formed completion still holds no answer: only tool calls, or empty content the model ended."""
    if text.strip():
        return None
    calls = getattr(message, "tool_calls", None) or []
    names = [getattr(getattr(c, "function", None), "name", None) or "(unnamed)" for c in calls]
    write = "write the ```ptx (or ```cuda) block and the ```json launch spec in the message itself"
    if names:
        more = f" (and {len(names) - 1} more call{'s' if len(names) > 2 else ''})" if len(names) > 1 else ""
        return (f"the model called tool {_short(names[0], 80)}{more}; this mode offers no tools and expects the "
                f"answer in the message: {write}")  # fmt: skip
    if finish_reason == "stop":
        thought = f", after {len(reasoning):,} characters of reasoning (not read as the answer)" if reasoning else ""
        return f"the reply was empty: the model ended it (finish_reason=stop) without any text{thought}; {write}"
    return None


def _reply(completion: Any, tools: bool = False) -> Reply:
    """A Reply from a chat completion, keeping reasoning text where the server returns it; with `tools`, its
    tool calls (then a reply of calls alone is a reply, not an unreadable one)."""
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise MalformedReply(f"no choices in the reply ({_short(repr(completion))})")
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise MalformedReply("the first choice has no message")
    extra = getattr(message, "model_extra", None) or {}
    reasoning = extra.get("reasoning_content") or extra.get("reasoning")
    reasoning = reasoning if isinstance(reasoning, str) and reasoning else None
    usage = getattr(completion, "usage", None)
    text, finish_reason = message.content or "", getattr(choice, "finish_reason", None)
    calls = _tool_calls(message) if tools else ()
    return Reply(
        text=text,
        reasoning=reasoning,
        finish_reason=finish_reason,
        prompt_tokens=getattr(usage, "prompt_tokens", None),
        completion_tokens=getattr(usage, "completion_tokens", None),
        unreadable=None if tools else _unreadable(text, message, finish_reason, reasoning),
        tool_calls=calls,
    )


def _tool_calls(message: Any) -> tuple[ToolCall, ...]:
    """The message's function calls, their arguments as sent (malformed JSON is the tool node's to answer)."""
    calls = []
    for n, call in enumerate(getattr(message, "tool_calls", None) or []):
        function = getattr(call, "function", None)
        name, arguments = getattr(function, "name", None), getattr(function, "arguments", None)
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        calls.append(ToolCall(id=str(getattr(call, "id", None) or f"call_{n}"), name=str(name or ""), arguments=raw))
    return tuple(calls)


def _retry_after(response: Any, default: float) -> float:
    """The server's wait, at most MAX_WAIT_S; `default` when it gives none we can use (nan, negative, junk)."""
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:  # an HTTP date, or junk
            try:
                seconds = (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds()
            except (TypeError, ValueError):
                continue
        if math.isfinite(seconds) and seconds >= 0:
            return min(seconds, MAX_WAIT_S)
    return default


def _short(text: str, limit: int = 300) -> str:
    """Endpoint text as it may be kept: secrets masked, on one line, cut at `limit` characters."""
    text = " ".join(redact(str(text)).split())
    return text if len(text) <= limit else text[:limit] + "…"
