"""The agent commands' command line, one style for all of them: `key=value` settings read into a pydantic
model (dotted keys reach nested models: `lora.r=32`, `llm.extra.top_p=0.95`), positional paths where a
command takes them, and `help`, `-h` or `--help` to print every setting with its description and default.
`--key value` and `--key=value` mean `key=value` ('-' in a key reads as '_'), and for a boolean setting
`--flag` and `--no-flag` mean `flag=true` and `flag=false`.

A usage or configuration problem is a ConfigError; the command prints it as one `error:` line and exits 2.
"""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, get_origin

from pydantic import BaseModel, ValidationError

HELP_WORDS = ("help", "-h", "--help")
M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A usage or configuration error: the message says what is wrong and what is accepted (exit 2)."""


def wants_help(argv: list[str]) -> bool:
    return bool(argv) and (argv[0] == "help" or any(w in ("-h", "--help") for w in argv))


def read(model: type[M], argv: list[str], positional: str | None = None) -> M:
    """The settings `argv` gives, validated. The words without '=' (paths) become the list field
    `positional`; a command without one refuses them."""
    flags = {keys(model)[name] for name, f in model.model_fields.items() if f.annotation is bool}
    paths, pairs = split_argv(argv, flags)
    if paths and positional is None:
        raise ConfigError(f"unexpected word {paths[0]!r}: settings are key=value")
    tree = nest(model, pairs, positional)
    if positional is not None and paths:
        tree[positional] = paths
    try:
        return model.model_validate(tree)
    except ValidationError as e:
        problems = "; ".join(_problem(item, positional) for item in e.errors())
        raise ConfigError(f"invalid settings: {problems}") from None


def _problem(item: dict[str, Any], positional: str | None) -> str:
    """One validation error in a line, as a user would name the setting."""
    where = ".".join(str(part) for part in item["loc"]) or "settings"
    if item["type"] == "missing":
        return f"no {positional} given (name them as paths)" if where == positional else f"{where} is required"
    if item["type"] == "value_error":  # our validators name the value themselves
        return f"{where}: {item['msg'].removeprefix('Value error, ')}"
    return f"{where}: {item['msg']} (got {item.get('input')!r})"


def split_argv(argv: list[str], flags: Collection[str] = ()) -> tuple[list[str], dict[str, str]]:
    """(positional words, key=value settings) of a command line, aliases read as settings."""
    positional, words = [], []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word.startswith("--") and "=" not in word:
            key = word[2:].replace("-", "_")
            if key in flags and i + 1 < len(argv) and argv[i + 1].lower() in ("true", "false"):
                words.append(f"{key}={argv[i + 1]}")  # --allow-mixed true
                i += 1
            elif key in flags:
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


def keys(model: type[BaseModel]) -> dict[str, str]:
    """Field name → the key a user types for it (its alias, where it has one)."""
    return {name: field.alias or name for name, field in model.model_fields.items()}


def check_keys(given: Collection[str], known: Collection[str], prefix: str = "") -> None:
    """ConfigError for the first key not in `known`, with the closest known one as a suggestion."""
    for key in given:
        if key in known:
            continue
        close = difflib.get_close_matches(prefix + key, [prefix + k for k in known], n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ConfigError(f"unknown setting {prefix}{key}{hint} (known: {', '.join(prefix + k for k in known)})")


def nest(model: type[BaseModel], pairs: dict[str, str], positional: str | None = None) -> dict[str, Any]:
    """{'lora.r': '8'} → {'lora': {'r': '8'}}, every key checked against the model's fields; a nested model
    given a bare value (llm=openai) sets its `name`; 'null' unsets an optional setting."""
    tree: dict[str, Any] = {}
    for key, value in pairs.items():
        parts = key.split(".")
        if parts[0] == positional:
            raise ConfigError(f"give the {positional} as paths on the command line, not as {key}=…")
        node, current, prefix = tree, model, ""
        for index, part in enumerate(parts):
            typed = {typed_key: name for name, typed_key in keys(current).items()}
            check_keys([part], [k for k in typed if k not in (positional, "name")], prefix)
            name = typed[part]
            sub = _submodel(current, name)
            last = index == len(parts) - 1
            if sub is None and not last and _is_dict(current, name):
                node.setdefault(part, {})[".".join(parts[index + 1 :])] = value  # llm.extra.top_p=0.95
                break
            if last:
                if sub is None:
                    node[part] = None if value == "null" else value
                elif "name" in sub.model_fields:
                    node.setdefault(part, {})["name"] = value
                else:
                    example = f"{prefix + part}.{next(iter(sub.model_fields))}"
                    raise ConfigError(f"{prefix + part} takes sub-keys, e.g. {example}=…")
            elif sub is None:
                raise ConfigError(f"{prefix + part} has no sub-keys (got {key})")
            else:
                node = node.setdefault(part, {})
                current, prefix = sub, f"{prefix}{part}."
    return tree


def _submodel(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    annotation = model.model_fields[name].annotation
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _is_dict(model: type[BaseModel], name: str) -> bool:
    annotation = model.model_fields[name].annotation
    return annotation is dict or get_origin(annotation) is dict


def described(
    model: type[BaseModel], prefix: str = "", skip: Collection[str] = (), positional: str | None = None,
    metavar: str = "PATH …",
) -> list[str]:  # fmt: skip
    """One help line per setting of `model` (nested models under their doc's first line): key, description,
    default. `skip`: fields described elsewhere; `positional` is shown as `metavar`."""
    lines = []
    for name, field in model.model_fields.items():
        if name in skip or (name == "name" and prefix):  # a nested model's kind is its bare value (llm=openai)
            continue
        key = prefix + (field.alias or name)
        sub = _submodel(model, name)
        if sub is not None:
            lines += [f"  {key}: {(sub.__doc__ or '').strip().splitlines()[0]}", *described(sub, key + ".")]
            continue
        value = None if field.is_required() else field.get_default(call_default_factory=True)
        default = "" if value is None else f" [{_show(value)}]"
        lines.append(f"  {metavar if name == positional else key:<22} {field.description}{default}")
    return lines


def usage(model: type[BaseModel], synopsis: str, about: str, positional: str | None = None,
          metavar: str = "PATH …") -> str:  # fmt: skip
    """A command's help: its synopsis, what it does, and every setting."""
    return "\n".join([f"usage: {synopsis}", "", about.strip(), "", "settings (key=value; --key value too):",
                      *described(model, positional=positional, metavar=metavar)])  # fmt: skip


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
        print(f"error: {e}", file=sys.stderr)
        return 2
