"""The model's response inside an RL trainer's query: OpenRLHF sends the prompt and the query (the prompt's
tokens, cut from the front when the whole would not fit `--data.max_len`, then the response's, decoded).
Shared by the service's POST /v1/openrlhf and the file form agent/rl/rewards.py."""

from __future__ import annotations


def response_after(query: str, prompt: str) -> str | None:
    """The model's part of an OpenRLHF query: the query is its prompt's tokens, possibly cut from the front to
    fit `--data.max_len`, then the response's, decoded. None when no part of the prompt's end is found."""
    if query.startswith(prompt):
        return query[len(prompt) :]
    for skip in range(4):  # a cut through a character decodes to up to three stray ones
        for size in (64, 16):  # a short kept part: the probe must not reach into the response
            probe = query[skip : skip + size]
            at = prompt.find(probe) if len(probe) == size else -1
            while at >= 0:
                if query[skip:].startswith(prompt[at:]):
                    return query[skip + len(prompt) - at :]
                at = prompt.find(probe, at + 1)
    return None
