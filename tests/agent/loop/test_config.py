"""key=value settings: parsing, nesting, validation and the messages users see."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli import ConfigError, parse_pairs
from agent.loop.config import OpenAIConfig, ScriptedConfig, build_config, merge, nest
from tasks.schema import Arch
from tools.options import Profile


def settings(*words: str):
    return build_config(nest(parse_pairs(list(words))))


def test_defaults_and_aliases() -> None:
    s = settings("task=attn_bwd", "arch=b200")
    assert s.arch is Arch.SM_100A
    assert (s.max_turns, s.history, s.target_speedup) == (8, "full", 1.0)
    assert (s.max_tokens_total, s.max_wall_s, s.runs_dir) == (None, None, Path("runs"))
    assert isinstance(s.llm, OpenAIConfig) and s.llm.api_key_env == "OPENAI_API_KEY"


def test_policy_settings() -> None:
    s = settings(
        "task=gemm", "arch=sm_90", "llm=openai", "llm.model=qwen", "llm.base_url=http://localhost:8000/v1",
        "llm.temperature=0.6", "llm.max_tokens=4096", "llm.extra.top_p=0.95", "llm.extra.stop=[\"END\"]",
        "max_turns=4", "history=last", "target_speedup=1.2", "max_tokens_total=500000", "max_wall_s=3600",
        "eval.trials=1", "eval.profile=false",
    )  # fmt: skip
    assert s.llm.model == "qwen" and s.llm.temperature == 0.6 and s.llm.max_tokens == 4096
    assert s.llm.extra == {"top_p": 0.95, "stop": ["END"]}
    assert (s.max_turns, s.history, s.target_speedup, s.max_tokens_total, s.max_wall_s) == (
        4,
        "last",
        1.2,
        500000,
        3600,
    )
    assert s.eval.trials == 1 and s.eval.profile is Profile.OFF  # false: what it meant before modes
    assert settings("task=gemm", "arch=sm_90a", "eval.profile=perf").eval.profile is Profile.PERF
    options = settings("task=gemm", "arch=sm_90a", "target_speedup=1.3").eval.options(1.3)
    assert (options.profile, options.perf_below) == (Profile.AUTO, 1.3)  # auto's bar: the run's target
    whole = settings("task=gemm", "arch=sm_90a", 'llm.extra={"chat_template_kwargs": {"enable_thinking": true}}')
    assert whole.llm.extra == {"chat_template_kwargs": {"enable_thinking": True}}


def test_offline_policies() -> None:
    s = settings("task=gemm", "arch=sm_90a", "llm=scripted", "llm.path=answers.json")
    assert isinstance(s.llm, ScriptedConfig) and s.llm.path == Path("answers.json").resolve()  # recorded absolute
    assert settings("task=gemm", "arch=sm_90a", "llm=replay", "llm.run=runs/x").llm.run == "runs/x"


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["task=gemm", "task=gemm"], "task is given twice"),
        (["task=gemm", "arch=sm_90a", "llm.extra=[1]"], "llm.extra must be a JSON object"),
        (["task=gemm", "arch=sm_90a", "llm=scripted"], "llm.path: required field is missing"),
        (["task=gemm", "arch=sm_90a", "eval.trails=2"], "unknown setting eval.trails; did you mean eval.trials?"),
        (["task=gemm", "arch=sm_90a", "eval=1"], "eval takes sub-keys"),
        (["task=gemm", "arch=sm_90a", "max_turns.x=1"], "max_turns has no sub-keys"),
        (["task=gemm", "arch=sm_90a", "max_wall_s=-1"], "max_wall_s: Input should be greater than 0"),
        (["task=gemm", "arch=sm_90a", "target_speedup=fast"], "target_speedup: Input should be a valid number"),
    ],
)
def test_errors_say_what_is_wrong(words: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("[", r"\[")):
        settings(*words)


def test_merge_lays_overrides_over_saved_settings() -> None:
    saved = {"task": "gemm", "llm": {"name": "openai", "model": "m", "retries": 6}, "max_turns": 8}
    merged = merge(saved, nest(parse_pairs(["llm.retries=1", "max_turns=12"])))
    assert merged == {"task": "gemm", "llm": {"name": "openai", "model": "m", "retries": "1"}, "max_turns": "12"}
