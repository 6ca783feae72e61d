"""Repair notes mined from run folders. A repair is a turn that did better than the turn before it in the same
run: it got further in the stage order (a compile error fixed, a fault gone, the check passed) or, both correct,
ran faster. The earlier turn's failure is the note's signature, the difference of the two answers its change.
Equal notes (same signature, same change) are kept once, with every repair they stand for."""

from __future__ import annotations

import difflib
import itertools
import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agent.loop.records import Trajectory, Turn
from agent.notes.record import Change, Provenance, RepairNote, signature
from tasks.catalog import get_task
from tasks.schema import UnknownName
from tools.evaluation import Stage, StageState, Status
from tools.solution import Solution

# Instructions whose count says what kind of change it was; cp.async alone excludes its bulk (TMA) form.
MNEMONICS = {
    "wgmma": r"\bwgmma\.", "tcgen05": r"\btcgen05\.", "mbarrier": r"\bmbarrier\.",
    "cp.async.bulk": r"\bcp\.async\.bulk\b", "cp.async": r"\bcp\.async(?!\.bulk)\b", "ldmatrix": r"\bldmatrix\.",
    "stmatrix": r"\bstmatrix\.", "bar.sync": r"\bbar(rier)?\.sync\b", "setmaxnreg": r"\bsetmaxnreg\.",
    "ld.global": r"\bld\.global\b", "st.global": r"\bst\.global\b", "ld.shared": r"\bld\.shared\b",
    "st.shared": r"\bst\.shared\b", "fence": r"\bfence\.",
}  # fmt: skip
GATE_ORDER = list(Stage)[: list(Stage).index(Stage.CHECK) + 1]  # the stages an attempt must get through


class MineSettings(BaseModel):
    """Which runs to mine and where the notes go."""

    model_config = ConfigDict(extra="forbid")
    runs: list[Path] = Field(min_length=1, description="Run folders, or folders holding them.")
    out: Path = Field(description="The notes file, NOTES.jsonl (required).")


def progress(turn: Turn) -> int:
    """How far the attempt got: the index of its failing stage, past every gate when it passed (unverified: up
    to the GPU stages it could not run)."""
    status = turn.evaluation.status
    if status is Status.PASSED:
        return len(GATE_ORDER)
    if status is Status.UNVERIFIED:
        return GATE_ORDER.index(Stage.RUN)
    failed = next((s.name for s in turn.evaluation.stages if s.state is StageState.FAILED and s.name in GATE_ORDER),
                  None)  # fmt: skip
    return GATE_ORDER.index(failed) if failed is not None else 0


def repaired(before: Turn, after: Turn) -> str | None:
    """The outcome when `after` repaired `before`, else None."""
    was, now = before.evaluation, after.evaluation
    if progress(after) > progress(before):
        speed = f" ({now.speedup:.2f}×)" if now.speedup is not None else ""
        return f"fixed: {was.status.value} → {now.status.value}{speed}"
    if was.status is now.status is Status.PASSED and was.speedup and now.speedup and now.speedup > was.speedup:
        return f"faster: {was.speedup:.2f}× → {now.speedup:.2f}× the baseline ({now.speedup / was.speedup:.2f}× faster)"
    return None


def change(before: Solution | None, after: Solution | None) -> Change:
    """Lines added and removed, instruction counts that moved, launch fields that changed, and one line of it."""
    if after is None:
        return Change(summary="no solution extracted")
    old, new = (before.source.splitlines() if before else []), after.source.splitlines()
    diff = list(difflib.unified_diff(old, new, lineterm="", n=0))
    added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
    removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
    counts = {}
    for name, pattern in MNEMONICS.items():
        was = len(re.findall(pattern, before.source)) if before else 0
        now = len(re.findall(pattern, after.source))
        if was != now:
            counts[name] = (was, now)
    launch = launch_changes(before, after) if before else []
    parts = [f"+{added}/-{removed} lines" if before else f"a whole answer ({len(new)} lines) after none"]
    parts += [f"{name} {a}→{b}" for name, (a, b) in counts.items()]
    parts += launch
    if before and before.language != after.language:
        parts.append(f"{before.language} → {after.language}")
    return Change(lines_added=added, lines_removed=removed, instructions=counts, launch=launch,
                  summary="; ".join(parts))  # fmt: skip


def launch_changes(before: Solution, after: Solution) -> list[str]:
    was, now = before.launch.model_dump(mode="json"), after.launch.model_dump(mode="json")
    if len(was["launches"]) != len(now["launches"]):
        return [f"launches: {len(was['launches'])} → {len(now['launches'])}"]
    out = []
    for i, (a, b) in enumerate(zip(was["launches"], now["launches"], strict=True)):
        for key in a:
            if a[key] != b[key]:
                shown = (json.dumps(a[key]), json.dumps(b[key])) if key != "args" else ("…", f"{len(b[key])} args")
                out.append(f"launch {i + 1} {key}: {shown[0]} → {shown[1]}")
    if was["scratch"] != now["scratch"]:
        out.append(f"scratch buffers: {len(was['scratch'])} → {len(now['scratch'])}")
    return out


def notes_of(trajectory: Trajectory) -> list[RepairNote]:
    """The repairs in one run, as notes (a task the catalog no longer knows has no family: none)."""
    try:
        family = get_task(trajectory.config.task).family
    except UnknownName:
        return []
    turns = sorted(trajectory.turns, key=lambda t: t.index)
    notes = []
    for before, after in itertools.pairwise(turns):
        outcome = repaired(before, after)
        if outcome is None:
            continue
        sig, diff = signature(before.evaluation), change(before.solution, after.solution)
        where = Provenance(run_id=trajectory.run_id, task=trajectory.config.task, failed_turn=before.index,
                           fixed_turn=after.index)  # fmt: skip
        arch = trajectory.config.arch
        notes.append(RepairNote(id=RepairNote.make_id(family, arch, sig, diff), family=family, arch=arch,
                                signature=sig, change=diff, outcome=outcome, provenance=[where]))  # fmt: skip
    return notes


def mine(trajectories: list[Trajectory]) -> list[RepairNote]:
    """Every run's notes, equal ones merged (their provenance joined), in the order first found."""
    kept: dict[str, RepairNote] = {}
    for trajectory in trajectories:
        for note in notes_of(trajectory):
            if note.id in kept:  # a copy of a run (the same id) adds nothing to the provenance
                first = kept[note.id]
                joined = [*first.provenance, *(p for p in note.provenance if p not in first.provenance)]
                kept[note.id] = first.model_copy(update={"provenance": joined})
            else:
                kept[note.id] = note
    return list(kept.values())
