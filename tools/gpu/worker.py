"""The GPU worker: a long-lived process that owns one GPU's CUDA context and runs the run → check → time
stages of each attempt. It speaks JSON lines on stdin/stdout (see tools/gpu/service.py, the caller) and
imports only torch, cuda.bindings, pydantic, pynvml (tools/gpu/gpu_state.py) and this repository's tasks/
and tools/ modules.

The candidate never sees the reference result: the reference is computed from a pristine copy of the
inputs after the candidate's launches have finished."""

from __future__ import annotations

import base64
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import torch

from tasks import get_task
from tasks.baselines import prepare_baseline
from tasks.expr import evaluate
from tasks.inputs import TORCH_DTYPES, draw_inputs
from tasks.references import run_reference
from tasks.schema import DTYPE_BYTES, Task
from tools.evaluation import Stage, StageResult, StageState, Status
from tools.gpu import driver
from tools.gpu.check import OutputCheck, compare, poison, rerun_difference
from tools.gpu.devices import device_info
from tools.gpu.gpu_state import GpuSampler, GpuState, noisy_flag
from tools.gpu.timing import (
    L2Flush,
    PairedTiming,
    PaperTiming,
    RunPlan,
    TimingOptions,
    time_cold,
    time_paired,
    time_trials,
)
from tools.options import EvalOptions
from tools.plan import LaunchPlan

RECHECK_SEED_OFFSET = 1_000_003  # the re-check after timing
REMEASURE_SEED_OFFSET = 2_000_003  # the re-check after re-measuring a speedup above the ceiling


class AttemptFailed(Exception):
    """Ends an attempt early with a status, a failed stage and a model-readable message."""

    def __init__(self, status: Status, stage: Stage, message: str, sticky: bool = False, detail: dict | None = None):
        super().__init__(message)
        self.status, self.stage, self.sticky, self.detail = status, stage, sticky, detail or {}


class Worker:
    def __init__(self, emit):
        self.emit = emit
        self.device = torch.device("cuda", 0)
        torch.cuda.set_device(self.device)
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference is true fp32
        torch.backends.cudnn.allow_tf32 = False
        self.info = device_info(0)
        self.flush = L2Flush(self.info.l2_bytes, self.device)
        self.sampler = GpuSampler.open(self.info.pci_bus_id)
        # Task name → the baseline's rel. L2 error per output: checked once per worker. Its time is not
        # kept: the baseline is timed beside the candidate in every attempt.
        self.baseline_errors: dict[str, dict[str, float]] = {}

    def evaluate(self, request: dict) -> dict:
        attempt = _Attempt(
            self,
            get_task(request["task"]),
            LaunchPlan.model_validate(request["plan"]),
            base64.b64decode(request["cubin"]),
            EvalOptions.model_validate(request["options"]),
        )
        return attempt.run()


class _Attempt:
    def __init__(self, worker: Worker, task: Task, plan: LaunchPlan, cubin: bytes, options: EvalOptions):
        self.worker, self.task, self.plan, self.cubin, self.options = worker, task, plan, cubin, options
        self.trials = options.trials
        self.seed = options.seed or 0  # the service always sends the seed it chose
        self.timing = TimingOptions.of(options)
        self.module = None
        self.metrics: dict[str, Any] = {}
        self.launches_done = 0

    # ----------------------------------------------------------------------------------------- flow

    def run(self) -> dict:
        status, message, sticky = Status.PASSED, "", False
        try:
            self._stage(Stage.RUN, self._run)
            self._stage(Stage.CHECK, self._check)
            if self.options.time:
                self._stage(Stage.TIME, self._time)
            message = self._passed_message()
        except AttemptFailed as e:
            status, message, sticky = e.status, str(e), e.sticky
            failed = StageResult(name=e.stage, state=StageState.FAILED, message=str(e), detail=e.detail)
            self.worker.emit({"stage_done": failed.model_dump(mode="json")})
        if self.module is not None and not sticky:
            driver.call(driver.cu.cuModuleUnload, self.module)
        return {"status": status, "message": message, "metrics": self.metrics, "sticky": sticky}

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

    def _stage(self, stage: Stage, fn) -> None:
        self.current = stage
        self.worker.emit({"progress": str(stage)})
        start = time.perf_counter()
        try:
            message, detail = fn()
        except torch.cuda.OutOfMemoryError as e:  # anywhere in the stage: scratch, the reference, the baseline
            raise self._out_of_memory(e) from None
        result = StageResult(
            name=stage, state=StageState.PASSED, message=message, detail=detail, seconds=time.perf_counter() - start
        )
        self.worker.emit({"stage_done": result.model_dump(mode="json")})

    # --------------------------------------------------------------------------------------- stages

    def _run(self) -> tuple[str, dict]:
        dev = self.worker.device
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
        self.first = self._execute(self.seed, "trial 1")
        detail = {"launches": [p.item.model_dump(exclude={"args"}) for p in self.launches]}
        return f"{len(self.launches)} launch(es) completed", detail

    def _check(self) -> tuple[str, dict]:
        trials = []
        for t in range(self.trials):
            seed = self.seed + t
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
                    f"trial {t + 1} of {self.trials} (seed {seed}): "
                    + "\n".join(lines)
                    + f"\n{rerun}\nThe task's tensors, as the reference reads and writes them:\n{layouts}",
                    detail={"trials": trials, "rerun": rerun_detail},
                )
        worst = {o.name: max(tr["outputs"][i]["rel_l2"] for tr in trials) for i, o in enumerate(self.task.outputs)}
        message = f"{self.trials} trials passed; worst rel L2 error: " + ", ".join(
            f"{k} {v:.2e}" for k, v in worst.items()
        )
        return message, {"trials": trials, "seeds": [self.seed + t for t in range(self.trials)]}

    def _rerun(self, inputs: dict[str, torch.Tensor]) -> tuple[str, dict]:
        """The launch sequence once more on the very same inputs: outputs that differ beyond the tolerance
        between two runs point to a race; identical ones say the mismatch is deterministic."""
        self._part("rerun")
        try:
            first = {o.name: self.buffers[o.name].clone() for o in self.task.outputs}
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            return "Not re-run on the same inputs: no GPU memory left to keep the first run's outputs.", {}
        for name, value in inputs.items():
            self.buffers[name].copy_(value)
        for spec in self.task.outputs:
            poison(self.buffers[spec.name])
        with self._faults("re-running on the same inputs"):
            self._launch_sequence()
        self.launches_done += 1
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
        inputs = self._fill(self.seed + self.trials)
        try:
            baseline = self._baseline(inputs)
        except Exception as e:  # the library's failure, not the candidate's: report the kernel's time alone
            return self._time_alone(f"baseline unavailable: {e}")
        paired, state, plan = self._paired(baseline)
        with self._faults("timing the candidate alone (the paper's method)"):
            paper = PaperTiming.of(
                time_trials(self._launch_sequence, self.worker.flush, plan, paired.warmup_runs),
                time_trials(baseline, self.worker.flush, plan, paired.warmup_runs),
            )
        self.launches_done += plan.trials * plan.reps
        seed, fresh = self._recheck(RECHECK_SEED_OFFSET)
        first = None
        if paired.speedup > self.options.speedup_ceiling:  # too good to be true until measured on other data
            first = paired
            paired, state, _ = self._paired(self._baseline(fresh))
            self._recheck(REMEASURE_SEED_OFFSET)
        return self._timing_report(paired, paper, state, first, seed)

    def _timing_report(
        self, paired: PairedTiming, paper: PaperTiming, state: GpuState, first: PairedTiming | None, seed: int
    ) -> tuple[str, dict]:
        """The metrics, the flags, the stage's message and its detail, from the measurements made."""
        lib, ceiling = self.task.baseline.library, self.options.speedup_ceiling
        noisy = noisy_flag(paired.spread, state, lib)
        flags = [noisy] if noisy else []
        if first is not None and paired.speedup > ceiling:
            flags.append(
                f"above the ceiling — {paired.speedup:.2f}× {lib} exceeds {ceiling:g}×: "
                "re-measured on fresh inputs and re-checked, it stands"
            )
        tflops = self._tflops(paired.kernel_ms)
        self.metrics.update(
            kernel_ms=paired.kernel_ms,
            baseline_ms=paired.baseline_ms,
            speedup=paired.speedup,
            speedup_interval=[paired.low, paired.high],
            tflops=tflops,
            timing_flags=flags,
        )
        lines = [paired.line(lib), paper.line(lib), state.line(lib)]
        if first is not None:
            again = "re-measured on fresh inputs and re-checked"
            lines.append(f"{first.speedup:.3f}× at first, above the {ceiling:g}× ceiling: {again}")
        detail = {
            "paired": paired.model_dump(),
            "paper": paper.model_dump(),
            "gpu_state": state.model_dump(),
            "first": first.model_dump() if first else None,
            "flags": flags,
            "baseline_library": lib,
            "baseline_rel_l2": self.worker.baseline_errors[self.task.name],
            "tflops": tflops,
            "recheck_seed": seed,
        }
        return "\n".join(lines), detail

    def _time_alone(self, why: str) -> tuple[str, dict]:
        self._part("time")
        with self._faults("timing the candidate"):
            kernel = time_cold(self._launch_sequence, self.worker.flush, self.timing)
        self.launches_done += kernel.runs + kernel.warmup_runs
        self.metrics.update(kernel_ms=kernel.ms, tflops=self._tflops(kernel.ms))
        self._recheck(RECHECK_SEED_OFFSET)
        return f"candidate {kernel.line()}\n{why}", {"kernel": kernel.model_dump()}

    def _tflops(self, ms: float) -> float:
        return evaluate(self.task.flops, self.task.dims) / (ms * 1e-3) / 1e12

    def _paired(self, baseline: Callable[[], object]) -> tuple[PairedTiming, GpuState, RunPlan]:
        """The candidate and the baseline interleaved, the GPU's state sampled meanwhile."""
        self._part("time")
        with self.worker.sampler.recording() as rec, self._faults("timing the candidate beside the baseline"):
            paired, plan = time_paired(self._launch_sequence, baseline, self.worker.flush, self.timing, rec.mark)
        self.launches_done += paired.warmup_runs + len(paired.block_speedups) * paired.block_runs
        return paired, rec.state, plan

    # -------------------------------------------------------------------------------------- helpers

    def _recheck(self, offset: int) -> tuple[int, dict[str, torch.Tensor]]:
        """Fresh inputs, same loaded module: state kept between launches shows up here. Returns the seed and
        a pristine copy of the inputs, which the buffers still hold."""
        self._part("recheck")
        seed = self.seed + offset
        inputs = self._execute(seed, "re-check after timing")
        failed = [c for c in self._compare(inputs) if not c.passed]
        if failed:
            dims = {o.name: o.shape for o in self.task.outputs}
            self.metrics.clear()
            raise AttemptFailed(
                Status.MISMATCH,
                Stage.TIME,
                f"correct in the check stage, but wrong when re-checked (seed {seed}) after "
                f"{self.launches_done} executions: the kernel must not keep state between launches.\n"
                + "\n".join(c.summary(dims[c.name]) for c in failed),
            )
        return seed, inputs

    def _fill(self, seed: int) -> dict[str, torch.Tensor]:
        """Fresh inputs into the input buffers; outputs poisoned. Returns a pristine copy of the inputs."""
        inputs = draw_inputs(self.task, self.task.dims, seed, self.worker.device)
        for name, value in inputs.items():
            self.buffers[name].copy_(value)
        for spec in self.task.outputs:
            poison(self.buffers[spec.name])
        return inputs

    def _launch_sequence(self) -> None:
        for b in self.plan.buffers:
            if b.role == "scratch":
                buf = self.buffers[b.name]
                buf.zero_() if b.init == "zero" else buf.view(torch.uint8).fill_(0xFF)
        for launch in self.launches:
            launch.launch(self.stream)

    def _execute(self, seed: int, what: str) -> dict[str, torch.Tensor]:
        inputs = self._fill(seed)
        with self._faults(what):
            self._launch_sequence()
        self.launches_done += 1
        return inputs

    @contextmanager
    def _faults(self, what: str):
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

    def _compare(self, inputs: dict[str, torch.Tensor]) -> list[OutputCheck]:
        changed = [n for n, v in inputs.items() if not torch.equal(self.buffers[n], v)]
        if changed:
            raise AttemptFailed(
                Status.MISMATCH,
                self.current,
                f"the kernel wrote into its input(s) {', '.join(changed)}; inputs are read-only",
            )
        reference = run_reference(self.task.reference, inputs, self.task.params)
        return [
            compare(o.name, self.buffers[o.name], reference[o.name], self.task.tolerance) for o in self.task.outputs
        ]

    def _baseline(self, inputs: dict[str, torch.Tensor]) -> Callable[[], object]:
        """The library's call on these inputs, prepared afresh (it is timed beside the candidate every time);
        checked against the reference the first time this worker prepares it for the task."""
        self._part("baseline")
        run = prepare_baseline(self.task.baseline.call, inputs, self.task.params)
        if self.task.name not in self.worker.baseline_errors:
            reference = run_reference(self.task.reference, inputs, self.task.params)
            outputs = run()
            self.worker.baseline_errors[self.task.name] = {
                n: compare(n, outputs[n].contiguous(), reference[n], self.task.tolerance).rel_l2 for n in outputs
            }
        return run

    def _part(self, part: str) -> None:
        """Tell the service which part of the current stage starts: each has its own time limit."""
        self.worker.emit({"progress": str(self.current), "part": part})

    def _passed_message(self) -> str:
        if "speedup" in self.metrics:
            return (
                f"correct; {self.metrics['kernel_ms']:.4f} ms vs {self.task.baseline.library} "
                f"{self.metrics['baseline_ms']:.4f} ms: speedup {self.metrics['speedup']:.3f}×"
            )
        return "correct (not timed)"


def main() -> None:
    # The protocol owns the original stdout; anything else printing to fd 1 (libraries) goes to stderr.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def emit(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")

    try:
        worker = Worker(emit)
    except Exception as e:
        emit({"fatal": f"the GPU worker could not start: {e}"})
        return
    emit({"ready": worker.info.model_dump()})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") == "exit":
            return
        try:
            result = worker.evaluate(request) if request.get("op") == "evaluate" else {"pong": True}
        except Exception:
            result = {
                "status": Status.RUNTIME_ERROR,
                "message": "internal error in the GPU worker",
                "error": traceback.format_exc(),
                "sticky": True,
                "stages": [],
                "metrics": {},
            }
        emit({"result": result})
        if result.get("sticky"):
            return  # the context is unusable: let the caller start a fresh worker


if __name__ == "__main__":
    main()
