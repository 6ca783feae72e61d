"""The whole graph, in process, with scripted policies: real ptxas for untagged answers, recorded GPU
evaluations for tagged ones, and the run folder read back as the bench will read it."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

import agent.loop.store
from agent.graph import main as graph_command
from agent.loop.graph import mermaid
from agent.loop.tokens import count_text
from tests.agent.helpers import FIXTURES, RecordedGpu, answer_replaying, fixture_text, solve, write_script
from tools.answer import extract_solution
from tools.evaluation import Status

BASE = ["task=gemm", "arch=sm_90a", "llm=scripted"]


def run(tmp_path: Path, runs_dir: Path, answers: list, *extra: str, gpu=None) -> tuple[int, agent.loop.store.RunFolder]:
    script = write_script(tmp_path / "script.json", answers)
    return solve([*BASE, f"llm.path={script}", f"runs_dir={runs_dir}", *extra], gpu=gpu)


def last_user_message(turn) -> str:
    return turn.messages[-1].content


def test_compile_error_then_fix_with_real_ptxas(runs_dir: Path, capsys: pytest.CaptureFixture) -> None:
    code, folder = solve([*BASE, f"llm.path={FIXTURES / 'compile_fix.json'}", f"runs_dir={runs_dir}", "eval.gpu=false"])
    assert code == 0
    turns = folder.turns()
    assert [t.evaluation.status for t in turns] == [Status.COMPILE_ERROR, Status.UNVERIFIED]
    # The model saw ptxas's diagnostic, with the offending line quoted, before its second answer.
    feedback = last_user_message(turns[1])
    assert "line 16: error: Not a name of any known instruction: 'mda'" in feedback
    assert "mda.lo.s32 %r4, %r2, 256, %r3;" in feedback
    assert turns[1].solution is not None and turns[1].solution.launch.launches[0].kernel == "fill_kernel"
    summary = folder.summary()
    assert summary.outcome == "unverified"
    assert summary.stop_reason == "unverified"  # the script's answers are spent too; no GPU judged the last
    assert summary.statuses == ["compile_error", "unverified"]
    assert summary.best_turn == 2
    attempts = sorted(p.name for p in (folder.path / "attempts").iterdir())
    assert "turn_01.feedback.md" in attempts and "turn_02.ptx" in attempts and "turn_02.launch.json" in attempts
    events = [json.loads(line) for line in folder.events_path.read_text().splitlines()]
    assert {"run.start", "turn.start", "compile.done", "turn.done", "run.done"} <= {e["event"] for e in events}
    out = capsys.readouterr()
    assert "compile_error at compile: line 16" in out.err  # progress on the terminal
    assert f"run folder: {folder.path}" in out.out


def test_compile_error_then_fix_then_pass_stops_on_success(tmp_path: Path, runs_dir: Path) -> None:
    gpu = RecordedGpu()
    answers = [fixture_text("fill_typo.md"), answer_replaying("passed_fast"), answer_replaying("passed_fast")]
    code, folder = run(tmp_path, runs_dir, answers, gpu=gpu)
    assert code == 0
    turns = folder.turns()
    assert [t.evaluation.status for t in turns] == [Status.COMPILE_ERROR, Status.PASSED]
    assert len(gpu.calls) == 1  # the typo never reached the GPU
    summary = folder.summary()
    assert summary.outcome == "solved"
    assert summary.stop_reason == "solved"
    assert summary.first_correct_turn == 2
    assert summary.best_speedup == pytest.approx(0.749 / 0.70)
    assert summary.per_turn[1].targets_met is True


def test_correct_but_not_solved_keeps_going(tmp_path: Path, runs_dir: Path) -> None:
    answers = [answer_replaying(n) for n in ("passed_slow", "passed_no_targets", "mismatch", "passed_fast")]
    code, folder = run(tmp_path, runs_dir, answers, gpu=RecordedGpu())
    assert code == 0
    summary = folder.summary()
    assert summary.statuses == ["passed", "passed", "mismatch", "passed"]
    assert [r.outcome for r in summary.per_turn] == ["correct", "correct", "failed", "solved"]
    assert summary.stop_reason == "solved" and summary.best_turn == 4 and summary.first_correct_turn == 1
    turns = folder.turns()
    slow, no_targets, mismatch = (last_user_message(t) for t in turns[1:])
    assert "the speedup (0.499×) is below the target 1×" in slow
    assert "| your kernel | 1.5000 |" in slow
    assert "wgmma executed: 0 (required)" in no_targets
    assert "29,360,128 of 58,720,256 elements never written" in mismatch


def test_target_speedup_raises_the_bar(tmp_path: Path, runs_dir: Path) -> None:
    answers = [answer_replaying("passed_fast"), answer_replaying("passed_no_targets")]
    code, folder = run(tmp_path, runs_dir, answers, "target_speedup=1.5", gpu=RecordedGpu())
    summary = folder.summary()
    assert code == 0 and summary.outcome == "correct" and summary.stop_reason == "policy_exhausted"
    assert summary.best_turn == 2  # the fastest correct attempt, targets or not
    assert summary.best_speedup == pytest.approx(0.749 / 0.62)


def test_extraction_errors_go_back_to_the_model(tmp_path: Path, runs_dir: Path) -> None:
    ok = fixture_text("fill_ok.md")
    answers = [
        "I would write a kernel here.",
        ok.replace("```json", "```jsn"),
        ok.rsplit("```", 1)[0],  # the last fence missing
        {"text": ok, "finish_reason": "length"},
        ok,
    ]
    code, folder = run(tmp_path, runs_dir, answers, "max_turns=5", "eval.gpu=false")
    turns = folder.turns()
    assert code == 0
    assert [t.evaluation.status for t in turns] == [Status.EXTRACT_ERROR] * 4 + [Status.UNVERIFIED]
    feedback = [last_user_message(t) for t in turns[1:]]
    assert "no ```ptx or ```cuda source block found" in feedback[0]
    assert "no ```json launch spec block found" in feedback[1]
    assert "is never closed (was the answer cut off?)" in feedback[2]
    assert "cut off at the output token limit (finish_reason=length)" in feedback[3]
    assert all(t.solution is None for t in turns[:4])
    assert folder.summary().stop_reason == "max_turns"


@pytest.mark.parametrize("style", ["qwen3", "r1"])
def test_a_reasoning_reply_is_read_outside_its_reasoning(tmp_path: Path, runs_dir: Path, style: str) -> None:
    """Qwen3 and DeepSeek-R1 replies (R1's chat template opens <think> in the prompt) whose reasoning drafts the
    whole answer: drafts alone are no answer, a reply cut off inside them says so, and the answer after the
    reasoning is the one evaluated, not the draft (here with a typo)."""
    ok, typo = fixture_text("fill_ok.md"), fixture_text("fill_typo.md")
    opening = "<think>\n" if style == "qwen3" else ""
    answers = [
        f"{opening}A draft:\n{ok}\n</think>\n\nSee above.",
        f"Sure.\n<think>\nA draft:\n{ok}\nand now",
        f"{opening}A draft:\n{typo}\nThat has a typo.\n</think>\n\n{ok}",
    ]
    code, folder = run(tmp_path, runs_dir, answers, "max_turns=3", "eval.gpu=false")
    turns = folder.turns()
    assert code == 0
    assert [t.evaluation.status for t in turns] == [Status.EXTRACT_ERROR] * 2 + [Status.UNVERIFIED]
    drafts_only, cut_off = (t.evaluation.message for t in turns[:2])
    assert "source block found outside the reasoning (1 inside <think>…</think>, not read)" in drafts_only
    assert "the reply ends inside its reasoning (<think> at line 2 is never closed)" in cut_off
    assert turns[2].solution.source == extract_solution(ok).source != extract_solution(typo).source


@pytest.mark.parametrize(
    ("extra", "reason", "turns"),
    [
        (["max_turns=2"], "max_turns", 2),
        (["max_tokens_total=1"], "token_budget", 1),
        (["max_wall_s=0.1"], "wall_budget", 1),
    ],
)
def test_budget_spent(tmp_path: Path, runs_dir: Path, extra: list[str], reason: str, turns: int) -> None:
    answers = [{"text": "no code", "delay_s": 0.15}] * 3
    code, folder = run(tmp_path, runs_dir, answers, *extra)
    summary = folder.summary()
    assert code == 0
    assert summary.stop_reason == reason
    assert summary.turns == turns == len(folder.turns())


def test_history_modes(tmp_path: Path, runs_dir: Path) -> None:
    answers = ["first", "second", "third"]
    _, full = run(tmp_path, runs_dir / "a", answers, "history=full")
    _, last = run(tmp_path, runs_dir / "b", answers, "history=last")
    full_roles = [m.role for m in full.turns()[2].messages]
    last_turn = last.turns()[2].messages
    assert full_roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert [m.role for m in last_turn] == ["system", "user", "assistant", "user"]
    assert last_turn[2].content == "second"
    assert [m.content for m in full.turns()[2].messages][2::2] == ["first", "second"]


def test_reasoning_and_token_counts_are_recorded(tmp_path: Path, runs_dir: Path) -> None:
    _, folder = run(tmp_path, runs_dir, [{"text": "no code", "reasoning": "Let me think about TMA."}])
    turn = folder.turns()[0]
    assert turn.reasoning == "Let me think about TMA."
    assert turn.prompt_tokens > 1000  # system prompt, knowledge pack and task, counted with tiktoken
    assert turn.completion_tokens == count_text("no code") + count_text("Let me think about TMA.")


def test_turn_recorded_once_when_its_step_is_repeated(
    tmp_path: Path, runs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed after writing turn 2 but before checkpointing that step repeats the step on resume;
    the turn must not be written twice."""
    real = agent.loop.store.RunFolder.write_summary
    calls = []

    def crash_on_second(self, summary):
        calls.append(1)
        if len(calls) == 2:  # turn 2's feedback step, right after it appended the turn
            raise OSError("disk went away")
        real(self, summary)

    monkeypatch.setattr(agent.loop.store.RunFolder, "write_summary", crash_on_second)
    answers = ["one", "two", "three"]
    code, folder = run(tmp_path, runs_dir, answers, "run_id=crashy")
    assert code == 1
    assert [t.index for t in folder.turns()] == [1, 2]
    assert folder.summary().stop_reason == "error"
    code, folder = solve(["resume=crashy", f"runs_dir={runs_dir}"])
    assert code == 0
    assert [t.index for t in folder.turns()] == [1, 2, 3]
    assert [t.response for t in folder.turns()] == answers
    events = [json.loads(line)["event"] for line in folder.events_path.read_text().splitlines()]
    assert "turn.already_recorded" in events and "run.resume" in events


def test_resume_extends_a_finished_run(tmp_path: Path, runs_dir: Path) -> None:
    code, folder = run(tmp_path, runs_dir, ["one", "two", "three"], "run_id=short", "max_turns=1")
    assert code == 0 and folder.summary().stop_reason == "max_turns"
    code, folder = solve(["resume=short", f"runs_dir={runs_dir}", "max_turns=3"])
    assert code == 0
    assert [t.response for t in folder.turns()] == ["one", "two", "three"]
    assert folder.summary().stop_reason == "max_turns"
    config = folder.config()
    assert config.max_turns == 3 and config.model_extra["resumed"][0]["changed"] == {"max_turns": "3"}
    code, folder = solve(["resume=short", f"runs_dir={runs_dir}"])  # finished for good: nothing to do
    assert code == 0 and len(folder.turns()) == 3


def test_replay_redrives_recorded_answers(tmp_path: Path, runs_dir: Path) -> None:
    _, recorded = solve([*BASE, f"llm.path={FIXTURES / 'compile_fix.json'}", f"runs_dir={runs_dir}", "eval.gpu=false"])
    code, replayed = solve(
        ["task=gemm", "arch=sm_90a", "llm=replay", f"llm.run={recorded.path}", f"runs_dir={runs_dir}", "eval.gpu=false"]
    )
    assert code == 0
    assert [t.response for t in replayed.turns()] == [t.response for t in recorded.turns()]
    assert replayed.summary().statuses == ["compile_error", "unverified"]
    assert replayed.summary().stop_reason == "unverified"


def test_graph_drawing_is_current() -> None:
    """agent/loop/GRAPH.md carries the Mermaid drawing of the graph as it is wired today."""
    assert mermaid().strip() in (Path(__file__).resolve().parents[3] / "agent" / "loop" / "GRAPH.md").read_text()


def test_the_graph_command_prints_plain_mermaid(capsys: pytest.CaptureFixture) -> None:
    assert graph_command([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("flowchart TD\n    __start__([START])\n") and "<" not in out and "&" not in out
    assert "    compile -.->|gpu_ready| gpu\n" in out and "    generate --> extract\n" in out
    assert graph_command(["help"]) == 0 and capsys.readouterr().out.startswith("usage: python -m agent.graph\n")
    assert graph_command(["nonsense"]) == 2
    assert capsys.readouterr().err == "error: agent.graph takes no settings (got 'nonsense')\n"


def test_langgraph_json_exposes_the_graph() -> None:
    """LangGraph's tooling (langgraph.json) finds the compiled graph with the loop's nodes."""
    root = Path(__file__).resolve().parents[3]
    path, name = json.loads((root / "langgraph.json").read_text())["graphs"]["repair_loop"].split(":")
    module = importlib.import_module(path.removeprefix("./").removesuffix(".py").replace("/", "."))
    nodes = set(getattr(module, name).get_graph().nodes)
    assert nodes == {"__start__", "generate", "extract", "compile", "gpu", "feedback", "agent", "tools", "finish",
                     "__end__"}  # fmt: skip
