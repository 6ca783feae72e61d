"""The messages sent each turn: system prompt, task prompt, then earlier answers and their feedback,
all of them (`history=full`) or only the last (`history=last`)."""

from __future__ import annotations

from typing import Literal, TypedDict

from tools.schema import Message


class Exchange(TypedDict):
    """One finished turn as later turns see it."""

    turn: int
    response: str
    feedback: str


def build_messages(system: str, task: str, history: list[Exchange], mode: Literal["full", "last"]) -> list[Message]:
    messages = [Message(role="system", content=system), Message(role="user", content=task)]
    for exchange in history if mode == "full" else history[-1:]:
        # Some servers refuse an empty assistant message; an empty answer is still worth showing.
        messages.append(Message(role="assistant", content=exchange["response"] or "(empty answer)"))
        messages.append(Message(role="user", content=exchange["feedback"]))
    return messages
