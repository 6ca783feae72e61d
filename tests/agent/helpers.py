"""Helpers for the repair-loop tests: fixture answers, a GPU that replays recorded evaluations, and
in-process runs of `python -m agent.solve`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from agent.loop.command_line import from_command_line
from agent.loop.run import execute
from agent.loop.store import RunFolder
from tasks.schema import Arch, Task
from tools.evaluation import Evaluation
from tools.gpu.base import CompiledModule, GpuOutcome
from tools.gpu.metrics import GpuMetrics
from tools.gpu.stages import GPU_STAGES
from tools.options import EvalOptions

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agent"
MARKER = re.compile(r"// eval: (\w+)")


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def answer_replaying(name: str) -> str:
    """A well-formed answer (fill_ok.md) tagged with the recorded evaluation the GPU should return."""
    return fixture_text("fill_ok.md").replace(".version 8.0", f"// eval: {name}\n.version 8.0", 1)


def recorded_evaluations() -> dict[str, Evaluation]:
    return {k: Evaluation.model_validate(v) for k, v in json.loads(fixture_text("evaluations.json")).items()}


class RecordedGpu:
    """A `Gpu` whose GPU stages are recorded ones: for a module whose PTX is tagged `// eval: NAME`, the GPU
    stages of evaluation NAME from tests/fixtures/agent/evaluations.json, as if a GPU had produced them.
    The static stages before it are the real pipeline's (real ptxas)."""

    def __init__(self, available: bool = True):
        self.recorded = recorded_evaluations()
        self.available = available
        self.calls: list[str] = []  # the PTX of each module evaluated
        self.asked = 0  # how often a caller asked whether it can run an arch

    def unavailable_reason(self, arch: Arch) -> str | None:
        self.asked += 1
        return None if self.available else "no GPU in this test"

    def evaluate(self, task: Task, arch: Arch, module: CompiledModule, options: EvalOptions) -> GpuOutcome:
        self.calls.append(module.ptx)
        m = MARKER.search(module.ptx)
        assert m, "an untagged module reached the recorded GPU"
        ev = self.recorded[m.group(1)]
        stages = [s for s in ev.stages if s.name in GPU_STAGES]
        return GpuOutcome(status=ev.status, message=ev.message, stages=stages, metrics=GpuMetrics.of(ev),
                          device=ev.device)  # fmt: skip

    def device_info(self) -> None:
        return None

    def close(self) -> None:
        pass


def write_script(path: Path, answers: list[Any]) -> Path:
    """A scripted-policy fixture file holding `answers` (strings or answer objects)."""
    path.write_text(json.dumps(answers))
    return path


def solve(args: list[str], gpu: Any = None) -> tuple[int, RunFolder]:
    """One in-process run of `python -m agent.solve ARGS`; returns its exit status and run folder."""
    run = from_command_line(args)
    return execute(run, gpu=gpu), run.folder
