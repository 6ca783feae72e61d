"""What every policy is: something that answers the conversation so far, and what can go wrong."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from agent.loop.records import Message, ToolCall


@dataclass(frozen=True)
class Reply:
    """One answer. Token counts are None where the policy cannot tell; the loop counts them then."""

    text: str
    reasoning: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    unreadable: str | None = None  # why the reply holds no answer any retry could give (one line for the model)
    tool_calls: tuple[ToolCall, ...] = ()  # tools mode: the functions the reply calls


class Policy(Protocol):
    """Answers one turn. `max_answers` is how many answers it has (None: no end): the loop stops
    asking after that many, so offline policies end a run cleanly instead of failing."""

    max_answers: int | None
    max_steps: int | None  # tools mode's replies it has (None: no end)

    def describe(self) -> str:
        """One line for people: what answers, e.g. 'openai gpt-4.1 at https://…/v1'."""
        ...

    def respond(self, messages: list[Message], turn: int, max_tokens: int | None = None) -> Reply:
        """The answer for 1-based `turn`, in at most `max_tokens` tokens (None: the policy's own setting; the
        loop lowers it to fit a context window). A resumed run asks again for the turn it lost, so offline
        policies answer by turn number, not by call count."""
        ...

    def act(self, messages: list[dict[str, Any]], step: int, tools: list[dict[str, Any]],
            max_tokens: int | None = None) -> Reply:  # fmt: skip
        """Tools mode: the reply for 1-based `step` to the conversation so far (chat-completions messages, tool
        calls and their results among them), which may call `tools` (their JSON schemas). Offline policies answer
        by step number, as `respond` does by turn."""
        ...

    def close(self) -> None: ...


class ModelError(RuntimeError):
    """The model could not answer (endpoint down after retries, request refused): the run stops
    and can be resumed. The message is for people."""


class ContextOverflow(ModelError):
    """The endpoint refused the request as longer than its context window. `limit` and `prompt_tokens` are the
    endpoint's own numbers where its message gives them (its tokenizer is not ours)."""

    def __init__(self, message: str, limit: int | None = None, prompt_tokens: int | None = None):
        super().__init__(message)
        self.limit, self.prompt_tokens = limit, prompt_tokens
