"""A repair-loop run with feedback.notes=: the scripted compile-error-then-fix answers through the real ptxas, the
notes mined from runs of the same kind of failure; the feedback shows them, each turn and the config record them;
a bad notes file is refused on one line before any run folder exists; the report scores runs with notes apart."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from agent.bench.report import write_report
from agent.loop.store import RunFolder, find_runs, read_trajectories
from agent.notes.mine import mine
from agent.notes.record import NOTES_FORMAT, write_notes
from agent.notes.retrieve import SECTION
from agent.solve import main as solve_command
from tests.agent.helpers import FIXTURES, solve
from tests.agent.notes import cases

BASE = ["task=gemm", "arch=sm_90a", "llm=scripted", f"llm.path={FIXTURES / 'compile_fix.json'}", "eval.gpu=false"]


@pytest.fixture
def notes_file(tmp_path: Path) -> Path:
    cases.mined_runs(tmp_path / "mined")
    trajectories, _ = read_trajectories(find_runs([tmp_path / "mined"]))
    path = tmp_path / "notes.jsonl"
    write_notes(path, mine(trajectories))
    return path


def test_a_failed_attempts_feedback_shows_the_notes_and_the_turn_records_them(notes_file: Path, runs_dir: Path):
    code, folder = solve([*BASE, f"runs_dir={runs_dir}", f"feedback.notes={notes_file}",
                          "feedback.notes_exclude_task=false"])  # fmt: skip
    assert code == 0
    first, second = folder.turns()
    [gemm_note] = [json.loads(line) for line in notes_file.read_text().splitlines() if '"gemm"' in line]
    assert first.notes_shown == [gemm_note["id"]]  # the only GEMM note: an unknown instruction fixed
    assert f"## {SECTION}" in first.feedback and f"[{gemm_note['id']}]" in first.feedback
    assert "Not a name of any known instruction: 'mda'" in second.messages[-1].content.split(SECTION)[1]
    assert second.notes_shown == []  # unverified: nothing failed that a note could match
    config = json.loads((folder.path / "config.json").read_text())
    assert config["feedback"]["notes"] == str(notes_file.resolve())
    assert config["notes_sha256"] == hashlib.sha256(notes_file.read_bytes()).hexdigest()


def test_held_out_by_default_the_task_sees_none_of_its_own_notes(notes_file: Path, runs_dir: Path) -> None:
    code, folder = solve([*BASE, f"runs_dir={runs_dir}", f"feedback.notes={notes_file}"])
    assert code == 0
    first, _ = folder.turns()
    assert first.notes_shown == [] and SECTION not in first.feedback


def test_a_run_without_notes_records_turns_as_before(runs_dir: Path) -> None:
    code, folder = solve([*BASE, f"runs_dir={runs_dir}"])
    assert code == 0
    lines = (folder.path / "trajectory.jsonl").read_text().splitlines()
    assert all("notes_shown" not in json.loads(line) for line in lines)
    assert all(t.notes_shown is None for t in folder.turns())
    assert "notes_sha256" not in json.loads((folder.path / "config.json").read_text())


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("this is not JSON\n", "line 1: not JSON (Expecting value); a notes file is JSONL from python -m "
         "agent.mine_notes"),
        ('{"id": "x"}\n', "line 1: not a repair note (family: Field required)"),
        (json.dumps({"format_version": NOTES_FORMAT + 1}) + "\n", f"line 1: a note of format {NOTES_FORMAT + 1}, newer "
         f"than this code reads ({NOTES_FORMAT}); mine the notes again or update"),
    ],
)  # fmt: skip
def test_a_bad_notes_file_is_one_error_line_at_start(
    tmp_path: Path, runs_dir: Path, capsys: pytest.CaptureFixture, content: str, said: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    assert solve_command([*BASE, f"runs_dir={runs_dir}", f"feedback.notes={bad}"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: invalid settings: feedback.notes: {bad}, {said}\n"
    assert not runs_dir.exists()


def test_the_report_scores_runs_with_and_without_notes_apart(notes_file: Path, runs_dir: Path, tmp_path: Path):
    solve([*BASE, f"runs_dir={runs_dir}", "llm.label=gpt-x"])
    solve([*BASE, f"runs_dir={runs_dir}", "llm.label=gpt-x", f"feedback.notes={notes_file}"])
    text = write_report([RunFolder(p).trajectory() for p in sorted(runs_dir.iterdir())], tmp_path / "report",
                        [runs_dir]).read_text()  # fmt: skip
    headline = text.split("## Headline (all tasks)")[1].split("##")[0]
    sha = hashlib.sha256(notes_file.read_bytes()).hexdigest()[:8]
    for variant in ("all", "full", f"full + notes {sha}"):
        assert re.search(rf"\| gpt-x \| {re.escape(variant)} +\|", headline), variant
