"""Secrets out of every text we store or print: the API key's value (registered by the policy that reads it)
and anything that looks like a credential (`Bearer …`, `sk-…`), which an endpoint may echo back in an error
(a 401 that quotes the key, a 500 that quotes the request's headers)."""

from __future__ import annotations

import re
from typing import Any

MASK = "[redacted]"
MIN_SECRET_CHARS = 8  # shorter values (EMPTY, for servers without authentication) are not secrets
_LOOKS_SECRET = re.compile(r"(?P<bearer>\bBearer\s+)[^\s\"'`,;]+|\bsk-[A-Za-z0-9_\-]{8,}", re.I)
_known: set[str] = set()


def register(secret: str) -> None:
    """A value to redact wherever it appears, from now on in this process."""
    if len(secret) >= MIN_SECRET_CHARS:
        _known.add(secret)


def redact(value: Any) -> Any:
    """`value` (a string, or a dict/list of them, as events carry) with every secret masked."""
    if isinstance(value, str):
        for secret in _known:
            value = value.replace(secret, MASK)
        return _LOOKS_SECRET.sub(lambda m: (m.group("bearer") or "") + MASK, value)
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value
