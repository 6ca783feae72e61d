"""`python -m agent.solve` as users run it: settings errors, the README's offline command in a real
subprocess, and a run killed with SIGKILL mid-turn, then resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.loop.command_line import endpoint_settings
from agent.loop.store import RunFolder
from agent.solve import main
from tasks.solutions import reference_answer
from tests.agent.helpers import fixture_text, write_script

REPO = Path(__file__).resolve().parents[3]


def cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "agent.solve", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["task=gemm"], "arch required, e.g. task=gemm arch=sm_90a"),
        (["task=gemm", "arch=sm_90a", "max_turn=3"], "unknown setting max_turn; did you mean max_turns?"),
        (["task=gemm", "arch=sm_80"], "unknown arch 'sm_80'"),
        (["task=gemmm", "arch=sm_90a"], "unknown task 'gemmm'"),
        (["task=gemm", "arch=sm_90a", "max_turns=0"], "max_turns: Input should be greater than or equal to 1"),
        (["task=gemm", "arch=sm_90a", "history=some"], "history: Input should be 'full', 'last' or 'digest'"),
        (["task=gemm", "arch=sm_90a", "llm=claude"], "unknown policy llm='claude'; known: openai, reference"),
        (["task=gemm", "arch=sm_90a", "llm=reference", "llm.model=x"], "llm=reference has no setting llm.model"),
        (["task=gemm", "arch=sm_90a", "llm=openai"], "llm=openai needs a model: name it on the command line"),
        (["task=gemm", "arch=sm_90a", "llm=scripted", "llm.path=/nonexistent.json"], "cannot read /nonexistent.json"),
        (["task=gemm", "arch=sm_90a", "run_id=../escape"], "invalid run id '../escape'"),
        (["resume=nosuchrun"], "is not a run folder"),
        (["resume=x", "task=gemm"], "a resumed run cannot change task"),
        (["task", "arch=sm_90a"], "expected key=value, got 'task'"),
    ],
)
def test_usage_and_configuration_errors(
    args: list[str], message: str, runs_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main([*args, f"runs_dir={runs_dir}"]) == 2
    assert message in capsys.readouterr().err
    assert not runs_dir.exists() or not any(runs_dir.iterdir())  # no half-made run folder


def test_a_task_without_a_reference_solution_is_a_configuration_error(
    runs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import tasks.solutions

    monkeypatch.setattr(tasks.solutions, "ROOT", tmp_path)  # a checkout whose solutions are all missing
    assert main(["task=mha_with_lse_d96_s4096", "arch=sm_90a", "llm=reference", f"runs_dir={runs_dir}"]) == 2
    err = capsys.readouterr().err
    assert "no reference solution for mha_with_lse_d96_s4096 on sm_90a" in err and "none yet" in err
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_help_lists_the_settings(capsys: pytest.CaptureFixture) -> None:
    assert main(["help"]) == 0
    text = capsys.readouterr().out
    for key in ("max_turns", "history", "target_speedup", "max_tokens_total", "max_wall_s", "llm.base_url",
                "llm.api_key_env", "llm.path", "llm.run", "eval.trials", "resume=RUN_ID"):  # fmt: skip
        assert key in text


@pytest.mark.skipif(reference_answer("gemm_n7168_k5120", "sm_90a") is None, reason="no gemm reference solution yet")
def test_readme_command_runs_offline(runs_dir: Path) -> None:
    proc = cli("task=gemm", "arch=sm_90a", "llm=reference", f"runs_dir={runs_dir}", "eval.gpu=false")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "llm: reference (" in err and "turn 1/8  compile" in err
    # why the GPU stages are skipped is said once, where the run starts, not again on the turn's line
    assert err.count("turned off (eval.gpu=false)") == 1 and "; GPU stages skipped\n" in err
    folder = RunFolder.open(None, out.strip().rsplit("run folder: ", 1)[1])
    assert folder.summary().statuses == ["unverified"]
    assert folder.summary().stop_reason == "unverified"  # the reference's one answer too, but no GPU judged it


def test_killed_mid_turn_then_resumed(tmp_path: Path, runs_dir: Path) -> None:
    """SIGKILL while turn 3 waits for its answer: turns 1–2 survive, and the resumed run finishes with
    every turn exactly once, turns 1–2 untouched and not asked again."""
    ok, typo = fixture_text("fill_ok.md"), fixture_text("fill_typo.md")
    answers = [typo, ok, {"text": typo, "delay_s": 2.0}, ok]
    script = write_script(tmp_path / "script.json", answers)
    args = ["task=gemm", "arch=sm_90a", "llm=scripted", f"llm.path={script}", f"runs_dir={runs_dir}",
            "run_id=killed", "max_turns=4", "unverified_turns=2", "eval.gpu=false"]  # fmt: skip
    proc = cli(*args)
    events = runs_dir / "killed" / "events.log"
    deadline = time.monotonic() + 60
    while not _has_event(events, "turn.start", turn=3):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "turn 3 never started"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    folder = RunFolder.open(runs_dir, "killed")
    before = (folder.path / "trajectory.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in before] == [1, 2]
    assert folder.summary().stop_reason is None  # written after turn 2; the run never ended

    proc = cli("resume=killed", f"runs_dir={runs_dir}")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "resuming killed" in err
    after = (folder.path / "trajectory.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in after] == [1, 2, 3, 4]
    assert after[:2] == before
    assert [json.loads(line)["evaluation"]["status"] for line in after] == [
        "compile_error", "unverified", "compile_error", "unverified"
    ]  # fmt: skip
    starts = [e["turn"] for e in _events(events) if e["event"] == "turn.start"]
    assert starts == [1, 2, 3, 3, 4]  # only the turn in flight was asked again
    assert folder.summary().stop_reason == "max_turns"
    assert "run folder: " in out


def _events(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _has_event(path: Path, name: str, **fields: object) -> bool:
    return any(e["event"] == name and all(e.get(k) == v for k, v in fields.items()) for e in _events(path))


# ------------------------------------------------------------------------------- the endpoint as users set it


def typed(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """`python -m agent.solve task=attn_bwd arch=sm_100 ARGS` in `cwd`, with only `env` naming an endpoint."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PTXBENCH_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY")}
    return subprocess.run([sys.executable, "-m", "agent.solve", "task=attn_bwd", "arch=sm_100", *args], cwd=cwd,
                          env={**clean, "PYTHONPATH": str(REPO), **env}, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


@pytest.fixture
def endpoint():
    from tests.agent.openai_server import Behaviour, OpenAIServer

    with OpenAIServer() as server:
        server.default = Behaviour(content="no kernel yet")
        yield server


def test_the_command_as_typed_runs_on_an_endpoint_from_the_environment(tmp_path: Path, endpoint) -> None:
    env = {"PTXBENCH_MODEL": "served-model", "OPENAI_BASE_URL": endpoint.base_url, "OPENAI_API_KEY": "sk-test-9f2c1"}
    done = typed(tmp_path, env, "max_turns=1")
    assert done.returncode == 0, done.stderr
    [request] = endpoint.requests
    assert request["body"]["model"] == "served-model" and request["headers"]["authorization"] == "Bearer sk-test-9f2c1"
    [folder] = (tmp_path / "runs").iterdir()
    config = json.loads((folder / "config.json").read_text())
    assert (config["task"], config["arch"]) == ("mha_bwd_d128", "sm_100a")
    assert (config["llm"]["model"], config["llm"]["base_url"]) == ("served-model", endpoint.base_url)
    assert not [p for p in folder.rglob("*") if p.is_file() and b"sk-test-9f2c1" in p.read_bytes()]


def test_or_from_a_config_file_in_the_working_folder(tmp_path: Path, endpoint) -> None:
    (tmp_path / "ptxbench.toml").write_text(f'[llm]\nmodel = "file-model"\nbase_url = "{endpoint.base_url}"\n'
                                            "temperature = 0.6\nextra = {top_p = 0.95}\n")  # fmt: skip
    done = typed(tmp_path, {"OPENAI_API_KEY": "EMPTY"}, "max_turns=1")
    assert done.returncode == 0, done.stderr
    body = endpoint.requests[0]["body"]
    assert (body["model"], body["temperature"], body["top_p"]) == ("file-model", 0.6, 0.95)


def test_the_command_line_wins_then_the_environment_then_the_file(tmp_path: Path) -> None:
    (tmp_path / "ptxbench.toml").write_text('[llm]\nmodel = "file-model"\nbase_url = "http://file:1/v1"\n')
    env = {"PTXBENCH_MODEL": "env-model"}
    assert endpoint_settings({}, env, tmp_path) == {"llm.model": "env-model", "llm.base_url": "http://file:1/v1"}
    typed_model = endpoint_settings({"llm.model": "typed-model"}, env, tmp_path)
    assert typed_model["llm.model"] == "typed-model"
    assert endpoint_settings({"llm": "reference"}, env, tmp_path) == {"llm": "reference"}  # offline: untouched


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            '[llm]\nmodel = "m"\napi_key = "sk-in-a-file"\n',
            "ptxbench.toml: llm.api_key is refused: the API key is read "
            "only from the environment ($OPENAI_API_KEY, or the variable llm.api_key_env names), never from a file",
        ),
        ('[llm]\nmodle = "m"\n', "ptxbench.toml: unknown setting llm.modle (known: base_url, model,"),
        (
            "[llm\nmodel = 1\n",
            "ptxbench.toml: not a TOML file we can read (Expected ']' at the end of a table "
            "declaration (at line 1, column 5))",
        ),
        ('model = "m"\n', "ptxbench.toml: only an [llm] table is read here (found model)"),
    ],
)
def test_a_config_file_that_cannot_be_used_is_one_line(
    tmp_path: Path, toml: str, message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "ptxbench.toml").write_text(toml)
    monkeypatch.chdir(tmp_path)
    assert main(["task=attn_bwd", "arch=sm_100", "runs_dir=runs"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert "sk-in-a-file" not in err and not (tmp_path / "runs").exists()


def test_with_nothing_configured_it_says_how(tmp_path: Path) -> None:
    done = typed(tmp_path, {})
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and not (tmp_path / "runs").exists()
    for way in (
        "llm.model=NAME llm.base_url=URL",
        "$PTXBENCH_MODEL, $OPENAI_BASE_URL",
        "$OPENAI_API_KEY",
        "./ptxbench.toml",
        "llm=reference",
        "llm=scripted llm.path=tests/fixtures/agent/three_turns.json",
    ):
        assert way in done.stderr, way  # fmt: skip
