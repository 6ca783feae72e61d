"""Secrets out of every text we store or print: the API key's value (registered by the policy that reads it),
anything that looks like a credential (`Bearer …`, `sk-…`), which an endpoint may echo back in an error (a
401 that quotes the key, a 500 that quotes the request's headers), and the credentials a URL carries (its
user-info, `user:pass@`, and query parameters named like secrets, `?api_key=…`). Also the rule for setting
names that hold secrets, which no settings file or command line may give (the key comes from the
environment only)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

MASK = "[redacted]"
URL_MASK = "REDACTED"  # inside a URL, where brackets would make it another URL (an IPv6 host)
MIN_SECRET_CHARS = 8  # shorter values (EMPTY, for servers without authentication) are not secrets
SECRET_NAME = re.compile(r"(?:^|[_-])key$|^(?:api[_-]?|access[_-]?)?token$|secret|password|passwd|authorization"
                         r"|^auth$|credential|^sig(?:nature)?$", re.I)  # fmt: skip
_LOOKS_SECRET = re.compile(r"(?P<bearer>\bBearer\s+)[^\s\"'`,;]+|\bsk-[A-Za-z0-9_\-]{8,}", re.I)
_URL_USER_INFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.\-]*://)[^/\s?#@\"'`]*@", re.I)
_QUERY_PARAM = re.compile(r"(?P<name>[?&;](?P<key>[^=&;#\s\"'`]+)=)[^&;#\s\"'`]*")
_known: set[str] = set()


def register(secret: str) -> None:
    """A value to redact wherever it appears, from now on in this process."""
    if len(secret) >= MIN_SECRET_CHARS:
        _known.add(secret)


def register_url(url: str) -> None:
    """The credentials `url` carries (password, secret-named query values): redacted wherever they appear."""
    parts = urlsplit(url)
    for value in (parts.password or "", *(v for k, v in parse_qsl(parts.query) if SECRET_NAME.search(k))):
        register(value)


def redact(value: Any) -> Any:
    """`value` (a string, or a dict/list of them, as events carry) with every secret masked."""
    if isinstance(value, str):
        for secret in _known:
            value = value.replace(secret, MASK)
        value = _URL_USER_INFO.sub(lambda m: f"{m.group('scheme')}{URL_MASK}@", value)
        value = _QUERY_PARAM.sub(lambda m: m.group("name") + URL_MASK if SECRET_NAME.search(m.group("key"))
                                 else m.group(), value)  # fmt: skip
        return _LOOKS_SECRET.sub(lambda m: (m.group("bearer") or "") + MASK, value)
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def secret_key(tree: Any, prefix: str = "") -> str | None:
    """The dotted name of the first key, at any depth of `tree` (dicts and lists), named like a secret."""
    stack = [(prefix, tree)]
    while stack:  # a loop, not recursion: a tree nested thousands deep is walked, not a crash
        path, node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            name = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and SECRET_NAME.search(key):
                return name
            stack.append((name, child))
    return None
