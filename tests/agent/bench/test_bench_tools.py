"""`python -m agent.bench modes=single,multi,tools` against the local OpenAI-compatible test server, with the real
openai client: the server answers the tools runs with real tool-call replies, and the bench's closing report
puts the three modes side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.bench.__main__ import main
from agent.bench.report import write_report
from agent.loop.store import RunFolder, find_runs, read_trajectories
from tests.agent.helpers import fixture_text
from tests.agent.openai_server import OpenAIServer, tool_agent

GEMM = "gemm_n7168_k5120"


def test_three_modes_side_by_side(runs_dir: Path, capsys: pytest.CaptureFixture, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    with OpenAIServer(responder=tool_agent(fixture_text("fill_ok.md"))) as server:
        args = [f"tasks={GEMM}", "archs=sm_90a", "llm=openai", "llm.model=test-model",
                f"llm.base_url={server.base_url}", "modes=single,multi,tools", "samples=1", "max_turns=2",
                "unverified_turns=2", "eval.gpu=false", f"runs_dir={runs_dir}", "bench_id=b"]  # fmt: skip
        assert main(args) == 0
        tools_requests = [r["body"] for r in server.requests if r["body"].get("tools")]
    out, _ = capsys.readouterr()
    for mode in ("single", "multi", "tools"):
        assert f"| test-model | sm_90a | {mode}" in out, out
    assert len(tools_requests) == 3  # compile, evaluate, submit
    assert [m["role"] for m in tools_requests[-1]["messages"]][-2:] == ["assistant", "tool"]
    tools_run = RunFolder(runs_dir / "b" / f"{GEMM}-sm_90a-tools-s00")
    assert tools_run.config().mode == "tools" and tools_run.config().model_extra["max_evaluations"] == 2
    summary = tools_run.summary()
    assert summary.stop_reason == "submitted" and summary.tools.tool_calls == 3

    trajs, problems = read_trajectories(find_runs([runs_dir / "b"]))
    assert not problems
    report = write_report(trajs, runs_dir / "report", [runs_dir / "b"]).read_text()
    report = "\n".join(" ".join(line.split()) for line in report.splitlines())  # the tables' padding away
    assert "| model | task | arch | k | pass@k | repair@k | tools@k |" in report
    assert f"| test-model | {GEMM} | sm_90a | 2 | - | 0% | 0% |" in report  # unverified: none correct on a CPU
    assert "## Tools mode: what was submitted, and what it spent" in report
    # submitted, not correct (unverified without a GPU), no GPU evaluation, 3 tool calls, none refused
    assert f"| test-model | {GEMM} | sm_90a | 1 | 100% | 0% | 100% | 0.0 | 3.0 | 0.0 | 0 |" in report
    assert "| test-model | full | sm_90a | tools | 2 | 1 | 0% | 100% |" in report
