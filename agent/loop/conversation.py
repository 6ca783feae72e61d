"""The messages sent each turn: system prompt, task prompt, then the earlier attempts — all of them
(`history=full`), only the last (`last`), or the last in full and every earlier one as its one-line outcome
(`digest`) — fitted to the model's context window when one is set: first the answer's token budget shrinks to
what is left (down to a floor), then the oldest attempts are compacted to their one-line outcomes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired, TypedDict

from agent.loop.config import History
from agent.loop.records import Message
from agent.loop.tokens import count_messages

DIGEST_HEADING = "## Your earlier attempts (their answers are not repeated here)"


class Exchange(TypedDict):
    """One finished turn as later turns see it."""

    turn: int
    response: str
    feedback: str
    outcome: NotRequired[str]  # one line: status, the key error or the speedup (checkpoints before digest lack it)


def outcome_line(exchange: Exchange) -> str:
    """The turn as one line; a turn recorded without one gets its feedback's first line."""
    if exchange.get("outcome"):
        return exchange["outcome"]
    first = next((line.strip() for line in exchange["feedback"].splitlines() if line.strip()), "")
    return first[:300]


def build_messages(system: str, task: str, history: list[Exchange], mode: History, compacted: int = 0) -> list[Message]:
    """The conversation, with the `compacted` oldest of the attempts shown told as one line each (in `digest`
    mode, all but the last at least). The one-line outcomes follow the task prompt, so roles still alternate."""
    shown = history[-1:] if mode == "last" else history
    lines = max(compacted, len(shown) - 1 if mode == "digest" else 0)
    lines = min(lines, max(len(shown) - 1, 0))
    digest, full = shown[:lines], shown[lines:]
    if digest:
        task += "\n\n" + DIGEST_HEADING + "\n\n" + "\n".join(f"- {outcome_line(e)}" for e in digest)
    messages = [Message(role="system", content=system), Message(role="user", content=task)]
    for exchange in full:
        # Some servers refuse an empty assistant message; an empty answer is still worth showing.
        messages.append(Message(role="assistant", content=exchange["response"] or "(empty answer)"))
        messages.append(Message(role="user", content=exchange["feedback"]))
    return messages


@dataclass(frozen=True)
class Fitted:
    """A conversation fitted to a context window, and what fitting it took."""

    messages: list[Message]
    prompt_tokens: int
    max_tokens: int | None  # what to ask the model for: the setting, or less to fit
    lowered_from: int | None  # the setting, when max_tokens was lowered below it
    compacted: int  # earlier attempts told as one line (beyond what the history mode itself does)
    fits: bool  # False: even with every earlier attempt compacted, less than `floor` tokens are left


def fit(
    system: str, task: str, history: list[Exchange], mode: History, *, context_tokens: int | None,
    max_tokens: int | None, floor: int, compacted: int = 0,
) -> Fitted:  # fmt: skip
    """The conversation within `context_tokens` (prompt + answer budget): the budget lowered to what is left,
    then, once that would fall below `floor`, the oldest attempts compacted one by one. `compacted`: start from
    that many compacted (a retry after the endpoint refused the length)."""
    limit = (len(history[-1:]) if mode == "last" else len(history)) - 1
    while True:
        messages = build_messages(system, task, history, mode, compacted)
        prompt = count_messages(messages)
        if context_tokens is None:
            return Fitted(messages, prompt, max_tokens, None, compacted, True)
        room = context_tokens - prompt
        if max_tokens is not None and room >= max_tokens:
            return Fitted(messages, prompt, max_tokens, None, compacted, True)
        if room >= floor:
            return Fitted(messages, prompt, room, max_tokens, compacted, True)
        if compacted >= limit:
            return Fitted(messages, prompt, max(room, 0), max_tokens, compacted, False)
        compacted += 1
