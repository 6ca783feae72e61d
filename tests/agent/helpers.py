"""Helpers for the repair-loop tests: fixture answers, a harness that replays recorded evaluations, and
in-process runs of `python -m agent.solve`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from agent.harness import PENDING, PipelineHarness
from agent.solve import execute, prepare
from agent.store import RunFolder
from tasks.catalog import get_task
from tools.pipeline import GPU_STAGES, EvalOptions
from tools.schema import Arch, Evaluation, StageResult, StageState, Status

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agent"
STATIC_STATUSES = {Status.EXTRACT_ERROR, Status.COMPILE_ERROR, Status.ABI_ERROR, Status.UNVERIFIED}
MARKER = re.compile(r"// eval: (\w+)")


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def answer_replaying(name: str) -> str:
    """A well-formed answer (fill_ok.md) tagged with the recorded evaluation the harness should return."""
    return fixture_text("fill_ok.md").replace(".version 8.0", f"// eval: {name}\n.version 8.0", 1)


class RecordedHarness:
    """The real static pipeline for untagged answers; for answers tagged `// eval: NAME`, the recorded
    evaluation NAME from tests/fixtures/agent/evaluations.json, as if a GPU had produced it."""

    def __init__(self, gpu: bool = True):
        self.recorded = {
            k: Evaluation.model_validate(v) for k, v in json.loads(fixture_text("evaluations.json")).items()
        }
        self.real = PipelineHarness(get_task("gemm"), Arch.SM_90A, EvalOptions(), device=0, use_gpu=False)
        self.gpu = gpu
        self.calls: list[tuple[str, str]] = []

    def gpu_unavailable(self) -> str | None:
        return None if self.gpu else "no GPU in this test"

    def _lookup(self, answer: str) -> Evaluation | None:
        m = MARKER.search(answer)
        return self.recorded[m.group(1)] if m else None

    def static(self, answer: str) -> Evaluation:
        self.calls.append(("static", answer))
        recorded = self._lookup(answer)
        if recorded is None:
            return self.real.static(answer)
        if recorded.status in STATIC_STATUSES:
            return recorded
        stages = [s for s in recorded.stages if s.name not in GPU_STAGES]
        stages += [StageResult(name=s, state=StageState.SKIPPED, message=PENDING) for s in GPU_STAGES]
        return Evaluation(task=recorded.task, arch=recorded.arch, status=Status.UNVERIFIED, stages=stages)

    def full(self, answer: str) -> Evaluation:
        self.calls.append(("full", answer))
        return self._lookup(answer) or self.real.full(answer)

    def close(self) -> None:
        pass


def write_script(path: Path, answers: list[Any]) -> Path:
    """A scripted-policy fixture file holding `answers` (strings or answer objects)."""
    path.write_text(json.dumps(answers))
    return path


def solve(args: list[str], harness: Any = None) -> tuple[int, RunFolder]:
    """One in-process run of `python -m agent.solve ARGS`; returns its exit status and run folder."""
    run = prepare(args)
    return execute(run, harness=harness), run.folder
