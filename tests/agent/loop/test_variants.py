"""What a run is told and how it is named: prompt=base and prompt=full differ only in the knowledge parts (the
prompts as `python -m agent.solve` sent them, diffed), the variant recorded in config.json and shown in reports; an
unverified attempt gets feedback that asks for nothing new and ends the run unless unverified_turns says more;
llm.label names the model behind scripted answers in summaries, reports and the inspector."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest

from agent.bench.report import write_report
from agent.bench.score import model
from agent.loop.prompts import PATTERNS, knowledge
from agent.loop.store import RunFolder
from tasks.schema import Arch
from tests.agent.helpers import fixture_text, solve, write_script


def scripted(tmp_path: Path, runs_dir: Path, run_id: str, answers: list[str], *extra: str, task: str = "gemm",
             arch: str = "sm_90a"):  # fmt: skip
    script = write_script(tmp_path / f"{run_id}.json", answers)
    return solve([f"task={task}", f"arch={arch}", "llm=scripted", f"llm.path={script}", "eval.gpu=false",
                  f"runs_dir={runs_dir}", f"run_id={run_id}", *extra])  # fmt: skip


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_base_and_full_differ_only_in_the_knowledge_parts(tmp_path: Path, runs_dir: Path, arch: str) -> None:
    sent = {}
    for variant in ("base", "full"):
        code, folder = scripted(tmp_path, runs_dir, f"{variant}-{arch}", ["no answer yet"], f"prompt={variant}",
                                task="attn_bwd", arch=arch)  # fmt: skip
        assert code == 0 and json.loads((folder.path / "config.json").read_text())["prompt"] == variant
        sent[variant] = [m.content for m in folder.turns()[0].messages]
    (base_system, base_task), (full_system, full_task) = sent["base"], sent["full"]
    assert base_task == full_task
    ops = difflib.SequenceMatcher(None, base_system, full_system, autojunk=False).get_opcodes()
    changes = [op for op in ops if op[0] != "equal"]
    assert [op[0] for op in changes] == ["insert"]
    _, _, _, j1, j2 = changes[0]
    assert full_system[j1:j2].strip() == knowledge(Arch(arch), PATTERNS)


def test_a_prompt_variant_is_a_column_of_the_report(tmp_path: Path, runs_dir: Path) -> None:
    for variant in ("base", "full"):
        scripted(tmp_path, runs_dir, variant, [fixture_text("fill_ok.md")], f"prompt={variant}", "max_turns=2",
                 "llm.label=gpt-x")  # fmt: skip
    text = write_report([RunFolder(p).trajectory() for p in sorted(runs_dir.iterdir())], tmp_path / "report",
                        [runs_dir]).read_text()  # fmt: skip
    headline = text.split("## Headline (all tasks)")[1].split("##")[0]
    assert "| model | prompt | arch " in headline
    for variant in ("all", "base", "full"):
        assert f"| gpt-x | {variant}" in headline, variant


def test_an_unverified_attempt_is_told_what_is_known_and_ends_the_run(tmp_path: Path, runs_dir: Path) -> None:
    ok = fixture_text("fill_ok.md")
    code, folder = scripted(tmp_path, runs_dir, "once", [ok, ok, ok], "max_turns=3")
    [turn] = folder.turns()
    assert code == 0 and folder.summary().stop_reason == "unverified"
    assert turn.feedback.startswith("Turn 1 of 3: unverified. What is known: the module assembled")
    assert "otherwise answer with the same kernel" in turn.feedback and "Review the kernel" not in turn.feedback
    code, folder = scripted(tmp_path, runs_dir, "thrice", [ok, ok, ok], "max_turns=3", "unverified_turns=3")
    assert code == 0 and len(folder.turns()) == 3 and folder.summary().stop_reason == "max_turns"


def test_a_label_names_the_model_behind_scripted_answers(tmp_path: Path, runs_dir: Path) -> None:
    code, folder = scripted(tmp_path, runs_dir, "labelled", [fixture_text("fill_ok.md")], "llm.label=some-model-2")
    traj = folder.trajectory()
    assert code == 0 and model(traj) == "some-model-2"
    assert traj.summary.policy.endswith("1 answers of some-model-2)")
    unlabelled = scripted(tmp_path, runs_dir, "plain", [fixture_text("fill_ok.md")])[1]
    assert model(unlabelled.trajectory()) == "scripted"
