"""Retrieval: for a held-out failure (another task, the same kind of failure) the note of that kind comes first;
notes of another family, or mined from the task's own runs, never come; the section stays in its budget."""

from __future__ import annotations

import pytest

from agent.loop.config import FeedbackConfig
from agent.loop.store import find_runs, read_trajectories
from agent.notes.mine import mine
from agent.notes.retrieve import SECTION, NoteIndex, notes_feedback, notes_section
from tasks.catalog import get_task
from tests.agent.notes import cases


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory) -> tuple[NoteIndex, dict[str, str]]:
    runs = tmp_path_factory.mktemp("runs")
    ids = cases.mined_runs(runs)
    trajectories, _ = read_trajectories(find_runs([runs]))
    notes = mine(trajectories)
    kind_of = {n.id: kind for kind, run_id in ids.items() for n in notes if n.provenance[0].run_id == run_id}
    return NoteIndex(notes), kind_of


@pytest.mark.parametrize("kind", list(cases.HELD_OUT))
def test_the_note_of_the_same_kind_comes_first_for_a_held_out_failure(mined, kind: str) -> None:
    index, kind_of = mined
    failure = cases.HELD_OUT[kind]()
    task = get_task(failure.task)
    found = index.retrieve(failure, task.family, "sm_90a", k=3, exclude_task=task.name)
    assert found and kind_of[found[0].id] == kind
    assert all(n.family == "attention_fwd" for n in found)  # the GEMM run's note is another family's


def test_a_task_never_sees_notes_from_its_own_runs_unless_asked(mined) -> None:
    index, kind_of = mined
    failure = cases.compile_error("mha_with_lse_d128", cases.UNKNOWN_INSTRUCTION)  # a task notes were mined from
    task = get_task(failure.task)
    held_out = index.retrieve(failure, task.family, "sm_90a", k=10, exclude_task=task.name)
    assert held_out and {n.provenance[0].task for n in held_out} == {"mha_with_lse_d128_causal"}
    seen = index.retrieve(failure, task.family, "sm_90a", k=10)
    assert kind_of[seen[0].id] == "unknown instruction"
    assert index.retrieve(failure, task.family, "sm_100a", k=10) == []  # no notes of that arch


def test_the_section_shows_whole_notes_within_its_budget(mined) -> None:
    index, _ = mined
    notes = index.notes
    text, shown = notes_section(notes, limit=700)
    assert text.startswith(f"## {SECTION}") and len(text) <= 700
    assert 0 < len(shown) < len(notes) and all(f"[{n.id}]" in text for n in shown)
    assert notes_section(notes, limit=10) == ("", [])


def test_a_solved_attempt_gets_no_notes_and_a_failed_one_at_most_k(mined) -> None:
    index, _ = mined
    task = get_task("mha_with_lse_d64")
    settings = FeedbackConfig(notes=None, notes_k=2)
    assert notes_feedback(index, cases.passed(task.name), task, "sm_90a", settings, 1.0) == ("", [])
    text, ids = notes_feedback(index, cases.hang(task.name), task, "sm_90a", settings, 1.0)
    assert len(ids) == 2 and all(f"[{i}]" in text for i in ids)
