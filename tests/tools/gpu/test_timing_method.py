"""The timing method's order (tools/gpu/timing.py time_attempt) without a GPU: an attempt that logs what the method
asks of it, and the CUDA-event measurements replaced by run times given here (the statistics on them are the real
ones). Paired with the baseline, the paper's figure in the same window, then a re-check; a speedup above the ceiling
re-measured beside a baseline prepared on the re-check's inputs, then re-checked once more; without a baseline, the
candidate alone and a re-check. The GPU tests (tests/gpu/test_harness_gpu.py) run the same method on the H200."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from tasks import get_task
from tools.gpu import timing
from tools.gpu.cupti_durations import DurationsUnavailable, Traced
from tools.gpu.gpu_state import GpuSampler
from tools.options import EvalOptions, SpeedupFigure

GEMM = get_task("gemm")


class LoggedAttempt:
    """What the method asks of an attempt, logged; `baseline_fails`: the library cannot be prepared."""

    def __init__(self, baseline_fails: bool = False):
        self.log: list[str] = []
        self.baseline_fails = baseline_fails
        self.runs = 0

    def launch_sequence(self) -> None:
        self.log.append("candidate")

    def timing_inputs(self) -> dict:
        self.log.append("inputs")
        return {"seed": "timing"}

    def baseline(self, inputs: dict):
        self.log.append(f"baseline on {inputs['seed']}")
        if self.baseline_fails:
            raise RuntimeError("cuBLAS is not here")
        return (lambda: self.log.append("library")), {"C": 1e-3}

    def recheck(self, offset: int):
        self.log.append(f"recheck +{offset}")
        return 42 + offset, {"seed": f"recheck +{offset}"}

    @contextmanager
    def faults(self, what: str):
        self.log.append(f"[{what}]")
        yield

    def part(self, part: str) -> None:
        self.log.append(f"part {part}")

    def executed(self, runs: int) -> None:
        self.runs += runs


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch):
    """The candidate at 1 ms, the library at `library_ms`: each measurement runs both once and reads those times."""
    library_ms = {"value": 0.8}

    def paired(candidate, baseline, flush, options, phase, paper_sets):
        library_ms["paper_sets"] = paper_sets  # the paper's trials the plan leaves budget for
        candidate(), baseline()
        blocks = [([1.0] * 3, [library_ms["value"]] * 3) for _ in range(options.blocks)]
        plan = timing.RunPlan(blocks=options.blocks, block_runs=3, trials=2, reps=4, reduced=False)
        return timing.summarize_pairs(blocks, 10, False), plan

    def trials(fn, flush, plan, warmup):
        fn()
        return timing.summarize_runs([[1.0] * plan.reps] * plan.trials, warmup)

    def cold(fn, flush, options):
        fn()
        return timing.summarize_runs([[2.0] * 5] * 3, 7)

    monkeypatch.setattr(timing, "time_paired", paired)
    monkeypatch.setattr(timing, "time_trials", trials)
    monkeypatch.setattr(timing, "time_cold", cold)
    return library_ms


BENCH = timing.Bench(flush=lambda: None, sampler=GpuSampler(None, "no NVML in this test"))
PAIRED = ["part time", "[timing the candidate beside the baseline]", "candidate", "library"]
PAPER = ["[timing the candidate alone (the paper's method)]", "candidate", "library"]


def test_paired_then_the_papers_figure_then_a_recheck(measured) -> None:
    attempt = LoggedAttempt()
    result = timing.time_attempt(attempt, BENCH, GEMM, EvalOptions())
    recheck = f"recheck +{timing.RECHECK_SEED_OFFSET}"
    assert attempt.log == ["inputs", "baseline on timing", *PAIRED, *PAPER, recheck]
    t = result.metrics
    assert (t.kernel_ms, t.baseline_ms, t.speedup, t.interval, t.flags) == (1.0, 0.8, 0.8, [0.8, 0.8], [])
    assert t.tflops == pytest.approx(2 * 8192 * 7168 * 5120 / 1e-3 / 1e12)
    assert result.detail["recheck_seed"] == 42 + timing.RECHECK_SEED_OFFSET
    assert result.detail["first"] is None and result.detail["baseline_rel_l2"] == {"C": 1e-3}
    assert result.message.splitlines()[0].startswith("paired (30 blocks × 3 runs each, alternating)")
    assert attempt.runs == 10 + 30 * 3 + 2 * 4  # warm-up, the paired blocks, the paper's trials
    assert measured["paper_sets"] == 1


def test_a_speedup_above_the_ceiling_is_measured_again_on_the_rechecks_inputs_and_rechecked(measured) -> None:
    measured["value"] = 4.0  # 4× the library
    attempt = LoggedAttempt()
    result = timing.time_attempt(attempt, BENCH, GEMM, EvalOptions(speedup_ceiling=3.0))
    first, again = timing.RECHECK_SEED_OFFSET, timing.REMEASURE_SEED_OFFSET
    assert attempt.log == ["inputs", "baseline on timing", *PAIRED, *PAPER, f"recheck +{first}",
                           f"baseline on recheck +{first}", *PAIRED, f"recheck +{again}"]  # fmt: skip
    assert result.metrics.flags == [
        "above the ceiling — 4.00× cuBLAS exceeds 3×: re-measured on fresh inputs and re-checked, it stands"
    ]
    assert result.detail["first"]["speedup"] == 4.0
    assert result.message.splitlines()[-1] == (
        "4.000× at first, above the 3× ceiling: re-measured on fresh inputs and re-checked"
    )


def test_without_a_baseline_the_candidate_is_timed_alone_and_rechecked(measured) -> None:
    attempt = LoggedAttempt(baseline_fails=True)
    result = timing.time_attempt(attempt, BENCH, GEMM, EvalOptions())
    assert attempt.log == ["inputs", "baseline on timing", "part time", "[timing the candidate]", "candidate",
                           f"recheck +{timing.RECHECK_SEED_OFFSET}"]  # fmt: skip
    assert result.metrics.model_dump(exclude_none=True) == {"kernel_ms": 2.0, "tflops": pytest.approx(300.6, 1e-3),
                                                            "flags": []}  # fmt: skip
    assert result.message.endswith("\nbaseline unavailable: cuBLAS is not here")


# ------------------------------------------------------------------------- eval.speedup=paper: the paper's headline


class LoggedTimer:
    """The worker's CUPTI timer, stood in: each function run once (the attempt logs it), read at `ms` per function in
    order; `fails`: CUPTI cannot time here, for that reason."""

    def __init__(self, ms: list[float], fails: str | None = None):
        self.ms, self.fails = ms, fails

    def time(self, functions, flush, trials: int, reps: int) -> list[Traced]:
        if self.fails:
            raise DurationsUnavailable(self.fails)
        for fn in functions:
            fn()
        return [Traced(per_trial=[[ms] * reps] * trials, span_per_trial=[[ms * 1.01] * reps] * trials,
                       kernels=["k"], kernels_vary=False) for ms in self.ms]  # fmt: skip


@pytest.fixture
def warmed(monkeypatch: pytest.MonkeyPatch):
    """A warm-up that runs the function once and estimates 1 ms (the re-measure of the paper's figure warms both)."""

    def warm(fn, flush, options):
        fn()
        return 1.0, 12

    monkeypatch.setattr(timing, "warm", warm)


PAPER_OPTIONS = EvalOptions(speedup=SpeedupFigure.PAPER)
CUPTI = ["[timing the candidate alone by CUPTI (the paper's method)]", "candidate", "library"]


def with_timer(timer: LoggedTimer | None) -> timing.Bench:
    return timing.Bench(flush=lambda: None, sampler=GpuSampler(None, "no NVML in this test"), kernel_timer=timer)


def test_under_paper_cupti_times_each_alone_after_the_events_and_its_figure_is_the_headline(measured) -> None:
    attempt = LoggedAttempt()
    result = timing.time_attempt(attempt, with_timer(LoggedTimer([1.0, 0.9])), GEMM, PAPER_OPTIONS)
    assert attempt.log == ["inputs", "baseline on timing", *PAIRED, *PAPER, *CUPTI,
                           f"recheck +{timing.RECHECK_SEED_OFFSET}"]  # fmt: skip
    t = result.metrics
    assert (t.kernel_ms, t.baseline_ms, t.speedup, t.interval) == (1.0, 0.9, 0.9, None)  # no interval: the paper's
    assert (t.figure, t.other_speedup) == (SpeedupFigure.PAPER, 0.8)  # the paired figure beside it
    assert t.tflops == pytest.approx(2 * 8192 * 7168 * 5120 / 1e-3 / 1e12)
    paper = result.detail["paper"]
    assert (paper["source"], paper["speedup"], paper["kernel"]["kernels"]) == ("cupti", 0.9, ["k"])
    assert paper["kernel"]["span_ms"] == pytest.approx(1.01)
    assert result.detail["paper_events"]["speedup"] == 1.0 and result.detail["paper_events"]["source"] == "events"
    assert result.detail["speedup_figure"] == "paper" and result.detail["paired"]["speedup"] == 0.8
    lines = result.message.splitlines()
    assert lines[0].startswith("paper's method (each alone, 2 × 4 runs, CUPTI kernel durations)")
    assert lines[0].endswith("0.900× — the headline figure") and lines[1].startswith("paired (30 blocks")
    assert lines[2].startswith("cross-check, the same by CUDA events (each alone, 2 × 4 runs)")
    assert attempt.runs == 10 + 30 * 3 + 2 * 4 + 2 * 4  # warm-up, the paired blocks, the trials by events, by CUPTI
    assert measured["paper_sets"] == 2


@pytest.mark.parametrize(
    ("timer", "why"), [(LoggedTimer([1.0, 0.9], fails="no CUDA 13 driver"), "no CUDA 13 driver"),
                       (None, "this worker has no CUPTI timer")],
)  # fmt: skip
def test_under_paper_without_cupti_the_events_figure_is_the_headline_and_says_why(measured, timer, why) -> None:
    attempt = LoggedAttempt()
    result = timing.time_attempt(attempt, with_timer(timer), GEMM, PAPER_OPTIONS)
    paper = result.detail["paper"]
    assert (paper["source"], paper["cupti_unavailable"], paper["speedup"]) == ("events", why, 1.0)
    assert result.detail["paper_events"] is None
    assert (result.metrics.speedup, result.metrics.other_speedup, result.metrics.interval) == (1.0, 0.8, None)
    assert result.message.splitlines()[0].endswith(f"1.000× (CUDA events: {why}) — the headline figure")


def test_under_paired_the_cupti_timer_is_not_used(measured) -> None:
    attempt = LoggedAttempt()
    result = timing.time_attempt(attempt, with_timer(LoggedTimer([1.0, 0.9])), GEMM, EvalOptions())
    assert "speedup_figure" not in result.detail and result.detail["paper"]["source"] == "events"
    assert (result.metrics.figure, result.metrics.other_speedup, result.metrics.speedup) == (None, None, 0.8)


def test_under_paper_a_headline_above_the_ceiling_is_remeasured_the_papers_way(measured, warmed) -> None:
    attempt = LoggedAttempt()
    options = EvalOptions(speedup=SpeedupFigure.PAPER, speedup_ceiling=3.0)
    result = timing.time_attempt(attempt, with_timer(LoggedTimer([1.0, 4.0])), GEMM, options)
    first, again = timing.RECHECK_SEED_OFFSET, timing.REMEASURE_SEED_OFFSET
    assert attempt.log == ["inputs", "baseline on timing", *PAIRED, *PAPER, *CUPTI, f"recheck +{first}",
                           f"baseline on recheck +{first}", "part time", "[warming up the candidate and the baseline]",
                           "candidate", "library", *PAPER, *CUPTI, f"recheck +{again}"]  # fmt: skip
    assert result.detail["first"]["speedup"] == 4.0 and result.detail["first"]["source"] == "cupti"
    assert result.metrics.flags == [
        "above the ceiling — 4.00× cuBLAS exceeds 3×: re-measured on fresh inputs and re-checked, it stands"
    ]
    assert result.metrics.other_speedup == 0.8  # the paired figure: measured once, below the ceiling


def test_under_paper_the_noisy_flag_reads_the_trials_spread(measured, monkeypatch) -> None:
    def trials(fn, flush, plan, warmup):  # the trials' medians 1.0 and 1.1: a 9.5% spread
        fn()
        return timing.summarize_runs([[1.0] * plan.reps, [1.1] * plan.reps], warmup)

    monkeypatch.setattr(timing, "time_trials", trials)
    result = timing.time_attempt(LoggedAttempt(), with_timer(None), GEMM, PAPER_OPTIONS)
    assert result.metrics.flags == ["noisy — the trials' medians spread 9.5%"]
