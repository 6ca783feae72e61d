"""`python -m agent.replay` on the fixture run whose attempts carry real solutions (fill kernels, compiled
by the real ptxas): without a GPU here, and with a scripted GPU that disagrees with the recording.

Recorded (tests/fixtures/runs/make_runs.py, write_replay): 1 compile_error · 2 passed 1.07× · 3 no answer
· 4 passed 0.5× · 5 mismatch, the GPU verdicts on an H100."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent.bench.replay import flag, render, replay
from agent.loop.store import RunFolder
from agent.replay import main
from tasks.schema import Arch
from tests.dask_cluster import Cluster
from tests.fixtures.runs import make_runs
from tools.evaluation import StageResult, StageState, Status
from tools.gpu.base import GpuOutcome
from tools.gpu.metrics import GpuMetrics, TimingMetrics

RUN = Path(make_runs.__file__).parent / "replay" / "gemm-replay"


class ScriptedGpu:
    """Stands in for a GpuService: answers each evaluation with the next scripted outcome."""

    def __init__(self, outcomes: list[GpuOutcome]):
        self.outcomes = outcomes
        self.calls = 0

    def unavailable_reason(self, arch: Arch) -> str | None:
        return None

    def device_info(self) -> None:
        return None

    def close(self) -> None:
        pass

    def evaluate(self, task, arch, module, options) -> GpuOutcome:
        assert module.cubin and module.plan.launches  # the static stages ran for real
        self.calls += 1
        return self.outcomes.pop(0)


def gpu_outcome(status: Status, speedup: float | None = None, interval: list[float] | None = None) -> GpuOutcome:
    check = StageState.PASSED if status is Status.PASSED else StageState.FAILED
    stages = [StageResult(name="run", state=StageState.PASSED), StageResult(name="check", state=check)]
    metrics = GpuMetrics()
    if speedup:
        metrics.timing = TimingMetrics(kernel_ms=0.749 / speedup, baseline_ms=0.749, speedup=speedup, interval=interval)
        stages.append(StageResult(name="time", state=StageState.PASSED))
    return GpuOutcome(status=status, message=status.value, stages=stages, metrics=metrics, device="NVIDIA H200")


def test_divergences_against_a_scripted_gpu() -> None:
    gpu = ScriptedGpu([
        gpu_outcome(Status.MISMATCH),  # turn 2: passed on the H100, wrong here
        gpu_outcome(Status.PASSED, 0.8, [0.79, 0.82]),  # turn 4: 0.5× → 0.8×, ×1.6; paired here, ±2.5%
        gpu_outcome(Status.MISMATCH),  # turn 5: as recorded
    ])  # fmt: skip
    traj = RunFolder(RUN).trajectory()
    rows = replay(traj, gpu)
    assert gpu.calls == 3  # turn 1 failed to compile again; turn 3 had no solution
    assert [(r.turn, r.recorded.status, r.now.status, r.flag) for r in rows] == [
        (1, "compile_error", "compile_error", ""),
        (2, "passed", "mismatch", "DIVERGED"),
        (4, "passed", "passed", "speedup moved ×1.60 (beyond ±7.5%)"),
        (5, "mismatch", "mismatch", ""),
    ]
    # The recording predates paired timing: it counts the unpaired spread (5%) beside this one's 2.5%.
    assert (rows[2].ratio, rows[2].combined_spread) == (pytest.approx(1.6), pytest.approx(0.075))
    assert (rows[2].recorded.spread, rows[2].now.spread) == (None, pytest.approx(0.025))
    assert rows[1].ratio is None and rows[1].combined_spread is None
    line = next(x for x in render(traj, rows).splitlines() if x.startswith("| 4 "))
    assert "| 0.800×  | NVIDIA H200 | 1.600 (±7.5%) | speedup moved ×1.60 (beyond ±7.5%) |" in line
    assert rows[1].recorded.device == "NVIDIA H100 80GB HBM3" and rows[1].now.device == "NVIDIA H200"
    assert rows[2].now.speedup == 0.8


def test_cli_without_a_gpu(capsys: pytest.CaptureFixture) -> None:
    assert main([str(RUN), "--device", "0"]) == 0
    out = capsys.readouterr().out
    assert "replay gemm-replay (gemm_n7168_k5120 on sm_90a): 4 attempts with a solution, 1 without" in out
    assert out.startswith("GPU stages for sm_90a: skipped (no usable NVIDIA GPU here")
    row = "| 2    | passed        | 1.070×  | NVIDIA H100 80GB HBM3 | unverified    | -       | -      | -     |"
    assert row + " not verified here |" in out
    assert "3 not verified here" in out


def test_the_gpu_reason_is_said_once(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for name in ("a", "b", "c"):
        shutil.copytree(RUN, tmp_path / name)
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("\nreplay ") == 3 and out.count("GPU stages") == 1


def test_cli_json(capsys: pytest.CaptureFixture) -> None:
    assert main([str(RUN.parent), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["turn"] for r in rows] == [1, 2, 4, 5]
    assert rows[1] == {
        "run_id": "gemm-replay",
        "turn": 2,
        "recorded": {"status": "passed", "speedup": 1.07, "device": "NVIDIA H100 80GB HBM3", "spread": None},
        "now": {"status": "unverified", "speedup": None, "device": None, "spread": None},
        "ratio": None,
        "combined_spread": None,
        "flag": "not verified here",
    }


def test_cli_on_a_dask_pool(dask_gpus: Cluster, capsys: pytest.CaptureFixture) -> None:
    """Through the pool's sm_90a worker, which has no GPU either: on for the pool, skipped by the worker."""
    assert main([str(RUN), f"pool={dask_gpus.address}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GPU stages for sm_90a: on\n")
    assert "4 attempts with a solution, 1 without (not replayed)\n" in out
    assert "3 not verified here" in out


def test_cli_without_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no run folders under" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("recorded", "now", "expected"),
    [
        ("P1.0T", "P1.05T", ""),  # within 10%
        ("P1.0T", "P1.2T", "speedup moved ×1.20 (beyond ±10.0%)"),  # both unpaired: 5% each
        ("P1.0T", "P0.8T", "speedup moved ×0.80 (beyond ±10.0%)"),
        ("P1.0T", "MM", "DIVERGED"),
        ("MM", "P1.0T", "DIVERGED"),
        ("P1.0T", "CE", "DIVERGED"),  # today's toolchain refuses a kernel that passed
        ("P1.0T", "UV", "not verified here"),
        ("MM", "UV", "not verified here"),
        ("UV", "P1.0T", "verified here"),
        ("UV", "MM", "verified here"),
        ("CE", "UV", "status changed"),
        ("MM", "TO", "status changed"),
        ("MM", "MM", ""),
    ],
)
def test_flag(recorded: str, now: str, expected: str) -> None:
    def evaluation(code: str):
        return make_runs.evaluation(make_runs.GEMM, code)

    assert flag(evaluation(recorded), evaluation(now)) == expected


@pytest.mark.parametrize(
    ("recorded", "now", "expected"),
    [
        ((1.0, 0.99, 1.01), (1.03, 1.02, 1.04), "speedup moved ×1.03 (beyond ±2.0%)"),  # intervals apart
        ((1.0, 0.99, 1.01), (1.015, 1.005, 1.025), ""),  # they overlap: within ±1% + ±0.99%
        ((1.0, 0.98, 1.005), (0.985, 0.97, 0.99), ""),  # a lopsided interval counts its wider side (2%)
        ((1.0, 0.995, 1.005), (1.0, 1.0, 1.0), ""),
    ],
)
def test_flag_beyond_the_combined_spread_of_paired_measurements(recorded, now, expected) -> None:
    def evaluation(speedup: float, low: float, high: float):
        ev = make_runs.evaluation(make_runs.GEMM, f"P{speedup}T")
        return ev.model_copy(update={"speedup_interval": [low, high]})

    assert flag(evaluation(*recorded), evaluation(*now)) == expected
