"""`key=value` command lines read into a pydantic settings model, and the help printed from that model.

Words holding '=' are settings, dotted keys reaching nested models (`lora.r=32`); `--key value` and
`--key=value` mean `key=value`, and '-' in a key reads as '_' (`--allow-mixed true`). The other words are
the positional paths. A nested model given a bare value (`llm=openai`) sets its `name`.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, TypeVar, get_origin

from pydantic import BaseModel, ValidationError

from agent.config import ConfigError, parse_pairs

M = TypeVar("M", bound=BaseModel)
HELP = frozenset({"help", "--help", "-h"})


def wants_help(argv: list[str]) -> bool:
    return any(word in HELP for word in argv)


def read(model: type[M], argv: list[str], positional: str) -> M:
    """The settings `argv` gives, validated; ConfigError (one line) for anything wrong. The positional
    words become the list field `positional`."""
    paths, words = _split(argv)
    tree = _nest(model, parse_pairs(words), positional)
    if paths:
        tree[positional] = paths
    try:
        return model.model_validate(tree)
    except ValidationError as e:
        raise ConfigError("invalid settings: " + "; ".join(_problem(item, positional) for item in e.errors())) from None


def usage(model: type[BaseModel], synopsis: str, positional: str, metavar: str) -> str:
    """Every setting with its description and default, nested ones under their model's first doc line."""
    lines = [
        f"usage: {synopsis}",
        "",
        "settings (key=value, or --key value; null unsets an optional one):",
        *_described(model, "", positional, metavar),
    ]
    return "\n".join(lines)


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """(positional words, settings as key=value with their keys normalised: no leading dashes, '_' for '-')."""
    paths, pairs = [], []
    words = iter(argv)
    for word in words:
        if word.startswith("--") and "=" not in word:
            key, value = word, next(words, None)
            if value is None:
                raise ConfigError(f"{word} needs a value: {word} VALUE, or {word[2:]}=VALUE")
        elif "=" in word:
            key, _, value = word.partition("=")
        else:
            paths.append(word)
            continue
        pairs.append(f"{key.lstrip('-').replace('-', '_')}={value}")
    return paths, pairs


def _nest(model: type[BaseModel], pairs: dict[str, str], positional: str) -> dict[str, Any]:
    """{'lora.r': '8'} → {'lora': {'r': '8'}}, each key checked against the model's fields."""
    tree: dict[str, Any] = {}
    for key, value in pairs.items():
        parts = key.split(".")
        if parts[0] == positional:
            raise ConfigError(f"name the {positional} files as paths on the command line, not as {key}=…")
        node, current, prefix = tree, model, ""
        for index, part in enumerate(parts):
            if part not in current.model_fields:
                known = [prefix + k for k in current.model_fields if k not in (positional, "name")]
                close = difflib.get_close_matches(prefix + part, known, n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise ConfigError(f"unknown setting {prefix + part}{hint} (known: {', '.join(known)})")
            sub = _submodel(current, part)
            if sub is None and index < len(parts) - 1 and _is_dict(current, part):
                node.setdefault(part, {})[".".join(parts[index + 1 :])] = value  # llm.extra.top_p=0.95
                break
            if index == len(parts) - 1:
                if sub is None:
                    node[part] = None if value == "null" else value
                elif "name" in sub.model_fields:
                    node.setdefault(part, {})["name"] = value
                else:
                    raise ConfigError(
                        f"{prefix + part} takes sub-keys, e.g. {prefix + part}.{next(iter(sub.model_fields))}=…"
                    )
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


def _problem(item: dict[str, Any], positional: str) -> str:
    where = ".".join(str(part) for part in item["loc"]) or "settings"
    if item["type"] == "missing" and where == positional:
        return f"no {positional} files given"
    if item["type"] == "missing":
        return f"{where} is required"
    if item["type"] == "extra_forbidden":
        return f"unknown setting {where}"
    if item["type"] == "value_error":  # our validators name the value themselves
        return f"{where}: {item['msg'].removeprefix('Value error, ')}"
    return f"{where}: {item['msg']} (got {item.get('input')!r})"


def _described(model: type[BaseModel], prefix: str, positional: str, metavar: str) -> list[str]:
    lines = []
    for name, field in model.model_fields.items():
        if name == "name" and prefix:
            continue  # the nested model's kind, given as the bare value (llm=openai)
        sub = _submodel(model, name)
        if sub is not None:
            lines += [f"  {prefix + name}: {(sub.__doc__ or '').strip().splitlines()[0]}"]
            lines += _described(sub, f"{prefix}{name}.", positional, metavar)
            continue
        value = None if field.is_required() else field.get_default(call_default_factory=True)
        default = "" if value is None else f" [{_show(value)}]"
        label = metavar if name == positional else prefix + name
        lines.append(f"  {label:<22} {field.description}{default}")
    return lines


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return json.dumps(value) if isinstance(value, dict | list) else str(value)
