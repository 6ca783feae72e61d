"""The agent commands' command line, one style for all of them: `key=value` settings (dotted keys reach nested
ones, e.g. llm.model=M), positional paths where a command takes them, and `help`, `-h` or `--help` to print
every setting with its default. `--key value`, `--flag` and `--no-flag` are accepted too, as aliases of
`key=value`, `flag=true` and `flag=false` (dashes in the key read as underscores).

A usage or configuration problem is a ConfigError; the command prints it as one `error:` line and exits 2.
"""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from tools.answer import format_validation_error

HELP_WORDS = ("help", "-h", "--help")
M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A usage or configuration error: the message says what is wrong and what is accepted (exit 2)."""


def wants_help(argv: list[str]) -> bool:
    return bool(argv) and (argv[0] == "help" or any(w in ("-h", "--help") for w in argv))


def split_argv(argv: list[str], flags: Collection[str] = ()) -> tuple[list[str], dict[str, str]]:
    """(positional words, key=value settings) of a command line. `--key value` reads as key=value, and for
    the boolean settings named in `flags`, `--key` as key=true and `--no-key` as key=false."""
    positional, words = [], []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word.startswith("--") and "=" not in word:
            key = word[2:].replace("-", "_")
            if key in flags:
                words.append(f"{key}=true")
            elif key.startswith("no_") and key[3:] in flags:
                words.append(f"{key[3:]}=false")
            elif i + 1 < len(argv):
                words.append(f"{key}={argv[i + 1]}")
                i += 1
            else:
                raise ConfigError(f"{word} needs a value ({key}=VALUE)")
        elif "=" in word:
            key, _, value = word.partition("=")
            if key.startswith("--"):
                key = key[2:].replace("-", "_")
            words.append(f"{key}={value}")
        else:
            positional.append(word)
        i += 1
    return positional, parse_pairs(words)


def parse_pairs(words: list[str]) -> dict[str, str]:
    """`key=value` words → {key: value}; a key given twice, or a word without '=', is an error."""
    pairs: dict[str, str] = {}
    for word in words:
        if not word.isascii() and not _utf8(word):  # argv bytes that are not UTF-8 arrive as lone surrogates
            raise ConfigError(f"{word.encode('utf-8', 'backslashreplace').decode()!r} is not UTF-8 text")
        key, sep, value = word.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise ConfigError(f"expected key=value, got {word!r}")
        if key in pairs:
            raise ConfigError(f"{key} is given twice")
        pairs[key] = value
    return pairs


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@contextmanager
def writing(key: str, path: Path) -> Iterator[None]:
    """A failure to write the output that setting `key` names is a usage error (ConfigError), not a crash."""
    try:
        yield
    except OSError as e:
        raise ConfigError(f"{key}: cannot write {e.filename or path}: {e.strerror}") from None


def check_keys(keys: Collection[str], known: Collection[str], prefix: str = "") -> None:
    """ConfigError for the first key not in `known`, with the closest known one as a suggestion."""
    for key in keys:
        if key in known:
            continue
        close = difflib.get_close_matches(key, list(known), n=1)
        hint = f"; did you mean {prefix}{close[0]}?" if close else ""
        raise ConfigError(f"unknown key {prefix}{key}{hint} (known: {', '.join(prefix + k for k in known)})")


def keys(model: type[BaseModel]) -> list[str]:
    """The keys a user types for `model`'s settings (a field's alias, where it has one)."""
    return [field.alias or name for name, field in model.model_fields.items()]


def settings(model: type[M], pairs: Mapping[str, str]) -> M:
    """A flat settings model from key=value pairs ('null' unsets an optional setting)."""
    check_keys(pairs, keys(model))
    try:
        return model.model_validate({k: None if v == "null" else v for k, v in pairs.items()})
    except ValidationError as e:
        raise ConfigError("invalid settings:\n" + format_validation_error(e)) from None


def described(model: type[BaseModel], prefix: str = "", skip: Collection[str] = ()) -> list[str]:
    """One help line per setting of `model`: its key, its description and its default."""
    lines = []
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        value = None if field.is_required() else field.get_default(call_default_factory=True)
        default = "" if value is None else f" [{_show(value)}]"
        lines.append(f"  {prefix + (field.alias or name):<20} {field.description}{default}")
    return lines


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def run(usage: Callable[[], str], main: Callable[[list[str]], int], argv: list[str] | None = None) -> int:
    """A command's entry: help when asked, `main(argv)` otherwise; a ConfigError is one line and exit 2."""
    argv = sys.argv[1:] if argv is None else argv
    if wants_help(argv):
        print(usage())
        return 0
    try:
        return main(argv)
    except ConfigError as e:
        print(f"error: {e}\n(add help to see every setting)", file=sys.stderr)
        return 2
