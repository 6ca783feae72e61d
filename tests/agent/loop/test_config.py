"""key=value settings: parsing, nesting, validation and the messages users see."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import cli
from agent.cli import ConfigError, parse_pairs
from agent.loop.command_line import usage
from agent.loop.config import (
    ENDPOINT_KEYS,
    POLICIES,
    POLICY_NAMES,
    RESUMABLE,
    OpenAIConfig,
    ScriptedConfig,
    SolveConfig,
)
from tasks.schema import Arch
from tools.options import Profile


def settings(*words: str):
    return cli.read(SolveConfig, list(words))


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
        (["task=gemm", "arch=sm_90a", "llm=scripted"], "llm.path is required"),
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
    merged = cli.tree(SolveConfig, parse_pairs(["llm.retries=1", "max_turns=12"]), base=saved)
    assert merged == {"task": "gemm", "llm": {"name": "openai", "model": "m", "retries": "1"}, "max_turns": "12"}


def test_a_bare_value_picks_the_unions_model_and_its_keys_follow() -> None:
    assert cli.tree(SolveConfig, {"llm.model": "m"}) == {"llm": {"name": "openai", "model": "m"}}  # the default
    saved = {"task": "gemm", "llm": {"name": "scripted", "path": "/a.json"}}
    assert cli.tree(SolveConfig, {"llm.label": "x"}, base=saved)["llm"] == {"name": "scripted", "path": "/a.json",
                                                                            "label": "x"}  # fmt: skip
    assert cli.tree(SolveConfig, {"llm": "reference"}, base=saved)["llm"] == {"name": "reference"}  # another kind
    with pytest.raises(ConfigError, match=r"llm=scripted has no setting llm\.lable; did you mean label\?"):
        cli.tree(SolveConfig, {"llm.lable": "x"}, base=saved)


def test_a_policy_is_one_entry_of_the_registry() -> None:
    """What llm= accepts, its help, and what a resumed run may change of it all come from POLICIES."""
    names = tuple(p.model_fields["name"].default for p in POLICIES)
    assert POLICY_NAMES == names == ("openai", "reference", "scripted", "replay")
    assert cli.variants(SolveConfig, "llm") == dict(zip(names, POLICIES, strict=True))
    text = usage()
    assert f"[llm={'|'.join(names)}]" in text
    for policy in POLICIES:
        name = policy.model_fields["name"].default
        assert f"  llm={name}: {policy.__doc__.splitlines()[0]}" in text
        words = ["task=gemm", "arch=sm_90a", f"llm={name}", *REQUIRED.get(name, [])]
        assert isinstance(cli.read(SolveConfig, words).llm, policy)
    assert {k for k in RESUMABLE if k.startswith("llm.")} == {f"llm.{k}" for p in POLICIES for k in p.resumable}
    assert set(ENDPOINT_KEYS) == {f"llm.{k}" for p in POLICIES for k in p.resumable} | {"eval.pool"}
    resumable = next(line for line in text.splitlines() if line.startswith("A resumed run"))
    assert all(key in resumable for key in RESUMABLE)


REQUIRED = {"scripted": ["llm.path=a.json"], "replay": ["llm.run=r"]}
