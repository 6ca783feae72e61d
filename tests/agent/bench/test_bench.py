"""`python -m agent.bench`: planning and settings, the progress bar, and whole benches with scripted
answers and the real ptxas (eval.gpu=false), in process and as a subprocess killed mid-run and continued."""

from __future__ import annotations

import fcntl
import inspect
import io
import json
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import time
from collections import Counter
from pathlib import Path

import pytest

import agent.bench.progress
import agent.bench.run
import agent.loop.run
from agent import cli
from agent.bench.__main__ import main
from agent.bench.plan import load, plan, resolve_archs, resolve_tasks, run_settings, save
from agent.bench.progress import Progress
from agent.bench.run import UNVERIFIED_NOTE, Configured, check_runs, configure, run_bench
from agent.cli import ConfigError
from agent.loop.config import SolveConfig
from agent.loop.store import RunFolder
from tasks.catalog import CORE, GROUPS, TASKS
from tasks.schema import Arch
from tests.agent.helpers import fixture_text, write_script
from tools.options import Profile
from tools.pool.base import Load

REPO = Path(__file__).resolve().parents[3]
GEMM = "gemm_n7168_k5120"

# ------------------------------------------------------------------------------------------ planning


def test_tasks_and_archs_resolve_names_aliases_and_groups() -> None:
    assert resolve_tasks("core") == CORE
    assert resolve_tasks("gemm_n7168_k5120_m8192, attn_fwd,core") == CORE  # aliases resolved, duplicates dropped
    assert resolve_tasks("all") == list(TASKS)
    # A group wins over the core GEMM's alias of the same name; names of several groups, in order.
    assert resolve_tasks("gemm") == GROUPS["gemm"] and len(GROUPS["gemm"]) == 82
    assert resolve_tasks("fp8,mha_bwd_d96_s16384") == [*GROUPS["fp8"], "mha_bwd_d96_s16384"]
    assert resolve_archs("h100,sm_90a,b200") == ["sm_90a", "sm_100a"]
    assert resolve_archs("all") == ["sm_90a", "sm_100a"]
    with pytest.raises(ConfigError, match=r"^unknown task or group 'gemmm'; closest: gemm$"):
        resolve_tasks("gemmm")
    with pytest.raises(ConfigError, match="unknown arch 'sm_80'"):
        resolve_archs("sm_80")


def test_plan_is_deterministic() -> None:
    bench = plan("b", [GEMM, "mha_with_lse_d128"], ["sm_90a"], 2, 4, ["single", "multi"], {"llm": "reference"})
    again = plan("b", [GEMM, "mha_with_lse_d128"], ["sm_90a"], 2, 4, ["single", "multi"], {"llm": "reference"})
    assert bench.runs == again.runs
    assert [r.run_id for r in bench.runs[:4]] == [
        f"{GEMM}-sm_90a-single-s00",
        f"{GEMM}-sm_90a-single-s01",
        f"{GEMM}-sm_90a-multi-s00",
        f"{GEMM}-sm_90a-multi-s01",
    ]
    assert [r.max_turns for r in bench.runs[:4]] == [1, 1, 4, 4]
    assert len(bench.runs) == 8
    s = Configured(bench, Path("/b"), 1, run_settings(bench)).settings_of(bench.runs[2])  # as prepare gets it
    assert (s.llm.name, s.task, s.arch, s.max_turns, s.run_id, s.runs_dir) == (
        "reference", GEMM, Arch.SM_90A, 4, f"{GEMM}-sm_90a-multi-s00", Path("/b")
    )  # fmt: skip


def test_a_benchs_single_shot_samples_count_only_unless_asked() -> None:
    bench = plan("b", [GEMM], ["sm_90a"], 1, 2, ["single", "multi"], {"llm": "reference"})
    settings = run_settings(bench)
    single, multi = settings[GEMM, "sm_90a", "single", None], settings[GEMM, "sm_90a", "multi", None]
    assert (single.eval.profile, multi.eval.profile) == (Profile.COUNTS, Profile.AUTO)
    assert (single.max_turns, multi.max_turns) == (1, 2)
    asked = plan("b", [GEMM], ["sm_90a"], 1, 2, ["single"], {"llm": "reference", "eval.profile": "perf"})
    assert run_settings(asked)[GEMM, "sm_90a", "single", None].eval.profile is Profile.PERF


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["archs=h100"], "tasks= required"),
        (["tasks=gemm_n7168_k5120", "archs=h100", "task=gemm"], "task cannot be set for a bench: use tasks="),
        (["tasks=gemm_n7168_k5120", "archs=h100", "eval.device=1"], "eval.device cannot be set for a bench"),
        (["tasks=gemm_n7168_k5120", "archs=h100", "max_turns=1"], "mode multi needs max_turns ≥ 2"),
        (["tasks=gemm_n7168_k5120", "archs=h100", "modes=double"], "unknown mode double"),
        (["tasks=gemm_n7168_k5120", "archs=h100", "samples=0"], "samples must be a whole number ≥ 1 (got '0')"),
        (["tasks=gemm_n7168_k5120", "archs=h100", "concurrency=many"], "concurrency must be a whole number"),
        (
            ["tasks=gemm_n7168_k5120", "archs=h100", "llm=openai"],
            "llm=openai needs a model: name it on the command line",
        ),
        (["tasks=gemm_n7168_k5120", "archs=h100", "max_turn=3"], "unknown setting max_turn; did you mean max_turns?"),
        (["tasks=gemmm", "archs=h100"], "unknown task or group 'gemmm'; closest: gemm\n"),
        (
            ["tasks=gemm_n7168_k5120", "archs=h100", "bench_id=../up"],
            "invalid bench_id '../up' is a path, not a folder name",
        ),
        (["resume=nosuch"], "is not a bench folder (no bench.json)"),
        (["resume=b", "samples=3"], "a resumed bench cannot change samples"),
    ],
)
def test_configuration_errors(args: list[str], message: str, runs_dir: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([*args, f"runs_dir={runs_dir}"]) == 2
    assert message in capsys.readouterr().err
    assert not runs_dir.exists()  # nothing written


def test_a_missing_reference_solution_fails_before_any_run(
    runs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import tasks.solutions

    monkeypatch.setattr(tasks.solutions, "ROOT", tmp_path)
    assert main(["tasks=gemm_n7168_k5120", "archs=h100", "llm=reference", f"runs_dir={runs_dir}"]) == 2
    assert f"no reference solution for {GEMM} on sm_90a" in capsys.readouterr().err
    assert not runs_dir.exists()


# ------------------------------------------------------------------------------------------ progress


def test_progress_lines_off_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress("b1", 4, Counter({"solved": 1}), stream=stream)
    progress.start()
    progress.finish("error", tokens=1500)
    progress.start()
    progress.draw()  # the clock alone: no line off a terminal
    assert stream.getvalue().splitlines() == [
        "b1 [############------------] 2/4  solved 1 · error 1 | 0 running, 2 queued | 1,500 tokens | 0:00, ETA 0:00"
    ]
    progress.finish("unverified", tokens=500)
    assert (
        stream.getvalue()
        .splitlines()[-1]
        .startswith(
            "b1 [##################------] 3/4  solved 1 · unverified 1 · error 1 | 0 running, 1 queued | 2,000 tokens"
        )
    )


def test_the_eta_is_the_rate_of_this_invocations_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([100.0, 160.0, 160.0])  # started; then 60 s later, one run done of the 3 left
    monkeypatch.setattr(agent.bench.progress.time, "monotonic", lambda: next(clock))
    stream = io.StringIO()
    progress = Progress("b1", 4, Counter({"solved": 1}), stream=stream)
    progress.running = 1
    progress.finish("failed")
    assert stream.getvalue().endswith("| 0 running, 2 queued | 0 tokens | 1:00, ETA 2:00\n")  # 60 s a run, 2 left


def test_progress_on_a_terminal_is_a_bar_redrawn_in_place() -> None:
    main_end, side = on_a_terminal()
    with open(side, "w", encoding="utf-8") as stream:
        progress = Progress("b1", 4, Counter({"solved": 1}), stream=stream, tokens=100)
        progress.start()
        progress.finish("unverified", tokens=2400)
        progress.draw()
        progress.close()
    drawn = read_all(main_end)
    assert "\r" in drawn and drawn.count("\n") == 1  # redrawn in place, one line left at the end
    last = drawn.rstrip().rsplit("\r", 1)[-1]
    assert last.startswith("b1 ") and "█" in last and "2/4, solved 1 · unverified 1 | 0 running, 2 queued" in last
    assert "| 2,500 tokens | 0:00, ETA 0:00" in last


def test_progress_shows_the_pools_evaluations_per_arch_and_host() -> None:
    loads = [Load("sm_90a", "10.0.0.5", 1, 2), Load("sm_90a", "10.0.0.6", 1, 0), Load("sm_90a", "10.0.0.5", 0, 1),
             Load("sm_100a", "10.0.0.7", 0, 1)]  # fmt: skip
    stream = io.StringIO()
    progress = Progress("b1", 2, Counter(), lambda: loads, stream=stream)
    progress.start()
    progress.finish("solved")
    assert stream.getvalue().splitlines() == [
        "b1 [############------------] 1/2  solved 1 | 0 running, 1 queued | 0 tokens | 0:00, ETA 0:00 | "
        "sm_100a 0 running 1 queued (10.0.0.7 0+1); "
        "sm_90a 2 running 3 queued (10.0.0.5 1+3, 10.0.0.6 1+0)"
    ]


# ------------------------------------------------------------------------------------ whole benches


def statuses(bench_dir: Path) -> dict[str, list[str]]:
    return {
        p.name: [t.evaluation.status.value for t in RunFolder(p).turns()]
        for p in sorted(bench_dir.iterdir())
        if p.is_dir()
    }


def test_bench_in_process_then_rerun(tmp_path: Path, runs_dir: Path, capsys: pytest.CaptureFixture) -> None:
    script = write_script(tmp_path / "script.json", [fixture_text("fill_typo.md"), fixture_text("fill_ok.md")])
    args = ["tasks=gemm_n7168_k5120", "archs=h100", "llm=scripted", f"llm.path={script}", "samples=2", "max_turns=2",
            "concurrency=3", "eval.gpu=false", f"runs_dir={runs_dir}", "bench_id=b"]  # fmt: skip
    bench_dir = runs_dir / "b"
    stale = bench_dir / f"{GEMM}-sm_90a-multi-s01"  # killed before its first checkpoint: started over
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert statuses(bench_dir) == {
        f"{GEMM}-sm_90a-multi-s00": ["compile_error", "unverified"],
        f"{GEMM}-sm_90a-multi-s01": ["compile_error", "unverified"],
        f"{GEMM}-sm_90a-single-s00": ["compile_error"],
        f"{GEMM}-sm_90a-single-s01": ["compile_error"],
    }
    assert "b: 4 runs, 0 finished earlier; 3 at a time; GPU stages skipped: turned off (eval.gpu=false)" in err
    assert "4/4  unverified 2 · failed 2" in err  # a run's outcome: its best turn
    # multi: both unverified at turn 2 (compile_error, then clean): said apart from correct, with what it means
    assert "| scripted | sm_90a | multi  | 1       | 2    | 0%      | 0%         |" in out
    assert "| scripted | sm_90a | multi  | 2       | 2    | 0%      | 100%       |" in out
    assert "| scripted | sm_90a | single | 1       | 2    | 0%      | 0%         |" in out
    assert UNVERIFIED_NOTE in out
    assert f"bench folder: {bench_dir}" in out
    bench = load(bench_dir)
    assert (bench.samples, bench.max_turns, bench.modes, len(bench.runs)) == (2, 2, ["single", "multi"], 4)
    assert bench.solve == {"llm": "scripted", "llm.path": str(script), "eval.gpu": "false"}

    written = {p: p.stat().st_mtime_ns for p in bench_dir.glob("*/trajectory.jsonl")}
    assert main(args) == 0  # the same command: nothing left to run
    assert "b: 4 runs, 4 finished earlier\n" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in bench_dir.glob("*/trajectory.jsonl")} == written

    assert main([a if a != "samples=2" else "samples=3" for a in args]) == 2
    assert "holds a bench with other settings (samples: 2 (saved) vs 3 (now))" in capsys.readouterr().err


def test_the_bench_hands_its_runs_typed_settings_and_never_reads_text_again(
    tmp_path: Path, runs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settings are parsed once, at the command line: the bench builds each run's SolveConfig from its plan and
    hands it to agent.loop.run.prepare, never formatting settings as key=value text for a second parse."""
    assert inspect.signature(agent.loop.run.prepare).parameters["settings"].annotation == "SolveConfig"
    script = write_script(tmp_path / "script.json", [fixture_text("fill_ok.md")])
    argv = ["tasks=gemm_n7168_k5120", "archs=h100", "llm=scripted", f"llm.path={script}", "max_turns=2",
            "eval.gpu=false", f"runs_dir={runs_dir}", "bench_id=typed"]  # fmt: skip
    ready = configure(cli.parse_pairs(argv))

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("settings read from text after the command line")

    for name in ("parse_pairs", "split_argv", "read"):
        monkeypatch.setattr(cli, name, refused)
    given: list[object] = []
    real = agent.bench.run.prepare
    monkeypatch.setattr(agent.bench.run, "prepare", lambda s, quiet, labels: given.append(s) or real(s, quiet, labels))
    check_runs(ready)
    save(ready.bench, ready.folder)
    assert run_bench(ready) == 0
    assert sorted((s.run_id, s.max_turns, s.eval.profile) for s in given) == [
        (f"{GEMM}-sm_90a-multi-s00", 2, Profile.AUTO), (f"{GEMM}-sm_90a-single-s00", 1, Profile.COUNTS)
    ]  # fmt: skip
    assert all(isinstance(s, SolveConfig) and s.runs_dir == runs_dir / "typed" for s in given)


def cli_process(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "agent.bench", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def on_a_terminal(columns: int = 200) -> tuple[int, int]:
    """A pty (its reading end, its terminal end) with a window `columns` wide, as a terminal has."""
    reader, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    return reader, side


def read_all(fd: int) -> str:
    """What was written to a pty, read from its other end until the writer has closed."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the writing end is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode()


@pytest.mark.parametrize("terminal", [True, False])
def test_the_bench_draws_a_bar_on_a_terminal_and_lines_elsewhere(tmp_path: Path, runs_dir: Path, terminal: bool):
    script = write_script(tmp_path / "script.json", [fixture_text("fill_typo.md"), fixture_text("fill_ok.md")])
    args = ["tasks=gemm_n7168_k5120", "archs=h100", "llm=scripted", f"llm.path={script}", "samples=2", "max_turns=2",
            "concurrency=2", "eval.gpu=false", f"runs_dir={runs_dir}", "bench_id=p"]  # fmt: skip
    main_end, side = on_a_terminal() if terminal else (None, subprocess.PIPE)
    proc = subprocess.Popen([sys.executable, "-m", "agent.bench", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=side, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"})  # fmt: skip
    if terminal:
        os.close(side)
        err = read_all(main_end)
    else:
        err = proc.stderr.read().decode()
    out = proc.communicate(timeout=300)[0].decode()
    assert proc.returncode == 0, err
    assert "| scripted | sm_90a | multi  | 2       | 2    | 0%      | 100%       |" in out
    progress = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("p ")]
    assert progress[-1].startswith("p ") and "4/4" in progress[-1] and "ETA 0:00" in progress[-1]
    if terminal:  # a bar redrawn in place with \r, its own glyphs
        assert "\r" in err and "█" in progress[-1] and "4/4, unverified 2 · failed 2 | 0 running, 0 queued" in err
    else:  # one plain line per finished run, nothing redrawn
        assert "\r" not in err and len(progress) == 4
        assert progress[-1].startswith("p [########################] 4/4  unverified 2 · failed 2 | 0 running, 0")


def has_event(path: Path, name: str, **fields: object) -> bool:
    if not path.is_file():
        return False
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("event") == name and all(event.get(k) == v for k, v in fields.items()):
            return True
    return False


def test_bench_killed_then_continued(tmp_path: Path, runs_dir: Path) -> None:
    """SIGKILL while the first repair run waits for its second answer: the single-shot runs had finished
    and are skipped; the killed run resumes from its checkpoint; the last one starts."""
    script = write_script(
        tmp_path / "script.json", [fixture_text("fill_typo.md"), {"text": fixture_text("fill_ok.md"), "delay_s": 1.5}]
    )
    proc = cli_process("tasks=gemm_n7168_k5120", "archs=sm_90a", "llm=scripted", f"llm.path={script}", "samples=2",
                       "max_turns=2", "concurrency=1", "eval.gpu=false", f"runs_dir={runs_dir}",
                       "bench_id=killed")  # fmt: skip
    bench_dir = runs_dir / "killed"
    events = bench_dir / f"{GEMM}-sm_90a-multi-s00" / "events.log"
    deadline = time.monotonic() + 60
    while not has_event(events, "turn.start", turn=2):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the first repair run never reached turn 2"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    singles = {p: p.stat().st_mtime_ns for p in bench_dir.glob("*-single-*/trajectory.jsonl")}
    assert len(singles) == 2
    assert statuses(bench_dir)[f"{GEMM}-sm_90a-multi-s00"] == ["compile_error"]

    proc = cli_process("resume=killed", f"runs_dir={runs_dir}")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "killed: 4 runs, 2 finished earlier" in err
    assert {p: p.stat().st_mtime_ns for p in bench_dir.glob("*-single-*/trajectory.jsonl")} == singles
    assert has_event(events, "run.resume")
    assert set(map(tuple, statuses(bench_dir).values())) == {("compile_error",), ("compile_error", "unverified")}
    folder = RunFolder(bench_dir / f"{GEMM}-sm_90a-multi-s00")
    assert [t.index for t in folder.turns()] == [1, 2] and folder.summary().stop_reason == "max_turns"
