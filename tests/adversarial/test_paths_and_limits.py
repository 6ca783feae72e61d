"""Settings a careless user types: outputs where nothing can be written, time limits of 0, -1, inf or nan,
absurd bench sizes, bytes that are not text. Each is a configuration error: exit 2 and one line that names
the setting, before anything runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agent.bench.__main__ import main as bench
from agent.export_sft import main as export_sft
from agent.loop.store import RunFolder
from agent.report import main as report
from agent.solve import main as solve
from tests.adversarial.helpers import fill_ok
from tools.compile import main as compile_main
from tools.evaluate import main as evaluate_main


def first_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return next(line for line in err.splitlines() if line.startswith("error:"))


def solve_args(runs_dir: Path, tmp_path: Path, *extra: str) -> list[str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([fill_ok()] * 3))
    return ["task=gemm", "arch=sm_90a", "llm=scripted", f"llm.path={script}", "eval.gpu=false",
            f"runs_dir={runs_dir}", *extra]  # fmt: skip


@pytest.mark.parametrize("where", ["a_file", "under_a_file", "/proc/ptxbench-runs"])
def test_runs_dir_that_cannot_hold_runs(where: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "a_file").write_text("not a folder")
    runs_dir = Path(where) if where.startswith("/") else tmp_path / where.replace("under_a_file", "a_file/runs")
    assert solve(solve_args(runs_dir, tmp_path)) == 2
    assert first_error(capsys).startswith(f"error: runs_dir: cannot create {runs_dir}")
    assert (
        bench(["tasks=gemm_n7168_k5120", "archs=sm_90a", "llm=reference", "modes=single", f"runs_dir={runs_dir}"]) == 2
    )
    assert first_error(capsys).startswith("error: runs_dir: cannot write ")


def test_report_and_export_outputs_that_cannot_be_written(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runs_dir = tmp_path / "runs"
    assert solve(solve_args(runs_dir, tmp_path, "max_turns=1")) == 0
    (tmp_path / "a_file").write_text("x")
    capsys.readouterr()
    assert report([str(runs_dir), f"out={tmp_path / 'a_file'}"]) == 2
    assert first_error(capsys).startswith(f"error: out: cannot write {tmp_path / 'a_file'}")
    (tmp_path / "dir.jsonl").mkdir()
    assert export_sft([str(runs_dir), "format=fixit", f"out={tmp_path / 'dir.jsonl'}"]) == 2
    assert first_error(capsys).startswith(f"error: out: cannot write {tmp_path / 'dir.jsonl'}")


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan"])
def test_time_limits_must_be_finite_and_positive(
    value: str, runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    answer = tmp_path / "answer.md"
    answer.write_text(fill_ok())
    assert compile_main([str(answer), "--arch", "sm_90a", "--timeout", value]) == 2
    assert first_error(capsys).startswith("error: --timeout: Input should be")
    for flag in ("--timeout-s", "--static-timeout-s"):
        assert evaluate_main([str(answer), "--task", "gemm", "--arch", "sm_90a", flag, value]) == 2
        assert first_error(capsys).startswith("error: invalid options")
    for key in ("eval.timeout_s", "eval.static_timeout_s", "max_wall_s", "target_speedup"):
        assert solve(solve_args(runs_dir, tmp_path, f"{key}={value}")) == 2
        assert first_error(capsys).startswith(f"error: invalid settings: {key}: Input should be")
    assert not runs_dir.exists()


def test_time_limits_can_be_changed_on_resume(runs_dir: Path, tmp_path: Path) -> None:
    assert solve(solve_args(runs_dir, tmp_path, "max_turns=1", "run_id=limits")) == 0
    args = ["resume=limits", f"runs_dir={runs_dir}", "max_turns=2", "eval.static_timeout_s=30", "eval.timeout_s=50"]
    assert solve(args) == 0
    config = RunFolder(runs_dir / "limits").config()
    assert (config.eval["static_timeout_s"], config.eval["timeout_s"]) == (30.0, 50.0)
    assert config.model_extra["resumed"][-1]["changed"] == {
        "max_turns": "2", "eval.static_timeout_s": "30", "eval.timeout_s": "50"
    }  # fmt: skip


def test_an_absurd_bench_is_refused_up_front(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    start = time.perf_counter()
    args = ["tasks=gemm_n7168_k5120", "archs=sm_90a", "llm=reference", "samples=100000000", f"runs_dir={tmp_path}"]
    assert bench(args) == 2
    assert time.perf_counter() - start < 2
    assert "the bench would plan 200,000,000 runs" in first_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_compile_exits_1_for_an_abi_mismatch_as_for_a_spec_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    mismatch, bad_spec = tmp_path / "mismatch.md", tmp_path / "bad_spec.md"
    mismatch.write_text(fill_ok().replace('"block": [256, 1, 1]', '"block": [128, 1, 1]'))
    bad_spec.write_text(fill_ok().replace('"block": [256, 1, 1]', '"block": [0, 1, 1]'))
    assert compile_main([str(mismatch), "--arch", "sm_90a", "--task", "gemm"]) == 1
    assert "ABI: MISMATCH" in capsys.readouterr().out
    assert compile_main([str(bad_spec), "--arch", "sm_90a", "--task", "gemm"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad_spec}: the launch spec cannot run") and "block[0]: evaluates to 0" in err


def test_arguments_that_are_not_text(runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # Bytes that are not UTF-8 reach sys.argv as lone surrogates, which no config.json can hold.
    assert solve(solve_args(runs_dir, tmp_path, "run_id=x\udcff")) == 2
    assert first_error(capsys) == "error: 'run_id=x\\\\udcff' is not UTF-8 text"


DEEP = '{"a": ' * 5000 + "1" + "}" * 5000
OPENAI_SETTINGS = {  # llm=openai's settings that must be refused before the endpoint is asked anything
    "temperature_inf": (["llm.temperature=1e999"], "llm.temperature: Input should be a finite number"),
    "extra_deep": ([f"llm.extra={DEEP}"], "llm.extra: nested deeper than 32 levels"),
    "extra_value_deep": ([f"llm.extra.a={DEEP}"], "llm.extra: nested deeper than 32 levels"),
    "extra_inf": (['llm.extra={"top_p": 1e999}'], "llm.extra: the number 1e999 is out of range"),
    "toml_deep": ([], "ptxbench.toml: not a TOML file we can read (nested too deep)"),
}


@pytest.mark.parametrize("case", OPENAI_SETTINGS)
def test_openai_settings_that_could_not_work_are_refused_at_start(
    case: str, runs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    words, message = OPENAI_SETTINGS[case]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PTXBENCH_LIMITS_KEY", "EMPTY")
    if case == "toml_deep":
        (tmp_path / "ptxbench.toml").write_text("[llm]\nextra = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n")
    args = ["task=gemm", "arch=sm_90a", "llm.model=m", "llm.base_url=http://127.0.0.1:9/v1",
            "llm.api_key_env=PTXBENCH_LIMITS_KEY", f"runs_dir={runs_dir}", *words]  # fmt: skip
    assert solve(args) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and message in line and len(line) < 400
    assert not runs_dir.exists()


@pytest.mark.parametrize(
    ("path", "message"),
    [("/dev/zero", "/dev/zero is a character device, not a file"), ("FOLDER", "{folder} is a folder, not a file"),
     ("/proc/self/environ", "/proc/self/environ holds NUL bytes: it is not source text")],
)  # fmt: skip
def test_a_path_that_is_not_a_source_file_is_said_to_be_what_it_is(
    path: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = path.replace("FOLDER", str(tmp_path))
    assert compile_main([path, "--arch", "sm_90a"]) in (1, 2)
    assert first_error(capsys) == "error: " + message.format(folder=tmp_path)


def test_an_id_that_is_a_path_is_said_to_be_one(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert (
        bench(["tasks=gemm_n7168_k5120", "archs=sm_90a", "llm=reference", "bench_id=../x", f"runs_dir={tmp_path}"]) == 2
    )
    assert "invalid bench_id '../x' is a path, not a folder name" in first_error(capsys)
    assert bench(["resume=../x", f"runs_dir={tmp_path}"]) == 2
    assert "invalid bench id in resume= '../x' is a path" in first_error(capsys)


DEEP_LIST = "[" * 5000 + "]" * 5000
DATA_LINES = {
    "deep_line": ('{"messages": ' + DEEP_LIST + "}", "data.jsonl:2: not an example we read (nested deeper"),
    "huge_number": ('{"messages": [], "metadata": {"tokens": ' + "9" * 5000 + "}}",
                    "data.jsonl:2: not an example we read (an integer of 5,000 digits"),
    "deep_card": (None, "data.card.json: not a data card we read (nested deeper than 32 levels"),
}  # fmt: skip


@pytest.mark.parametrize("case", DATA_LINES)
def test_train_sft_refuses_data_that_would_crash_its_reader(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    pytest.importorskip("trl")  # agent.train_sft needs the train extra
    from agent.train_sft import main as train_sft

    line, message = DATA_LINES[case]
    data = tmp_path / "data.jsonl"
    good = '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}'
    data.write_text(good + "\n" + (line or good) + "\n")
    if line is None:
        data.with_suffix(".card.json").write_text('{"files": ' + DEEP_LIST + "}")
    args = [str(data), "model=x", f"out={tmp_path / 'out'}", f"require_card={line is None}".lower()]
    assert train_sft(args) == 2
    error = first_error(capsys)
    assert error.startswith(f"error: {tmp_path}/") and message in error
    (tmp_path / "folder.jsonl").mkdir()
    assert train_sft([str(tmp_path / "folder.jsonl"), "model=x", f"out={tmp_path / 'out'}"]) == 2
    assert first_error(capsys) == f"error: {tmp_path / 'folder.jsonl'}: a folder, not a file"
