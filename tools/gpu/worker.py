"""The GPU worker: a long-lived process that owns one GPU's CUDA context and runs the stages of each attempt that need
it (tools/gpu/stages.py in_worker: run → check → time → profile, the last counting the executed target instructions
of the candidate's launches with CUPTI, tools/gpu/cupti_counts.py). It speaks the pipe of tools/gpu/protocol.py on
stdin/stdout (tools/gpu/service.py is the other end) and imports only torch, cuda.bindings, pydantic, pynvml
(tools/gpu/gpu_state.py), cupti-python where installed (tools/gpu/cupti_durations.py, under eval.speedup=paper) and
this repository's tasks/ and tools/ modules.

The candidate never sees the reference result: the reference is computed from a pristine copy of the inputs after
the candidate's launches have finished. How the time stage measures is tools/gpu/timing.py's; the checks are here:
eval.criterion=ptxbench compares with the fp32 reference by relative L2 (tools/gpu/check.py compare), =paper with the
library's output on the same inputs element by element, on the paper's input draws (tasks/paper_protocol.py)."""

from __future__ import annotations

import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager

import torch

from tasks import get_task
from tasks.baselines import prepare_baseline
from tasks.inputs import TORCH_DTYPES, draw_inputs
from tasks.paper_protocol import ATOL, RTOL, paper_check, trial_seed
from tasks.references import run_reference
from tasks.schema import DTYPE_BYTES, Task
from tools.evaluation import Stage, StageResult, StageState, Status
from tools.gpu import cupti_counts, cupti_durations, driver, memory, profile, stages, timing
from tools.gpu.check import ElementCheck, OutputCheck, compare, compare_elements, poison, rerun_difference
from tools.gpu.devices import device_info
from tools.gpu.gpu_state import GpuSampler
from tools.gpu.metrics import GpuMetrics
from tools.gpu.protocol import (
    Exit,
    Fatal,
    Part,
    Progress,
    ProtocolError,
    Ready,
    Result,
    StageDone,
    WorkerRequest,
    line,
    to_worker,
)
from tools.options import Criterion, EvalOptions
from tools.plan import LaunchPlan


class AttemptFailed(Exception):
    """Ends an attempt early with a status, a failed stage and a model-readable message."""

    def __init__(self, status: Status, stage: Stage, message: str, sticky: bool = False, detail: dict | None = None):
        super().__init__(message)
        self.status, self.stage, self.sticky, self.detail = status, stage, sticky, detail or {}


class StageSkipped(Exception):
    """The stage could not run here, for this reason; the attempt goes on (the service may run it another way)."""

    def __init__(self, reason: str, detail: dict | None = None):
        super().__init__(reason)
        self.detail = detail or {}


class Worker:
    def __init__(self, emit: Callable[[Progress | StageDone], None]):
        self.emit = emit
        self.device = torch.device("cuda", 0)
        torch.cuda.set_device(self.device)
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference is true fp32
        torch.backends.cudnn.allow_tf32 = False
        self.info = device_info(0)
        flush = timing.L2Flush(self.info.l2_bytes, self.device)
        self.bench = timing.Bench(flush, GpuSampler.open(self.info.pci_bus_id), cupti_durations.KernelTimer())
        # Task name → the baseline's rel. L2 error per output: checked once per worker. Its time is not
        # kept: the baseline is timed beside the candidate in every attempt.
        self.baseline_errors: dict[str, dict[str, float]] = {}
        self.counter = cupti_counts.Counter(device=0)  # the only device this process sees

    def evaluate(self, request: WorkerRequest) -> Result:
        task = get_task(request.task)
        return _Attempt(self, task, request.plan, request.cubin, request.options, request.opcodes).run()


class _Attempt:
    def __init__(self, worker: Worker, task: Task, plan: LaunchPlan, cubin: bytes, options: EvalOptions,
                 opcodes: dict[str, int] | None = None):  # fmt: skip
        self.worker, self.task, self.plan, self.cubin, self.options = worker, task, plan, cubin, options
        self.opcodes = opcodes  # the launched kernels' static SASS: which opcodes CUPTI's counters may have counted
        self.trials = options.trials  # the pipeline has put the paper's count here where it applies
        self.seed = options.seed or 0  # the service always sends the seed it chose
        self.paper = paper_check(task.family) if options.criterion is Criterion.PAPER else None
        self.expected_from = ""  # what the paper's rule compared with: the library's name, or why the reference
        self.module = None
        self.metrics = GpuMetrics()
        self.launches_done = 0

    # ----------------------------------------------------------------------------------------- flow

    def run(self) -> Result:
        runs = {Stage.RUN: self._run, Stage.CHECK: self._check, Stage.TIME: self._time, Stage.PROFILE: self._profile}
        status, message, sticky, fault = Status.PASSED, "", False, None
        try:
            for stage in stages.in_worker(self.options):
                self._stage(stage, runs[stage])
            message = self._passed_message()
        except AttemptFailed as e:
            status, message, sticky, fault = e.status, str(e), e.sticky, e.detail.get("fault")
            failed = StageResult(name=e.stage, state=StageState.FAILED, message=str(e), detail=e.detail)
            self.worker.emit(StageDone(result=failed))
            if self.metrics.timing is not None:  # timed, then faulted while counting: a speedup is a correct one's
                self.metrics.timing = self.metrics.timing.without_speedup()
        if self.module is not None and not sticky:
            driver.call(driver.cu.cuModuleUnload, self.module)
        return Result(status=status, message=message, metrics=self.metrics, sticky=sticky, fault=fault)

    def _out_of_memory(self, error: torch.cuda.OutOfMemoryError) -> AttemptFailed:
        """Free this attempt's memory, so the worker stays usable, and say what did not fit."""
        self.buffers, self.first = {}, None
        torch.cuda.empty_cache()
        total = sum(math.prod(b.shape) * DTYPE_BYTES[b.dtype] for b in self.plan.buffers)
        first_line = str(error).splitlines()[0] if str(error) else "CUDA out of memory"
        return AttemptFailed(
            Status.LAUNCH_ERROR,
            self.current,
            f"out of GPU memory in the {self.current} stage: the task tensors and scratch buffers ({total / 2**30:.1f} "
            f"GiB) and the check's own tensors do not fit ({first_line}); use less scratch",
        )

    def _stage(self, stage: Stage, fn: Callable[[], tuple[str, dict]]) -> None:
        self.current = stage
        self.worker.emit(Progress(stage=stage))
        start = time.perf_counter()
        state = StageState.PASSED
        try:
            message, detail = fn()
        except torch.cuda.OutOfMemoryError as e:  # anywhere in the stage: scratch, the reference, the baseline
            raise self._out_of_memory(e) from None
        except StageSkipped as e:
            state, message, detail = StageState.SKIPPED, str(e), e.detail
        result = StageResult(name=stage, state=state, message=message, detail=detail,
                             seconds=time.perf_counter() - start)  # fmt: skip
        self.worker.emit(StageDone(result=result))

    # --------------------------------------------------------------------------------------- stages

    def _run(self) -> tuple[str, dict]:
        dev = self.worker.device
        free, _ = torch.cuda.mem_get_info(dev)
        free += torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)  # cached by torch, reusable
        refused = memory.refusal(memory.footprint(self.task, self.plan), free)
        if refused:
            raise AttemptFailed(Status.LAUNCH_ERROR, Stage.RUN, refused)
        self.buffers = {  # out of memory here is a launch_error (_stage)
            b.name: torch.empty(b.shape, dtype=TORCH_DTYPES[b.dtype], device=dev) for b in self.plan.buffers
        }
        addresses = {name: t.data_ptr() for name, t in self.buffers.items()}
        try:
            self.module = driver.load_module(self.cubin)
            self.launches = driver.prepare_launches(self.module, self.plan, addresses)
        except driver.LaunchError as e:
            raise AttemptFailed(Status.LAUNCH_ERROR, Stage.RUN, str(e)) from None
        except driver.CudaError as e:
            raise AttemptFailed(Status.LAUNCH_ERROR, Stage.RUN, f"loading the module failed: {e}") from None
        self.stream = torch.cuda.current_stream(dev).cuda_stream
        self.first = self._execute(self._trial_seed(0), "trial 1")
        detail = {"launches": [p.item.model_dump(exclude={"args"}) for p in self.launches]}
        return f"{len(self.launches)} launch(es) completed", detail

    def _check(self) -> tuple[str, dict]:
        trials = []
        for t in range(self.trials):
            seed = self._trial_seed(t)
            inputs = self.first if t == 0 else self._execute(seed, f"trial {t + 1}")
            checks = self._compare(inputs)
            trials.append({"seed": seed, "outputs": [c.model_dump() for c in checks]})
            failed = [c for c in checks if not c.passed]
            if failed:
                dims = {o.name: o.shape for o in self.task.outputs}
                lines = [c.summary(dims[c.name]) for c in failed]
                layouts = "\n".join(f"- {line}" for line in self.task.tensor_lines())
                rerun, rerun_detail = self._rerun(inputs)
                raise AttemptFailed(
                    Status.MISMATCH,
                    Stage.CHECK,
                    f"trial {t + 1} of {self.trials} (seed {seed}){self._judged_by()}: "
                    + "\n".join(lines)
                    + f"\n{rerun}\nThe task's tensors, as the reference reads and writes them:\n{layouts}",
                    detail={"trials": trials, "rerun": rerun_detail} | self._criterion_detail(),
                )
        seeds = [self._trial_seed(t) for t in range(self.trials)]
        if self.paper is not None:
            worst = {
                o.name: max(tr["outputs"][i]["max_abs_err"] for tr in trials) for i, o in enumerate(self.task.outputs)
            }
            message = f"{self.trials} trial(s) passed{self._judged_by()}; largest abs error: " + ", ".join(
                f"{k} {v:.2e}" for k, v in worst.items()
            )
            return message, {"trials": trials, "seeds": seeds} | self._criterion_detail()
        worst = {o.name: max(tr["outputs"][i]["rel_l2"] for tr in trials) for i, o in enumerate(self.task.outputs)}
        message = f"{self.trials} trials passed; worst rel L2 error: " + ", ".join(
            f"{k} {v:.2e}" for k, v in worst.items()
        )
        return message, {"trials": trials, "seeds": seeds}

    def _trial_seed(self, trial: int) -> int:
        """Trial `trial`'s input seed (0-based): ours are consecutive from the attempt's seed; the paper's stored
        tensors are one fixed seed for its trials of a stored family (tasks/paper_protocol.py)."""
        return self.seed + trial if self.paper is None else trial_seed(self.paper, trial, self.seed)

    def _judged_by(self) -> str:
        """The paper's rule in words, for the check's messages ("" under ours: its messages are as they were)."""
        if self.paper is None:
            return ""
        share = "every element" if self.paper.matched >= 1 else f"{self.paper.matched:.1%} of the elements"
        inputs = "stored spiky" if self.paper.spikes and self.paper.stored else "stored" if self.paper.stored else (
            "fresh plain N(0,1)")  # fmt: skip
        return (
            f", judged by the paper's rule (an element fails when |out − expected| > {ATOL:g} and > "
            f"{RTOL:g}·|expected|; {share} must pass; expected = {self.expected_from} on the same {inputs} inputs)"
        )

    def _criterion_detail(self) -> dict:
        return {"criterion": Criterion.PAPER.value, "expected": self.expected_from} if self.paper else {}

    def _rerun(self, inputs: dict[str, torch.Tensor]) -> tuple[str, dict]:
        """The launch sequence once more on the very same inputs: outputs that differ beyond the tolerance
        between two runs point to a race; identical ones say the mismatch is deterministic."""
        self.part("rerun")
        try:
            first = {o.name: self.buffers[o.name].clone() for o in self.task.outputs}
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            return "Not re-run on the same inputs: no GPU memory left to keep the first run's outputs.", {}
        for name, value in inputs.items():
            self.buffers[name].copy_(value)
        for spec in self.task.outputs:
            poison(self.buffers[spec.name])
        with self.faults("re-running on the same inputs"):
            self.launch_sequence()
        self.executed(1)
        diffs = [rerun_difference(n, first[n], self.buffers[n], self.task.tolerance) for n in first]
        detail = {"outputs": [d.model_dump() | {"beyond_tolerance": d.beyond_tolerance} for d in diffs]}
        shown = "; ".join(d.summary() for d in diffs)
        if any(d.beyond_tolerance for d in diffs):
            detail["likely_race"] = True
            return (
                f"Re-run on the same inputs: the outputs differ beyond the tolerance ({shown}): likely a race, e.g. "
                "a shared-memory tile read before the barrier or mbarrier phase that fills it completed, or "
                "overwritten while another warp still reads it, or generic-proxy writes read by wgmma/TMA without "
                "fence.proxy.async.",
                detail,
            )
        detail["likely_race"] = False
        if not any(d.changed for d in diffs):
            return "Re-run on the same inputs: identical outputs, so the mismatch is deterministic, not a race.", detail
        return (
            f"Re-run on the same inputs: the outputs differ only within the tolerance ({shown}), as a different "
            "summation order would make them: not a sign of a race.",
            detail,
        )

    def _time(self) -> tuple[str, dict]:
        measured = timing.time_attempt(self, self.worker.bench, self.task, self.options)
        self.metrics.timing = measured.metrics
        if any(b.role == "scratch" for b in self.plan.buffers):  # a part of each timed run, in no kernel's row
            self.metrics.timing.scratch_init_ms = timing.reset_ms(self.reset_scratch, self.worker.bench.flush)
        return measured.message, measured.detail

    def _profile(self) -> tuple[str, dict]:
        """The executed target instructions of the candidate's launches (never the baseline's, never a timed run),
        counted here by CUPTI's range profiler, one range per launch, summed over the launches; skipped with the reason
        where CUPTI cannot count them as Nsight Compute would (the service's ncu counts them then)."""
        arch = self.worker.info.arch
        groups = self.task.targets[arch]
        context = int(driver.call(driver.cu.cuCtxGetCurrent))
        try:
            counters = cupti_counts.plan(arch, groups, self.opcodes)
            values, cost = self.worker.counter.count(context, counters, len(self.launches), self._counted_pass,
                                                     self._before_pass)  # fmt: skip
        except cupti_counts.CountUnavailable as e:
            raise StageSkipped(f"not counted in the worker: {e}", {"fallback": "ncu", "cupti": str(e)}) from None
        self.executed(cost["passes"])
        summary = cupti_counts.summarize(values, groups, counters)
        self.metrics.targets = profile.targets_of(summary)
        return profile.message(summary, groups), {**summary, "launches_profiled": len(values), **cost}

    def _before_pass(self) -> None:
        self.reset_scratch()
        torch.cuda.synchronize(self.worker.device)  # done before the profiled range opens: not counted

    def _counted_pass(self) -> None:
        with self.faults("counting the executed instructions"):
            for launch in self.launches:
                launch.launch(self.stream)

    # ------------------------------------------------------------ what the timing method asks (timing.Subject)

    def launch_sequence(self) -> None:
        self.reset_scratch()
        for launch in self.launches:
            launch.launch(self.stream)

    def reset_scratch(self) -> None:
        """Each scratch buffer to its declared start (zero, or 0xFF bytes for poison), as before every run."""
        for b in self.plan.buffers:
            if b.role == "scratch":
                buf = self.buffers[b.name]
                buf.zero_() if b.init == "zero" else buf.view(torch.uint8).fill_(0xFF)

    def timing_inputs(self) -> dict[str, torch.Tensor]:
        return self._fill(self.seed + self.trials)  # the first seed after the check's

    def baseline(self, inputs: dict[str, torch.Tensor]) -> tuple[Callable[[], object], dict[str, float]]:
        """The library's call on these inputs, prepared afresh (it is timed beside the candidate every time);
        checked against the reference the first time this worker prepares it for the task."""
        self.part("baseline")
        if self.task.baseline is None:  # timing.time_attempt then times the candidate alone: no speedup
            raise LookupError("the task names no baseline library")
        run = prepare_baseline(self.task.baseline.call, inputs, self.task.params)
        if self.task.name not in self.worker.baseline_errors:
            reference = run_reference(self.task.reference, inputs, self.task.params)
            outputs = run()
            self.worker.baseline_errors[self.task.name] = {
                n: compare(n, outputs[n].contiguous(), reference[n], self.task.tolerance).rel_l2 for n in outputs
            }
        return run, self.worker.baseline_errors[self.task.name]

    def recheck(self, offset: int) -> tuple[int, dict[str, torch.Tensor]]:
        """Fresh inputs, same loaded module: state kept between launches shows up here. Returns the seed and
        a pristine copy of the inputs, which the buffers still hold."""
        self.part("recheck")
        seed = self.seed + offset
        inputs = self._execute(seed, "re-check after timing")
        failed = [c for c in self._compare(inputs) if not c.passed]
        if failed:
            dims = {o.name: o.shape for o in self.task.outputs}
            raise AttemptFailed(
                Status.MISMATCH,
                Stage.TIME,
                f"correct in the check stage, but wrong when re-checked (seed {seed}) after "
                f"{self.launches_done} executions: the kernel must not keep state between launches.\n"
                + "\n".join(c.summary(dims[c.name]) for c in failed),
            )
        return seed, inputs

    @contextmanager
    def faults(self, what: str):
        """Run the block, wait for the GPU, and turn driver errors into a failure of the current stage."""
        try:
            yield
            driver.synchronize()
        except driver.LaunchError as e:
            raise AttemptFailed(Status.LAUNCH_ERROR, self.current, str(e)) from None
        except driver.CudaError as e:
            raise AttemptFailed(
                Status.RUNTIME_ERROR,
                self.current,
                f"{what}: the kernel faulted: {e.name} ({e.description}). {e.hint}",
                sticky=e.sticky,
                detail={"fault": e.name},  # the service locates a fault with compute-sanitizer
            ) from None
        except RuntimeError as e:  # torch surfaces an earlier asynchronous fault this way
            raise AttemptFailed(
                Status.RUNTIME_ERROR, self.current, f"{what}: the kernel faulted: {e}", sticky=True,
                detail={"fault": "asynchronous"},
            ) from None  # fmt: skip

    def part(self, part: Part) -> None:
        """Tell the service which part of the current stage starts: each has its own time limit."""
        self.worker.emit(Progress(stage=self.current, part=part))

    def executed(self, runs: int) -> None:
        self.launches_done += runs

    # -------------------------------------------------------------------------------------- helpers

    def _fill(self, seed: int) -> dict[str, torch.Tensor]:
        """Fresh inputs into the input buffers (the paper's draw under its criterion); outputs poisoned. Returns a
        pristine copy of the inputs."""
        spikes = self.paper is None or self.paper.spikes
        inputs = draw_inputs(self.task, self.task.dims, seed, self.worker.device, spikes=spikes)
        for name, value in inputs.items():
            self.buffers[name].copy_(value)
        for spec in self.task.outputs:
            poison(self.buffers[spec.name])
        return inputs

    def _execute(self, seed: int, what: str) -> dict[str, torch.Tensor]:
        inputs = self._fill(seed)
        with self.faults(what):
            self.launch_sequence()
        self.executed(1)
        return inputs

    def _compare(self, inputs: dict[str, torch.Tensor]) -> list[OutputCheck] | list[ElementCheck]:
        changed = [n for n, v in inputs.items() if not torch.equal(self.buffers[n], v)]
        if changed:
            raise AttemptFailed(
                Status.MISMATCH,
                self.current,
                f"the kernel wrote into its input(s) {', '.join(changed)}; inputs are read-only",
            )
        if self.paper is not None:
            expected = self._library_outputs(inputs)
            return [compare_elements(o.name, self.buffers[o.name], expected[o.name], self.paper.matched)
                    for o in self.task.outputs]  # fmt: skip
        reference = run_reference(self.task.reference, inputs, self.task.params)
        return [
            compare(o.name, self.buffers[o.name], reference[o.name], self.task.tolerance) for o in self.task.outputs
        ]

    def _library_outputs(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """What the paper's rule compares with: the baseline library's output on these inputs (its harness calls
        the definition's reference, which is the library). A task naming no library (a FlashInfer-Bench definition
        without one), or a library that cannot run here, is compared with the fp32 reference, and says so."""
        if self.task.baseline is not None:
            try:
                outputs = prepare_baseline(self.task.baseline.call, inputs, self.task.params)()
                self.expected_from = f"{self.task.baseline.library}'s output"
                return outputs
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as e:  # e.g. cuDNN's fp8 attention without cudnn-frontend
                why = f"{self.task.baseline.library} did not run here: {str(e).splitlines()[0] if str(e) else e!r}"
        else:
            why = "the task names no library"
        self.expected_from = f"the fp32 reference's output ({why})"
        return run_reference(self.task.reference, inputs, self.task.params)

    def _passed_message(self) -> str:
        t = self.metrics.timing
        if t is not None and t.speedup is not None and self.task.baseline is not None:
            which = " (the paper's figure: each timed alone)" if t.figure is not None else ""
            return (
                f"correct; {t.kernel_ms:.4f} ms vs {self.task.baseline.library} {t.baseline_ms:.4f} ms: "
                f"speedup {t.speedup:.3f}×{which}"
            )
        if t is not None:  # timed alone: the task names no baseline, or the library failed
            return f"correct; {t.kernel_ms:.4f} ms, timed alone (no speedup)"
        return "correct (not timed)"


def main() -> None:
    # The pipe owns the original stdout; anything else printing to fd 1 (libraries) goes to stderr.
    pipe = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def emit(message: Ready | Fatal | Progress | StageDone | Result) -> None:
        pipe.write(line(message))

    try:
        worker = Worker(emit)
    except Exception as e:
        emit(Fatal(message=f"the GPU worker could not start: {e}"))
        return
    emit(Ready(device=worker.info))
    for text in sys.stdin:
        try:
            request = to_worker(text)
            if isinstance(request, Exit):
                return
            result = worker.evaluate(request)
        except Exception as e:  # a line that does not read (ProtocolError says why), or a failure of the worker itself
            error = str(e) if isinstance(e, ProtocolError) else traceback.format_exc()
            result = Result(status=Status.RUNTIME_ERROR, message="internal error in the GPU worker", error=error,
                            sticky=True)  # fmt: skip
        emit(result)
        if result.sticky:
            return  # the context is unusable: let the caller start a fresh worker


if __name__ == "__main__":
    main()
