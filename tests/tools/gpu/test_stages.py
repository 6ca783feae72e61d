"""One list of stages and one place that orders the GPU ones (tools/gpu/stages.py): every stage is static, in the GPU
sequence or a diagnosis, exactly once; which of the sequence an attempt gets follows its options (and, for the perf
pass under profile=auto, its speedup); the diagnoses follow how the sequence ended. And the floors the GPU side keeps:
the worker process loads no caller's library, the Dask worker nothing of the pipeline above it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tools.evaluation import Stage, Status
from tools.gpu.stages import DIAGNOSES, GPU_STAGES, IN_WORKER, after_worker, diagnoses, in_worker, planned, skipped
from tools.options import EvalOptions, Profile
from tools.pipeline import FAILURE_STATUS

R, C, T, P, F = Stage.RUN, Stage.CHECK, Stage.TIME, Stage.PROFILE, Stage.PERF


def test_every_stage_has_one_place() -> None:
    listed = [*FAILURE_STATUS, *GPU_STAGES, *DIAGNOSES]
    assert sorted(listed) == sorted(Stage) and len(set(listed)) == len(listed)
    assert GPU_STAGES[: len(IN_WORKER)] == IN_WORKER  # the worker's stages come first: one request answers them


@pytest.mark.parametrize(
    ("options", "speedup", "worker", "after"),
    [
        (EvalOptions(), None, [R, C, T, P], []),  # auto: not timed, so no perf pass
        (EvalOptions(), 0.7, [R, C, T, P], [F]),  # auto: below the bar (1.0 outside the loop)
        (EvalOptions(), 1.2, [R, C, T, P], []),
        (EvalOptions(perf_below=1.5), 1.2, [R, C, T, P], [F]),
        (EvalOptions(profile=Profile.PERF, time=False), None, [R, C, P], [F]),
        (EvalOptions(profile=Profile.COUNTS), 0.5, [R, C, T, P], []),
        (EvalOptions(profile=Profile.OFF), 0.5, [R, C, T], []),
    ],
)
def test_what_an_attempt_runs_follows_its_options(options, speedup, worker, after) -> None:
    assert in_worker(options) == worker
    assert after_worker(options, speedup) == after
    assert planned(options, speedup) == worker + after
    # where the worker could not count (CUPTI), the service's Nsight Compute counts first, then the perf pass
    fallback = [P] if P in worker else []
    assert after_worker(options, speedup, counted=False) == fallback + after


def test_a_failing_check_pays_for_neither_timing_nor_counting() -> None:
    order = in_worker(EvalOptions(profile=Profile.PERF))
    assert order.index(C) < order.index(T) < order.index(P)  # the worker stops at the first failing stage


def test_the_diagnoses_follow_how_the_sequence_ended() -> None:
    asked = EvalOptions(memcheck=True, racecheck=True)
    assert diagnoses(Status.RUNTIME_ERROR, "CUDA_ERROR_ILLEGAL_ADDRESS", EvalOptions()) == [Stage.MEMCHECK]
    assert diagnoses(Status.RUNTIME_ERROR, None, asked) == []  # the worker died, or a launch was refused
    assert diagnoses(Status.MISMATCH, None, EvalOptions()) == []
    assert diagnoses(Status.MISMATCH, None, asked) == [Stage.RACECHECK]
    assert diagnoses(Status.PASSED, None, EvalOptions()) == []
    assert diagnoses(Status.PASSED, None, asked) == [Stage.MEMCHECK]
    assert diagnoses(Status.TIMEOUT, None, asked) == []


def test_an_attempt_that_cannot_run_is_skipped_in_what_a_default_attempt_runs_untimed() -> None:
    outcome = skipped("no GPU here")
    assert outcome.status is Status.UNVERIFIED
    assert [(s.name, s.state, s.message) for s in outcome.stages] == [
        (s, "skipped", "no GPU here") for s in (R, C, T, P)
    ]


def loaded(module: str) -> set[str]:
    """The modules a fresh interpreter holds after importing `module`."""
    code = f"import sys, {module}; print(' '.join(sys.modules))"
    return set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())


def test_the_worker_process_stays_light() -> None:
    modules = loaded("tools.gpu.worker")
    assert "torch" in modules and "tools.gpu.timing" in modules
    heavy = {m for m in modules if m.split(".")[0] in ("agent", "langgraph", "openai", "distributed", "fastapi")}
    assert heavy | ({"tools.pipeline", "tools.gpu.service"} & modules) == set()


def test_the_dask_worker_needs_nothing_of_the_pipeline() -> None:
    assert "tools.pipeline" not in loaded("tools.gpu.dask_worker")
