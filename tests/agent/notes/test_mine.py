"""Mining the fixture runs (tests/fixtures/runs) and runs whose repairs carry real answers: which turns are
repairs, what a note says of the change, and that equal notes are kept once."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.loop.store import find_runs, read_trajectories
from agent.mine_notes import main as mine_command
from agent.notes.mine import mine
from agent.notes.record import NOTES_FORMAT, read_notes
from tests.agent.notes import cases
from tests.fixtures.runs import make_runs

RUNS = Path(make_runs.__file__).parent


def mined(*paths: Path):
    trajectories, skipped = read_trajectories(find_runs(list(paths)))
    assert skipped == []
    return mine(trajectories)


def repairs(notes) -> set[tuple[str, int, int]]:
    return {(p.run_id, p.failed_turn, p.fixed_turn) for n in notes for p in n.provenance}


def test_the_fixture_runs_repairs_are_found_and_nothing_else() -> None:
    notes = mined(RUNS)
    gemm0, gemm1 = "gemm_n7168_k5120-sm_90a-multi-s00", "gemm_n7168_k5120-sm_90a-multi-s01"
    assert repairs(notes) == {
        (gemm0, 1, 2), (gemm0, 2, 3), (gemm0, 3, 4),  # CE → RE → P0.5 → P1.5 (faster)
        (gemm1, 1, 2), (gemm1, 2, 3), (gemm1, 4, 5), (gemm1, 6, 7),  # ABI → TO → MM; MM → P; LE → P
        ("mha_with_lse_d128-sm_90a-multi-s01", 1, 2),  # CE → P
        ("gemm-replay", 1, 2), ("gemm-replay", 3, 4),  # CE → P with real answers; no answer → P
    }  # fmt: skip
    # wave1/ holds copies of two of these runs: their notes are the same notes, kept once
    assert len(notes) == 10 and all(len(n.provenance) == 1 for n in notes)
    by_repair = {(p.run_id, p.failed_turn): n for n in notes for p in n.provenance}
    faster = by_repair[(gemm0, 3)]
    assert faster.signature.status == "passed" and faster.signature.stage is None
    assert faster.outcome == "faster: 0.50× → 1.50× the baseline (3.00× faster)"
    typo = by_repair[("gemm-replay", 1)]
    assert (typo.family, typo.arch, typo.signature.stage) == ("gemm", "sm_90a", "compile")
    assert typo.change.summary == "+1/-1 lines" and typo.outcome == "fixed: compile_error → passed (1.07×)"
    no_answer = by_repair[("gemm-replay", 3)]
    assert no_answer.change.summary == "a whole answer (26 lines) after none; st.global 0→1"
    assert by_repair[("mha_with_lse_d128-sm_90a-multi-s01", 1)].family == "attention_fwd"


def test_a_note_keeps_the_telling_lines_and_counts_the_instructions_that_changed(tmp_path: Path) -> None:
    cases.mined_runs(tmp_path)
    notes = {n.provenance[0].run_id: n for n in mined(tmp_path)}
    register = notes["mha_with_lse_d128-notes-1"].signature
    assert register.key_lines == ["line 16: error: Arguments mismatch for instruction 'mad.lo'",
                                  "line 16: error: Unknown symbol '%r99'"]  # fmt: skip
    oob = notes["mha_with_lse_d128-notes-4"].signature
    assert oob.status == "runtime_error" and oob.stage == "run"
    assert any("Invalid __global__ write of size 4 bytes at line 20" in line for line in oob.key_lines)
    guard = notes["mha_with_lse_d128-notes-4"].change
    assert (guard.lines_added, guard.lines_removed, guard.instructions) == (1, 0, {})
    the_same_in_gemm = notes["gemm-notes"]
    assert the_same_in_gemm.family == "gemm" and the_same_in_gemm.id != notes["mha_with_lse_d128-notes-0"].id


def test_two_runs_with_one_repair_make_one_note_with_both_provenances(tmp_path: Path) -> None:
    for run_id in ("first", "second"):
        turns = [make_runs.turn(1, cases.compile_error(make_runs.GEMM, cases.UNKNOWN_INSTRUCTION), "1",
                                cases.UNKNOWN_INSTRUCTION),
                 make_runs.turn(2, cases.passed(make_runs.GEMM), "2", cases.FIXED)]  # fmt: skip
        make_runs.write_run(tmp_path, run_id, make_runs.GEMM, 8, turns, "solved")
    [note] = mined(tmp_path)
    assert repairs([note]) == {("first", 1, 2), ("second", 1, 2)}


def test_the_command_writes_notes_that_read_back(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "notes.jsonl"
    assert mine_command([str(RUNS), f"out={out}"]) == 0
    notes = read_notes(out)
    assert len(notes) == 10 and {n.format_version for n in notes} == {NOTES_FORMAT}
    said = capsys.readouterr().out
    assert f"10 notes from 16 runs → {out}" in said and "gemm compile_error: 2" in said


def test_the_command_refuses_what_it_cannot_mine_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert mine_command([str(tmp_path / "missing"), f"out={tmp_path / 'n.jsonl'}"]) == 2
    assert mine_command([str(RUNS)]) == 2
    assert mine_command([str(tmp_path), f"out={tmp_path / 'n.jsonl'}"]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors == [f"error: no such folder: {tmp_path / 'missing'}", "error: invalid settings: out is required",
                      f"error: no run folders under {tmp_path}"]  # fmt: skip
