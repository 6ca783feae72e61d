"""The agent commands' command line, one style for all of them: `key=value` settings read into a pydantic
model (dotted keys reach nested models: `lora.r=32`, `llm.extra.top_p=0.95`; a bare value picks a model of a
discriminated union: `llm=openai llm.model=M`), positional paths where a command takes them, and `help`, `-h`
or `--help` to print every setting with its description and default. `--key value` and `--key=value` mean
`key=value` ('-' in a key reads as '_'), and for a boolean setting `--flag` and `--no-flag` mean `flag=true`
and `flag=false`.

The words are parsed here once; what a command hands the library is the validated model. A usage or
configuration problem is a ConfigError; the command prints it as one `error:` line and exits 2.
"""

from __future__ import annotations

import copy
import difflib
import json
import sys
import types
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

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
    settings = tree(model, pairs, positional)
    if positional is not None and paths:
        settings[positional] = paths
    return validated(model, settings, positional)


def validated(model: type[M], settings: Mapping[str, Any], positional: str | None = None) -> M:
    """`settings` (a tree as `tree` makes it) as `model`, or ConfigError naming each problem's setting."""
    try:
        return model.model_validate(settings)
    except ValidationError as e:
        problems = "; ".join(_problem(model, item, positional) for item in e.errors())
        raise ConfigError(f"invalid settings: {problems}") from None


def _problem(model: type[BaseModel], item: Any, positional: str | None) -> str:
    """One validation error in a line, as a user would name the setting."""
    where = _setting(model, item["loc"]) or "settings"
    if item["type"] == "missing":
        return f"no {positional} given (name them as paths)" if where == positional else f"{where} is required"
    if item["type"] == "value_error":  # our validators name the value themselves
        return f"{where}: {item['msg'].removeprefix('Value error, ')}"
    return f"{where}: {item['msg']} (got {item.get('input')!r})"


def _setting(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """Pydantic's error location as the key a user types: a union's tag (llm.openai.model) is not a key."""
    parts: list[str] = []
    current: type[BaseModel] | None = model
    rest = list(loc)
    while rest:
        part = rest.pop(0)
        parts.append(str(part))
        name = {key: name for name, key in keys(current).items()}.get(part) if current else None
        if name is None:
            current = None
            continue
        options = variants(current, name)
        current = options[rest.pop(0)] if options and rest and rest[0] in options else _submodel(current, name)
    return ".".join(parts)


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
    for key in TASK_KEYS:
        if key in pairs:
            pairs[key] = _task_files(key, pairs[key])
    return pairs


TASK_KEYS = ("task", "tasks")  # the settings whose values may name a FlashInfer-Bench file (tasks/flashinfer_bench.py)


def _task_files(key: str, value: str) -> str:
    """A command line's `task=FILE` or `tasks=…,FILE|DIR/,…` with each file loaded and replaced by the names of its
    tasks (`task=`: the first). Only here, on what the user typed: everything after sees names, so a run folder or a
    bench plan read back never opens a file (a definition's reference is code the worker runs)."""
    from tasks import flashinfer_bench

    items = [item.strip() for item in value.split(",")]
    if not any(flashinfer_bench.is_file_reference(item) for item in items):
        return value
    names = []
    for item in items:
        try:
            found = flashinfer_bench.resolve(item) if flashinfer_bench.is_file_reference(item) else [item]
        except flashinfer_bench.TaskFileError as e:
            raise ConfigError(str(e)) from None
        names += found[:1] if key == "task" else found
    return ",".join(names)


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
        raise ConfigError(f"unknown setting {prefix}{key}{_hint(prefix + key, [prefix + k for k in known])} "
                          f"(known: {', '.join(prefix + k for k in known)})")  # fmt: skip


def _hint(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f"; did you mean {close[0]}?" if close else ""


def tree(
    model: type[BaseModel], pairs: Mapping[str, Any], positional: str | None = None,
    base: Mapping[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """`pairs` laid over `base` as the nested dict `model` validates: {'lora.r': '8'} → {'lora': {'r': '8'}}.
    Every key is checked against the model's fields; a bare value given to a nested model sets its `name`
    (llm=openai), which picks the model of a discriminated union whose sub-keys follow (the union's default, or
    `base`'s, when none is given); 'null' unsets an optional setting. Values are kept as given (text from a
    command line, typed values from code): validation is `validated`'s."""
    out = copy.deepcopy(dict(base or {}))
    for key, value in sorted(pairs.items(), key=lambda kv: kv[0].count(".")):  # a union's tag before its keys
        parts = key.split(".")
        if parts[0] == positional:
            raise ConfigError(f"give the {positional} as paths on the command line, not as {key}=…")
        _place(model, out, parts, None if value == "null" else value, positional)
    return out


def _place(model: type[BaseModel], node: dict[str, Any], parts: list[str], value: Any, positional: str | None) -> None:
    current, prefix, index = model, "", 0
    while True:
        part, last = parts[index], index == len(parts) - 1
        typed = {typed_key: name for name, typed_key in keys(current).items()}
        hidden = "name" if prefix else positional  # a kind is its bare value; paths are positional words
        check_keys([part], [k for k in typed if k != hidden], prefix)
        name, key = typed[part], prefix + part
        options, sub = variants(current, name), _submodel(current, name)
        if options:
            tag_key = current.model_fields[name].discriminator
            if last:
                if value not in options:
                    noun = current.model_fields[name].title or "value"
                    raise ConfigError(f"unknown {noun} {key}={value!r}; known: {', '.join(options)}")
                if (node.get(part) or {}).get(tag_key) != value:
                    node[part] = {}  # another kind: the base's settings were the other kind's
                node[part][tag_key] = value
                return
            child = _child(node, part)
            tag = child.setdefault(tag_key, _default_tag(current, name))
            sub_key = parts[index + 1]
            known = [k for k in keys(options[tag]).values() if k != tag_key]
            if sub_key not in known:
                raise ConfigError(f"{key}={tag} has no setting {key}.{sub_key}{_hint(sub_key, known)} "
                                  f"(its settings: {', '.join(f'{key}.{k}' for k in known) or 'none'})")  # fmt: skip
            node, current, prefix, index = child, options[tag], key + ".", index + 1
            continue
        if sub is None and not last and _is_dict(current, name):
            _child(node, part)[".".join(parts[index + 1 :])] = value  # llm.extra.top_p=0.95
            return
        if last:
            if sub is None:
                node[part] = value
            elif "name" in sub.model_fields:
                _child(node, part)["name"] = value
            else:
                raise ConfigError(f"{key} takes sub-keys, e.g. {_example(sub, key)}")
            return
        if sub is None:
            raise ConfigError(f"{key} has no sub-keys (got {'.'.join(parts)})")
        node, current, prefix, index = _child(node, part), sub, key + ".", index + 1


def _child(node: dict[str, Any], part: str) -> dict[str, Any]:
    """The dict at `part` (made where there is none, or where an optional setting was unset)."""
    if not isinstance(node.get(part), dict):
        node[part] = {}
    return node[part]


def _example(model: type[BaseModel], key: str) -> str:
    """The sub-keys to give: the required ones (all of them), else the first; each with its example value."""
    fields = [(n, f) for n, f in model.model_fields.items() if f.is_required()]
    fields = fields or [next(iter(model.model_fields.items()))]
    return " ".join(f"{key}.{f.alias or n}={f.examples[0] if f.examples else '…'}" for n, f in fields)


def variants(model: type[BaseModel], name: str) -> dict[str, type[BaseModel]]:
    """Tag → model of a discriminated-union field (llm: openai → OpenAIConfig, …); empty for any other field."""
    field = model.model_fields[name]
    if not isinstance(field.discriminator, str):
        return {}
    return {m.model_fields[field.discriminator].default: m for m in get_args(field.annotation)}


def _default_tag(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    return getattr(field.get_default(call_default_factory=True), field.discriminator)


def _submodel(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    """The nested model a field holds (an optional one included), or None."""
    annotation = model.model_fields[name].annotation
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        annotation = inner[0] if len(inner) == 1 else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _is_dict(model: type[BaseModel], name: str) -> bool:
    annotation = model.model_fields[name].annotation
    return annotation is dict or get_origin(annotation) is dict


def described(
    model: type[BaseModel], prefix: str = "", skip: Collection[str] = (), positional: str | None = None,
    metavar: str = "PATH …",
) -> list[str]:  # fmt: skip
    """One help line per setting of `model` (nested models under their doc's first line, each model of a union
    under `key=tag`): key, description, default. `skip`: fields described elsewhere; `positional` is shown as
    `metavar`."""
    lines = []
    for name, field in model.model_fields.items():
        if name in skip or (name == "name" and prefix):  # a nested model's kind is its bare value (llm=openai)
            continue
        key = prefix + (field.alias or name)
        options, sub = variants(model, name), _submodel(model, name)
        if options:
            lines.append(f"  {key}: {field.description}")
            for tag, option in options.items():
                lines += [f"  {key}={tag}: {_first_line(option)}", *described(option, key + ".")]
            continue
        if sub is not None:
            lines += [f"  {key}: {field.description or _first_line(sub)}", *described(sub, key + ".")]
            continue
        value = None if field.is_required() else field.get_default(call_default_factory=True)
        default = "" if value is None else f" [{_show(value)}]"
        lines.append(f"  {metavar if name == positional else key:<22} {field.description}{default}")
    return lines


def _first_line(model: type[BaseModel]) -> str:
    return (model.__doc__ or "").strip().splitlines()[0]


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
