"""Tools mode (mode=tools): the model calls the harness's tools until it submits. Offline with real ptxas and
nvdisasm: the scripted policy's fixtures, the recorded GPU, a run killed with SIGKILL between two tool calls and
resumed, bad calls answered with one line, the budgets, and the real openai client against the local test
server answering with tool-call replies."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from agent.loop.checkpoints import check_database
from agent.loop.records import ReplyStep, StopReason, ToolCall, ToolStep
from agent.loop.store import RunFolder
from agent.loop.toolcalls import NO_CALL, TOOL_NAMES, Refused, parse
from tasks.solutions import reference_answer
from tests.agent.helpers import FIXTURES, RecordedGpu, answer_replaying, fixture_text, solve, write_script
from tests.agent.loop.test_solve_cli import _events, cli
from tests.agent.openai_server import OpenAIServer, tool_calls

SUBMIT_FIXTURE = FIXTURES / "tools" / "gemm_submit.json"
# eval.gpu=false: what these tests assert of a CPU machine holds on a GPU host too (the recorded GPU, where passed,
# stands in for one); docs/loop.md's command, as typed, runs in tests/test_readme.py.
BASE = ["task=gemm", "arch=sm_90a", "mode=tools", "eval.gpu=false", "llm=scripted"]


def call(name: str, answer: str | None = None, **arguments: object) -> dict:
    return {"name": name, "arguments": {**({"answer": answer} if answer is not None else {}), **arguments}}


def run(tmp_path: Path, runs_dir: Path, replies: list, *extra: str, gpu=None):
    script = write_script(tmp_path / "script.json", replies)
    return solve([*BASE, f"llm.path={script}", f"runs_dir={runs_dir}", *extra], gpu=gpu)


def steps_of(folder) -> tuple[list[ReplyStep], list[ToolStep]]:
    steps = folder.steps()
    return [s for s in steps if isinstance(s, ReplyStep)], [s for s in steps if isinstance(s, ToolStep)]


def test_the_done_when_command_submits_through_compile_evaluate_submit(runs_dir: Path) -> None:
    """`python -m agent.solve task=gemm arch=sm_90a mode=tools llm=scripted llm.path=FIXTURE`, as typed."""
    proc = cli(*BASE, f"llm.path={SUBMIT_FIXTURE}", f"runs_dir={runs_dir}", "run_id=tools")
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert "tools mode, up to 40 tool calls" in err and "step 3  finish" in err
    assert "tools: submitted at step 3; 3 replies, 3 tool calls (0 refused), 0 GPU evaluations" in out
    folder = runs_dir / "tools"
    folder = RunFolder(folder)
    replies, calls = steps_of(folder)
    assert [c.name for c in calls] == ["compile", "evaluate", "submit"]
    assert [r.tool_calls[0].name for r in replies] == ["compile", "evaluate", "submit"]
    compiled, evaluated, submitted = calls
    assert "[ok  ] compile" in compiled.result and "[ok  ] sass" in compiled.result  # real ptxas, nvdisasm
    assert "compile runs the static stages only" in compiled.result
    assert "[skip] run" in evaluated.result and "turned off (eval.gpu=false)" in evaluated.result  # said skipped
    assert submitted.cached and submitted.result.endswith("Submitted: the run ends with this answer.")
    (turn,) = folder.turns()
    assert turn.tools.submitted and turn.tools.step == 3 and turn.evaluation.status == "unverified"
    assert turn.response == reference_answer("gemm", "sm_90a")
    summary = folder.summary()
    assert summary.mode == "tools" and summary.stop_reason == StopReason.SUBMITTED and summary.tools.submitted
    lines = (folder.path / "trajectory.jsonl").read_text().splitlines()
    assert [json.loads(line).get("kind", "turn") for line in lines] == ["reply", "tool"] * 3 + ["turn"]
    assert all(json.loads(line)["format_version"] == 2 for line in lines)


def test_killed_between_tool_calls_then_resumed(tmp_path: Path, runs_dir: Path) -> None:
    """SIGKILL while the second reply is on its way (its first tool call done and checkpointed): the resumed run
    asks neither the model nor the harness again for what was recorded, and finishes with every step once."""
    ok = fixture_text("fill_ok.md")
    replies = [
        {"text": "", "tool_calls": [call("compile", ok), call("task")]},
        {"text": "", "delay_s": 3.0, "tool_calls": [call("evaluate", ok)]},
        {"text": "", "tool_calls": [call("submit", ok)]},
    ]
    script = write_script(tmp_path / "script.json", replies)
    proc = cli(*BASE, f"llm.path={script}", f"runs_dir={runs_dir}", "run_id=killed")
    events, trajectory = runs_dir / "killed" / "events.log", runs_dir / "killed" / "trajectory.jsonl"
    deadline = time.monotonic() + 60
    while not trajectory.is_file() or trajectory.read_text().count("\n") < 3:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the second tool call never ran"
        time.sleep(0.02)
    time.sleep(1.0)  # into the second reply's delay: both calls of the first are checkpointed
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    folder = RunFolder.open(runs_dir, "killed")
    before = (folder.path / "trajectory.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in before] == ["reply", "tool", "tool"]
    check_database(folder.checkpoints_path)  # what the loop wrote is what a resume may load

    proc = cli("resume=killed", f"runs_dir={runs_dir}")
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert "resuming killed" in err
    after = (folder.path / "trajectory.jsonl").read_text().splitlines()
    assert after[:3] == before
    replies_, calls = steps_of(folder)
    assert [r.step for r in replies_] == [1, 2, 3]
    assert [(c.step, c.call, c.name) for c in calls] == [(1, 0, "compile"), (1, 1, "task"), (2, 0, "evaluate"),
                                                          (3, 0, "submit")]  # fmt: skip
    done = [e for e in _events(events) if e["event"] == "tool.done"]
    assert [(e["step"], e["tool"]) for e in done] == [(1, "compile"), (2, "evaluate")]  # submit: from the cache
    assert folder.summary().stop_reason == "submitted" and folder.turns()[0].tools.tool_calls == 4


def test_bad_calls_are_one_line_each_and_counted(tmp_path: Path, runs_dir: Path) -> None:
    """Malformed JSON, an unknown tool, a missing answer, a bad sanitizer, a reply without a call, and calls past
    the budget: each answered with one line as its result, counted; the model that never submits ends at the
    budget with its best evaluated answer."""
    ok, typo = fixture_text("fill_ok.md"), fixture_text("fill_typo.md")
    replies = [
        {"tool_calls": [{"name": "evaluate", "arguments": '{"answer": "unterminated'},
                        {"name": "rm_rf", "arguments": {}}, call("compile"), call("sanitize", ok, tool="valgrind")]},
        {"text": "I think the answer is fine."},
        {"tool_calls": [call("compile", typo), call("compile", ok), call("evaluate", ok)]},
        {"text": "no submit", "tool_calls": [call("evaluate", ok), call("profile", ok)]},
    ]  # fmt: skip
    code, folder = run(tmp_path, runs_dir, replies, "max_tool_calls=8")
    assert code == 0
    replies_, calls = steps_of(folder)
    results = {(c.step, c.call): (c.refused, c.result) for c in calls}
    assert results[1, 0][0] == "bad_arguments" and "are not JSON" in results[1, 0][1]
    assert results[1, 1] == ("unknown_tool", f"error: there is no tool 'rm_rf'; the tools are {', '.join(TOOL_NAMES)}")
    assert results[1, 2][0] == "bad_arguments" and "compile needs `answer`" in results[1, 2][1]
    assert results[1, 3][0] == "bad_arguments" and "'valgrind'" in results[1, 3][1]
    assert all("\n" not in line for why, line in results.values() if why)
    assert replies_[2].notice == NO_CALL  # the reply without a call was told so
    # 4 + 1 (no call) + 3 = 8 calls: the budget asks for a submit; the last reply's calls are refused.
    assert replies_[3].notice.startswith("The budget is spent: the tool calls (max_tool_calls)")
    assert results[4, 0][0] == results[4, 1][0] == "budget" and "only submit(answer) runs now" in results[4, 0][1]
    (turn,) = folder.turns()
    assert not turn.tools.submitted and turn.tools.budget == "tool_budget"
    assert turn.tools.tool_calls == 10 and turn.tools.refused == 7
    assert turn.evaluation.status == "unverified" and turn.tools.step == 3  # the best evaluated: fill_ok
    assert turn.response == ok and "Not submitted" in turn.feedback
    summary = folder.summary()
    assert summary.stop_reason == "tool_budget" and summary.tools.submitted is False


def test_the_evaluation_budget_on_a_gpu(tmp_path: Path, runs_dir: Path) -> None:
    """GPU evaluations are counted (a repeated answer is free), the budget asks for a submit, and the submitted
    answer is evaluated as the final one even past it."""
    slow, fast = answer_replaying("passed_slow"), answer_replaying("passed_fast")
    replies = [
        {"tool_calls": [call("evaluate", slow), call("evaluate", slow)]},
        {"tool_calls": [call("profile", fast)]},
        {"tool_calls": [call("sanitize", fast, tool="racecheck"), call("submit", fast)]},
    ]
    gpu = RecordedGpu()
    code, folder = run(tmp_path, runs_dir, replies, "max_evaluations=2", gpu=gpu)
    assert code == 0
    _, calls = steps_of(folder)
    assert [c.gpu_evaluation for c in calls] == [True, False, True, False, True]
    assert calls[1].cached and calls[3].refused == "budget"
    assert len(gpu.calls) == 3
    (turn,) = folder.turns()
    assert turn.tools.submitted and turn.tools.budget == "evaluation_budget" and turn.tools.evaluations == 3
    assert folder.summary().outcome == "solved" and folder.summary().stop_reason == "submitted"


def test_never_submitting_ends_with_the_best_evaluated_answer(tmp_path: Path, runs_dir: Path) -> None:
    slow, fast = answer_replaying("passed_slow"), answer_replaying("mismatch")
    replies = [{"tool_calls": [call("evaluate", slow)]}, {"tool_calls": [call("evaluate", fast)]}]
    code, folder = run(tmp_path, runs_dir, replies, gpu=RecordedGpu())
    assert code == 0
    (turn,) = folder.turns()
    assert turn.response == slow and turn.evaluation.status == "passed" and not turn.tools.submitted
    assert folder.summary().stop_reason == "policy_exhausted"


def test_the_reference_submits_in_tools_mode(runs_dir: Path) -> None:
    code, folder = solve([*BASE[:4], "llm=reference", f"runs_dir={runs_dir}"])
    assert code == 0
    _, calls = steps_of(folder)
    assert [c.name for c in calls] == ["compile", "evaluate", "submit"]
    assert folder.summary().tools.submitted


def test_openai_tool_call_replies_from_the_local_server(tmp_path: Path, runs_dir: Path, monkeypatch) -> None:
    """The real openai client: the tools go out in the request, the calls come back as tool_calls, and the next
    request carries the assistant's calls and each result as a `tool` message."""
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    ok = fixture_text("fill_ok.md")

    with OpenAIServer() as server:
        server.script.extend([tool_calls(("compile", {"answer": ok}), ("evaluate", "{bad json")),
                              tool_calls(("submit", {"answer": ok}))])  # fmt: skip
        code, folder = solve([*BASE[:4], "llm=openai", "llm.model=test-model", f"llm.base_url={server.base_url}",
                              f"runs_dir={runs_dir}"])  # fmt: skip
        assert code == 0
        first, second = (r["body"] for r in server.requests)
    assert [t["function"]["name"] for t in first["tools"]] == list(TOOL_NAMES)
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool", "tool"]
    assert second["messages"][2]["tool_calls"][1]["function"]["arguments"] == "{bad json"
    assert second["messages"][4]["tool_call_id"] == "call_1" and "are not JSON" in second["messages"][4]["content"]
    assert folder.summary().tools.submitted and folder.summary().prompt_tokens == 2 * 1234


@pytest.mark.parametrize("arguments", ["[1, 2]", "null", '"text"', "1e999999", "[" * 10_000])
def test_arguments_that_are_no_object_are_refused(arguments: str) -> None:
    refused = parse(ToolCall(id="c", name="compile", arguments=arguments))
    assert isinstance(refused, Refused) and refused.why == "bad_arguments" and "\n" not in refused.line


def test_a_recorded_tools_run_replays_through_todays_harness(tmp_path: Path, runs_dir: Path) -> None:
    ok = fixture_text("fill_ok.md")
    replies = [{"tool_calls": [call("compile", ok), {"name": "nope"}]}, {"tool_calls": [call("submit", ok)]}]
    code, recorded = run(tmp_path, runs_dir, replies, "run_id=recorded")
    assert code == 0
    code, again = solve([*BASE[:4], "llm=replay", "llm.run=recorded", f"runs_dir={runs_dir}", "run_id=again"])
    assert code == 0
    assert [(s.kind, getattr(s, "name", None)) for s in again.steps()] == [
        (s.kind, getattr(s, "name", None)) for s in recorded.steps()
    ]
    assert again.summary().tools.submitted and "2 replies" in again.summary().policy


def test_a_seeded_tools_run_is_refused(runs_dir: Path, capsys) -> None:
    from agent.solve import main

    assert main([*BASE, f"llm.path={SUBMIT_FIXTURE}", "seed.run=x", "seed.turn=1", f"runs_dir={runs_dir}"]) == 2
    assert "mode=tools starts from the task alone" in capsys.readouterr().err


def test_a_step_written_but_not_checkpointed_is_read_back_not_run_again(
    tmp_path: Path, runs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop crashes right after the evaluate's line is written, before its checkpoint: the resumed run
    takes the result from trajectory.jsonl, and the GPU is not asked again."""
    fast = answer_replaying("passed_fast")
    replies = [{"tool_calls": [call("evaluate", fast)]}, {"tool_calls": [call("submit", fast)]}]
    written = RunFolder.append_step

    def crash_after_the_evaluate(self: RunFolder, step) -> None:
        written(self, step)
        if isinstance(step, ToolStep) and step.name == "evaluate":
            raise RuntimeError("killed after the write")

    gpu = RecordedGpu()
    monkeypatch.setattr(RunFolder, "append_step", crash_after_the_evaluate)
    code, folder = run(tmp_path, runs_dir, replies, "run_id=torn", gpu=gpu)
    assert code == 1 and len(gpu.calls) == 1
    monkeypatch.setattr(RunFolder, "append_step", written)
    code, _ = solve(["resume=torn", f"runs_dir={runs_dir}"], gpu=gpu)
    assert code == 0 and len(gpu.calls) == 1  # the evaluate's result read back; the submit answered from it
    _, calls = steps_of(folder)
    assert [(c.step, c.name, c.cached) for c in calls] == [(1, "evaluate", False), (2, "submit", True)]
    assert folder.summary().outcome == "solved" and folder.turns()[0].tools.evaluations == 1
    assert any(e["event"] == "step.already_recorded" and e.get("call") == 0 for e in _events(folder.events_path))
