"""The key=value command line of the SFT commands (agent/cli.py), on their real settings models."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from agent import cli
from agent.cli import ConfigError
from agent.sft.settings import SynthSettings, TrainSettings


def test_key_value_dotted_keys_and_positional_paths() -> None:
    s = cli.read(TrainSettings, ["a.jsonl", "model=m", "out=o", "lora.r=8", "b.jsonl", "max_steps=null"], "data")
    assert s.data == [Path("a.jsonl"), Path("b.jsonl")] and s.lora.r == 8 and s.lora.alpha == 64
    assert (s.model, s.out, s.max_steps) == ("m", Path("o"), None)


def test_double_dash_is_an_alias_and_dashes_read_as_underscores() -> None:
    argv = ["a.jsonl", "--model", "m", "--out=o", "--lora.r", "4", "--allow-mixed", "true", "--max_length", "64"]
    s = cli.read(TrainSettings, argv, "data")
    assert (s.model, s.out, s.lora.r, s.allow_mixed, s.max_length) == ("m", Path("o"), 4, True, 64)


def test_a_bare_value_names_a_nested_model_and_dict_keys_nest() -> None:
    argv = ["a.jsonl", "llm=openai", "llm.model=M", "llm.extra.top_p=0.95", "out=o.jsonl"]
    s = cli.read(SynthSettings, argv, "data")
    assert (s.llm.model, s.llm.extra) == ("M", {"top_p": 0.95})
    with pytest.raises(ConfigError, match=r"llm\.name: Input should be 'openai' \(got 'reference'\)"):
        cli.read(SynthSettings, ["a.jsonl", "llm=reference", "out=o.jsonl"], "data")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["model=m", "out=o"], "no data given (name them as paths)"),
        (["a.jsonl", "out=o"], "model is required"),
        (["a.json", "model=m", "out=o"], "data: must name a .jsonl file, got a.json"),
        (["a.jsonl", "model=m", "out=o", "model=n"], "model is given twice"),
        (["a.jsonl", "model=m", "out=o", "lr.x=1"], "lr has no sub-keys (got lr.x)"),
        (["a.jsonl", "model=m", "out=o", "epoch=2"], "unknown setting epoch; did you mean epochs?"),
    ],
)
def test_usage_errors_are_one_line(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        cli.read(TrainSettings, argv, "data")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_synth_takes_one_file() -> None:
    with pytest.raises(ConfigError, match="data: List should have at most 1 item"):
        cli.read(SynthSettings, ["a.jsonl", "b.jsonl", "llm.model=M", "out=o.jsonl"], "data")


@pytest.mark.parametrize("model", [TrainSettings, SynthSettings])
def test_every_setting_is_described(model: type[BaseModel]) -> None:
    def fields(m: type[BaseModel]) -> list[tuple[str, str | None]]:
        found = []
        for name, field in m.model_fields.items():
            sub = field.annotation
            if isinstance(sub, type) and issubclass(sub, BaseModel):
                found += [(f"{name}.{k}", d) for k, d in fields(sub) if k != "name"]
            else:
                found.append((name, field.description))
        return found

    missing = [name for name, description in fields(model) if not description]
    assert not missing
    text = cli.usage(model, "x", "data", "DATA.jsonl")
    assert all(f"  {name} " in text for name, _ in fields(model) if name != "data")
