"""Run folders a kill, a careless user, a second process or an attacker left in a bad way: a torn last line,
files that do not parse, a resume that has nothing to do, two processes on one run, fixtures that point outside
their folder, a checkpoint that names code to run. Every refusal names the file; no finished turn is lost; a
no-op changes nothing."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import re
import sqlite3
from pathlib import Path

import ormsgpack
import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from agent.loop.checkpoints import LoopSerializer, UntrustedCheckpoint
from agent.loop.store import RunFolder
from agent.replay import main as replay
from agent.report import main as report
from agent.solve import main as solve
from tests.adversarial.helpers import fill_ok


def run(runs_dir: Path, tmp_path: Path, run_id: str, turns: int = 1, answers: list | None = None) -> Path:
    script = tmp_path / f"{run_id}.json"
    script.write_text(json.dumps(answers or [fill_ok()] * 3))
    args = ["task=gemm", "arch=sm_90a", "llm=scripted", f"llm.path={script}", f"max_turns={turns}",
            f"unverified_turns={turns}", "eval.gpu=false", f"runs_dir={runs_dir}", f"run_id={run_id}"]  # fmt: skip
    assert solve(args) == 0
    return runs_dir / run_id


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*")
            if p.is_file()}  # fmt: skip


def test_a_torn_last_line_is_cut_on_resume_and_no_turn_is_lost(runs_dir: Path, tmp_path: Path) -> None:
    folder = run(runs_dir, tmp_path, "torn")
    line = (folder / "trajectory.jsonl").read_text().splitlines()[0]
    with open(folder / "trajectory.jsonl", "a") as f:
        f.write(line[: len(line) // 2])  # a kill in the middle of writing a line
    assert solve(["resume=torn", f"runs_dir={runs_dir}", "max_turns=3", "unverified_turns=3"]) == 0
    assert [t.index for t in RunFolder(folder).turns()] == [1, 2, 3]
    assert (folder / "trajectory.torn").read_text() == line[: len(line) // 2] + "\n"
    events = [json.loads(x) for x in (folder / "events.log").read_text().splitlines()]
    assert any(e["event"] == "trajectory.torn_tail_cut" for e in events)
    assert report([str(runs_dir)]) == 0  # the run reads back whole


def test_a_no_op_resume_changes_nothing(runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = run(runs_dir, tmp_path, "done")
    before = snapshot(folder)
    assert solve(["resume=done", f"runs_dir={runs_dir}"]) == 0
    assert solve(["resume=done", f"runs_dir={runs_dir}", "max_turns=1"]) == 0  # the value it already has
    assert snapshot(folder) == before
    assert "nothing to do" in capsys.readouterr().err


def test_two_processes_cannot_drive_one_run(runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = run(runs_dir, tmp_path, "busy")
    capsys.readouterr()
    with RunFolder(folder).lock():  # as a process resuming it holds it
        assert solve(["resume=busy", f"runs_dir={runs_dir}", "max_turns=2"]) == 2
    assert "is in use: another process is running or resuming this run" in capsys.readouterr().err
    assert solve(["resume=busy", f"runs_dir={runs_dir}", "max_turns=2"]) == 0  # released with the holder


CORRUPT = {
    "config.json": ("config.json", "{not json", "does not hold a RunConfig"),
    "config_without_task": ("config.json", '{"arch": "sm_90a"}', "task: required field is missing"),
    "middle_line": ("trajectory.jsonl", None, "trajectory.jsonl, line 1: not a turn"),
    "checkpoints": ("checkpoints.sqlite", "garbage" * 1000, "is not a readable checkpoint database"),
}


def corrupt(folder: Path, case: str) -> str:
    name, text, message = CORRUPT[case]
    if text is None:  # a bad first line, then a good one: not a torn tail
        good = (folder / name).read_text()
        text = "{oops\n" + good
    (folder / name).write_text(text)
    return message


@pytest.mark.parametrize("case", CORRUPT)
def test_resuming_a_corrupted_folder_names_the_file(
    case: str, runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    message = corrupt(run(runs_dir, tmp_path, "bad"), case)
    capsys.readouterr()
    assert solve(["resume=bad", f"runs_dir={runs_dir}", "max_turns=2"]) == 2
    (line,) = capsys.readouterr().err.splitlines()  # one line, naming the folder and what is wrong
    assert line.startswith("error: ") and message in line and str(runs_dir / "bad") in line


@pytest.mark.parametrize("case", ["config.json", "config_without_task", "middle_line"])
def test_one_bad_run_does_not_hide_the_others(
    case: str, runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run(runs_dir, tmp_path, "good")
    message = corrupt(run(runs_dir, tmp_path, "bad"), case)
    capsys.readouterr()
    assert report([str(runs_dir), f"out={tmp_path / 'report'}"]) == 0
    assert replay([str(runs_dir)]) == 0
    err = capsys.readouterr().err
    assert err.count(f"warning: skipped {runs_dir / 'bad'}") == 2 and message in err
    assert "1 runs" in (tmp_path / "report" / "report.md").read_text()


FIXTURES = {
    "host_file": ([{"file": "/etc/hostname"}], "'file' must name a file beside the fixture"),
    "parent_path": ([{"file": "../../etc/hostname"}], "'file' must name a file beside the fixture"),
    "nested": ("[" * 100_000 + "]" * 100_000, "nested deeper than 32 levels"),
    "endless_delay": ('[{"text": "x", "delay_s": 1e309}]', "the number 1e309 is out of range"),
    "long_delay": ([{"text": "x", "delay_s": 1e9}], "delay_s: Input should be less than or equal to 3600"),
}


@pytest.mark.parametrize("case", FIXTURES)
def test_scripted_fixtures_stay_in_their_folder(
    case: str, runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    content, message = FIXTURES[case]
    capsys.readouterr()
    script = tmp_path / "script.json"
    script.write_text(content if isinstance(content, str) else json.dumps(content))
    args = ["task=gemm", "arch=sm_90a", "llm=scripted", f"llm.path={script}", f"runs_dir={runs_dir}"]
    assert solve(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: llm.path: ") and message in err
    assert not runs_dir.exists()  # refused before a run folder was made


def plant(checkpoints: Path, value: ormsgpack.Ext) -> None:
    """Put `value` in the latest checkpoint's state, as a hand-edited checkpoints.sqlite would hold it."""
    with contextlib.closing(sqlite3.connect(checkpoints)) as db, db:
        row_id, blob = db.execute("SELECT rowid, checkpoint FROM checkpoints ORDER BY checkpoint_id DESC").fetchone()
        checkpoint = ormsgpack.unpackb(blob)
        checkpoint["channel_values"]["stop_reason"] = value
        db.execute("UPDATE checkpoints SET checkpoint = ? WHERE rowid = ?", (ormsgpack.packb(checkpoint), row_id))


@pytest.mark.parametrize("code", [0, 1, 5])  # a callable with one argument, with several, a "pydantic model"
def test_a_planted_checkpoint_value_is_not_imported_or_called(
    code: int, runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = run(runs_dir, tmp_path, "planted")
    marker = tmp_path / "ran"
    call = {0: ["os", "system", f"touch {marker}"], 1: ["os", "system", [f"touch {marker}"]],
            5: ["os", "system", {}, "model_validate_json"]}[code]  # fmt: skip
    plant(folder / "checkpoints.sqlite", ormsgpack.Ext(code, ormsgpack.packb(call)))
    capsys.readouterr()
    assert solve(["resume=planted", f"runs_dir={runs_dir}", "max_turns=2", "unverified_turns=2"]) == 2
    assert not marker.exists()
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and "the type os.system, which the loop never writes" in line
    assert str(folder / "checkpoints.sqlite") in line
    assert [t.index for t in RunFolder(folder).turns()] == [1]  # nothing ran


def test_the_loop_loads_only_its_own_checkpoint_values(runs_dir: Path, tmp_path: Path) -> None:
    """The serializer the loop runs with refuses a planted value too (not only the check before a resume)."""
    folder = run(runs_dir, tmp_path, "direct")
    marker = tmp_path / "ran"
    plant(folder / "checkpoints.sqlite", ormsgpack.Ext(0, ormsgpack.packb(["os", "system", f"touch {marker}"])))
    with contextlib.closing(sqlite3.connect(folder / "checkpoints.sqlite")) as db:
        saver = SqliteSaver(db, serde=LoopSerializer())
        with pytest.raises(UntrustedCheckpoint, match=r"the type os\.system"):
            saver.get_tuple({"configurable": {"thread_id": "direct"}})
    assert not marker.exists()


def test_model_names_cannot_break_or_inject_into_the_report(runs_dir: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([fill_ok()]))
    names = ["evil|model\n# Owned", "<img src=x onerror=alert(1)>", "[click](http://example.invalid)"]
    for number, name in enumerate(names):
        assert solve(["task=gemm", "arch=sm_90a", "llm=scripted", f"llm.path={script}", f"llm.label={name}",
                      "max_turns=1", "eval.gpu=false", f"runs_dir={runs_dir}", f"run_id=m{number}"]) == 0  # fmt: skip
    assert report([str(runs_dir), f"out={tmp_path / 'report'}"]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "# Owned" not in [line.strip() for line in text.splitlines()] and "<img" not in text
    assert "evil\\|model # Owned" in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "\\[click\\](http://example.invalid)" in text
    for header, rows in re.findall(r"(?m)^(\|.*\|)\n\|[-|]+\|\n((?:\|.*\|\n)+)", text):
        cells = len(re.split(r"(?<!\\)\|", header))  # every row has as many cells as its header
        assert all(len(re.split(r"(?<!\\)\|", row)) == cells for row in rows.splitlines()), rows
    with open(tmp_path / "report" / "trajectories.csv", newline="") as f:
        assert {row["model"] for row in csv.DictReader(f)} == set(names)  # the CSV keeps them as they are
