"""Settings that are finite and positive but absurd: a time limit of 1e10 s (the OS takes waits in 32-bit
milliseconds, and overflowed past ~2.1e6 s), a billion trials, retries or turns. Each is bad usage: exit 2 and
one line naming the setting and its bound, before anything runs, from every command that takes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.solve import main as solve
from tests.adversarial.helpers import fill_ok
from tools.compile import main as compile_main
from tools.evaluate import main as evaluate_main
from tools.options import MAX_WAIT_S


def first_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return next(line for line in err.splitlines() if line.startswith("error:"))


@pytest.mark.parametrize("value", ["3e6", "1e10", "1e300"])
def test_time_limits_have_an_upper_bound(value: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    answer = tmp_path / "answer.md"
    answer.write_text(fill_ok())
    bound = f"less than or equal to {MAX_WAIT_S:g}"
    assert compile_main([str(answer), "--arch", "sm_90a", "--timeout", value]) == 2
    assert bound in first_error(capsys)
    for flag in ("--timeout-s", "--static-timeout-s"):
        assert evaluate_main([str(answer), "--task", "gemm", "--arch", "sm_90a", flag, value]) == 2
        line = first_error(capsys)
        assert flag in line and bound in line, line
    runs_dir = tmp_path / "runs"
    script = tmp_path / "script.json"
    script.write_text(json.dumps([fill_ok()]))
    base = ["task=gemm", "arch=sm_90a", "eval.gpu=false", f"runs_dir={runs_dir}"]
    scripted = [*base, "llm=scripted", f"llm.path={script}"]
    openai = [*base, "llm.model=m", "llm.base_url=http://127.0.0.1:9/v1"]
    for args, key in ((scripted, "eval.static_timeout_s"), (scripted, "eval.timeout_s"), (scripted, "max_wall_s"),
                      (openai, "llm.timeout_s"), (openai, "llm.backoff_s")):  # fmt: skip
        assert solve([*args, f"{key}={value}"]) == 2
        line = first_error(capsys)
        assert line.startswith(f"error: invalid settings: {key}: ") and bound in line, line
    assert not runs_dir.exists()


@pytest.mark.parametrize(
    ("key", "value"),
    [("eval.trials", "1000000000"), ("eval.timing_blocks", "1000000000"), ("eval.seed", "9" * 4000),
     ("max_turns", "1000000000"), ("unverified_turns", "1000000000"), ("llm.retries", "1000000000")],
)  # fmt: skip
def test_counts_have_an_upper_bound(key: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runs_dir = tmp_path / "runs"
    args = ["task=gemm", "arch=sm_90a", "eval.gpu=false", f"runs_dir={runs_dir}", f"{key}={value}"]
    if not key.startswith("llm."):
        script = tmp_path / "script.json"
        script.write_text(json.dumps([fill_ok()]))
        args += ["llm=scripted", f"llm.path={script}"]
    else:
        args += ["llm.model=m", "llm.base_url=http://127.0.0.1:9/v1"]
    assert solve(args) == 2
    line = first_error(capsys)
    assert line.startswith(f"error: invalid settings: {key}: Input should be less than or equal to"), line
    assert not runs_dir.exists()
