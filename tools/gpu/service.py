"""The evaluation service: the caller's side of one GPU. It keeps a long-lived worker process
(tools/gpu/worker.py, a fresh interpreter spawned with `python -m`, so none of the caller's modules —
langgraph, openai — load into it), speaks to it over the pipe of tools/gpu/protocol.py, enforces a wall-clock
limit per part of each stage, and kills and restarts the worker after a hang, a crash or a sticky CUDA error.
No kernel can take the caller down.

The stages after the worker's (tools/gpu/stages.py says which an attempt gets) run here as tool processes on the
torch-free launcher: the perf pass (Nsight Compute), the counts where the worker's CUPTI could not count them (Nsight
Compute's profile stage in the place of the worker's skipped one), and compute-sanitizer's diagnoses. A time-out in
the kernel's parts is located (tools/gpu/hang.py: cuda-gdb attached to the worker before it is killed)."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tasks.schema import Arch, Task
from tools import procs
from tools.evaluation import Stage, StageResult, StageState, Status
from tools.gpu import hang, launcher, perf, profile, sanitizer, stages
from tools.gpu.base import CompiledModule, GpuOutcome
from tools.gpu.devices import DeviceInfo, NoDevice, device_info
from tools.gpu.limits import WORKER_START_S, StageLimits, stage_limits
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
    from_worker,
    line,
)
from tools.options import EvalOptions
from tools.plan import SpecError, plan_launches

TIMEOUT_HINT = (
    "a hang: check mbarrier waits (phase parity, and that arrive.expect_tx counts exactly the bytes the TMA "
    "copies deliver), barriers that not every thread reaches, and loops whose bounds come from uninitialised values"
)
PARTS: dict[Part, str] = {  # what the worker was doing in each part of a stage, for the time-out message
    "run": "running the launch sequence once",
    "check": "running the check trials",
    "time": "timing the candidate and the baseline",
    "recheck": "re-checking on fresh inputs after timing",
    "rerun": "re-running a mismatch on the same inputs, to tell a race from a deterministic error",
    "baseline": "preparing the baseline library's call: the library's part, not the kernel's",
}


class GpuService:
    """One GPU's worker process, started on first use and restarted whenever it must be."""

    worker_module = "tools.gpu.worker"  # what runs in the worker process (tests put a stand-in here)

    def __init__(self, device: int = 0, start_timeout_s: float = WORKER_START_S):
        self.device = device
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue = queue.Queue()
        fd, log_path = tempfile.mkstemp(prefix=procs.temp_prefix(f"worker{device}"), suffix=".log")
        self._log_path = Path(log_path)
        self._log = os.fdopen(fd, "w")
        self.restarts = 0
        self.last_start_s: float | None = None
        self._library_profiles = perf.LibraryProfiles(device)  # profiled once per task, kept across restarts

    # ---------------------------------------------------------------------------------- availability

    def device_info(self) -> DeviceInfo | None:
        """The device, asked of the driver here (no context is created); None when there is none."""
        try:
            return device_info(self.device)
        except NoDevice:
            return None

    def unavailable_reason(self, arch: Arch) -> str | None:
        try:
            return device_info(self.device).cannot_run(arch)
        except NoDevice as e:
            return str(e)

    # --------------------------------------------------------------------------------------- worker

    def _start(self) -> None:
        start = time.perf_counter()
        env = dict(launcher.environment(self.device), PYTHONUNBUFFERED="1")
        self._proc = procs.spawn(  # dies with this process, even after kill -9
            [sys.executable, "-m", self.worker_module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            text=True,
            start_new_session=True,  # its own process group, so a kill takes its children too
        )
        self._lines = queue.Queue()
        threading.Thread(target=self._read, args=(self._proc, self._lines), daemon=True).start()
        try:
            message = self._next(self.start_timeout_s)
        except queue.Empty:
            message = f"no ready message within {self.start_timeout_s:g} s"
        if not isinstance(message, Ready):
            if isinstance(message, Fatal):
                reason = message.message
            else:  # it exited (its log says why), sent nothing in time, or sent something else
                reason = str(message) if message is not None else self._log_tail() or "it exited"
            self._kill()
            raise RuntimeError(f"the GPU worker did not start: {reason}")
        self.last_start_s = time.perf_counter() - start

    @staticmethod
    def _read(proc: subprocess.Popen, lines: queue.Queue) -> None:
        for text in proc.stdout:
            if not text.endswith("\n"):  # torn: the worker died while writing it, which the end of stream says
                break
            try:
                lines.put(from_worker(text))
            except ProtocolError as e:
                lines.put(e)
        lines.put(None)  # end of stream: the worker exited

    def _next(self, timeout_s: float):
        """The worker's next message (or the ProtocolError of a line that does not read); None if it exited; raises
        queue.Empty on time-out."""
        return self._lines.get(timeout=max(timeout_s, 0.01))

    def _kill(self) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()
        self._proc = None

    def restart(self) -> float:
        """Kill the worker and start a fresh one; returns the seconds it took."""
        start = time.perf_counter()
        self._kill()
        self._start()
        self.restarts += 1
        return time.perf_counter() - start

    def _log_tail(self, chars: int = 1500) -> str:
        try:
            return self._log_path.read_text(errors="replace")[-chars:].strip()
        except OSError:
            return ""

    def close(self) -> None:
        """Stop the worker for good (the service is not used after this)."""
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.stdin.write(line(Exit()))
                self._proc.stdin.flush()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()
        self._log.close()
        self._log_path.unlink(missing_ok=True)

    def __enter__(self) -> GpuService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------- evaluation

    def evaluate(self, task: Task, arch: Arch, module: CompiledModule, options: EvalOptions) -> GpuOutcome:
        """The attempt's GPU stages (tools/gpu/stages.py): the worker's, then those that run here; stops at the first
        failure, and diagnoses it."""
        outcome = self._evaluate(task, arch, module, options)
        info = self.device_info()
        outcome.device = info.name if info else None
        return outcome

    def _replanned(self, task: Task, arch: Arch, module: CompiledModule) -> CompiledModule:
        """The module with its plan re-planned at this GPU's own multiprocessor count where it differs from the
        arch's nominal one (SMS in the launch spec's expressions), so that the worker, Nsight Compute, cuda-gdb and
        compute-sanitizer all launch the same grids; SpecError when the spec does not fit it."""
        info = self.device_info()
        if module.launch is None or info is None or info.sm_count == arch.sm_count:
            return module
        return module.model_copy(update={"plan": plan_launches(module.launch, task, arch, sm_count=info.sm_count)})

    def _evaluate(self, task: Task, arch: Arch, module: CompiledModule, options: EvalOptions) -> GpuOutcome:
        seed = options.seed if options.seed is not None else int.from_bytes(os.urandom(4), "little") % 10**6
        try:
            module = self._replanned(task, arch, module)
        except SpecError as e:
            message = f"at this GPU's {self.device_info().sm_count} multiprocessors (SMS), {e}"
            failed = StageResult(name=Stage.RUN, state=StageState.FAILED, message=message)
            return GpuOutcome(status=Status.LAUNCH_ERROR, message=message, stages=[failed])
        request = WorkerRequest(task=task.name, plan=module.plan, cubin=module.cubin,
                                options=options.model_copy(update={"seed": seed}),
                                opcodes=module.launched_opcodes())  # fmt: skip
        limits = stage_limits(task, options)
        outcome, fault = self._in_worker(request, limits, module, arch)
        if outcome.status is Status.PASSED:
            counted = outcome.metrics.targets is not None
            for stage in stages.after_worker(options, outcome.metrics.speedup, counted):
                result = self._profile(stage, task, arch, module, limits, outcome.metrics, options.static_timeout_s)
                _put(outcome.stages, result)
        for stage in stages.diagnoses(outcome.status, fault, options):
            self._diagnose(stage, outcome, arch, module, limits, options)
        return outcome

    def _profile(self, stage: Stage, task: Task, arch: Arch, module: CompiledModule, limits: StageLimits,
                 metrics: GpuMetrics, static_timeout_s: float) -> StageResult:  # fmt: skip
        """An Nsight Compute pass of a correct attempt; its figures go into `metrics`."""
        if stage is Stage.PROFILE:
            result, metrics.targets = profile.profile_stage(module.cubin, module.plan, task.targets[arch], self.device,
                                                            limits.profile)  # fmt: skip
        else:
            scratch_ms = metrics.timing.scratch_init_ms if metrics.timing else None
            result, metrics.perf = perf.perf_stage(task, module, arch, self._library_profiles, limits.perf,
                                                   static_timeout_s, scratch_ms)  # fmt: skip
        return result

    def _diagnose(self, stage: Stage, outcome: GpuOutcome, arch: Arch, module: CompiledModule, limits: StageLimits,
                  options: EvalOptions) -> None:  # fmt: skip
        """A compute-sanitizer pass: a fault it locates is named in the message; errors it finds in an attempt the
        checks passed make that attempt a runtime error, with no speedup."""
        result = sanitizer.sanitize_module(stage, module, arch, self.device, limits.memcheck, options.static_timeout_s)
        outcome.stages.append(result)
        if result.state is not StageState.FAILED:
            return
        if outcome.status is Status.RUNTIME_ERROR:
            first = sanitizer.Finding.model_validate(result.detail["findings"][0])
            outcome.message += "\nLocated: " + first.line_text()
        elif outcome.status is Status.PASSED:
            outcome.status, outcome.message = Status.RUNTIME_ERROR, f"memcheck: {result.message}"
            if outcome.metrics.timing:
                outcome.metrics.timing = outcome.metrics.timing.without_speedup()

    def _in_worker(self, request: WorkerRequest, limits: StageLimits, module: CompiledModule,
                   arch: Arch) -> tuple[GpuOutcome, str | None]:  # fmt: skip
        """The worker's stages of one request, and the driver error of the kernel's fault, if it faulted."""
        if self._proc is None or self._proc.poll() is not None:
            try:
                self._start()
            except RuntimeError as e:
                return GpuOutcome(status=Status.RUNTIME_ERROR, message=str(e), stages=[]), None
        try:
            self._proc.stdin.write(line(request))
            self._proc.stdin.flush()
        except OSError:  # it died since the last attempt; one fresh start
            self._kill()
            return self._in_worker(request, limits, module, arch)
        done: list[StageResult] = []
        current, limited = Stage.RUN, "run"
        deadline = time.monotonic() + limits.run

        def failed(status: Status, text: str) -> tuple[GpuOutcome, None]:
            done.append(StageResult(name=current, state=StageState.FAILED, message=text))
            return GpuOutcome(status=status, message=text, stages=done), None

        while True:
            try:
                message = self._next(deadline - time.monotonic())
            except queue.Empty:
                budget = procs.Budget(hang.LOCATE_S)  # cuda-gdb looks at the warps while they still hang
                kernels = sorted({launch.kernel for launch in module.plan.launches})
                snap = hang.snapshot(self._proc.pid, kernels, hang.CUDA_GDB_S) if limited != "baseline" else None
                self._kill()  # the next attempt starts a fresh worker
                self.restarts += 1
                outcome, _ = failed(Status.TIMEOUT, _timeout_text(current, limited, limits))
                if snap is not None:  # the library's own hang is not the answer's to locate
                    located = hang.locate(snap, module, arch, budget)
                    done[-1].message += "\n\n" + located.text()
                    done[-1].detail["hang"] = located.model_dump()
                return outcome, None
            if message is None:
                code = self._proc.wait()
                tail = self._log_tail(600)
                self._proc = None
                text = f"the GPU worker died (exit code {code}) during the {current} stage" + (
                    f"; its last output: {tail}" if tail else ""
                )
                return failed(Status.RUNTIME_ERROR, text)
            if isinstance(message, Progress):  # a stage, or a part of one, begins: its own limit starts now
                current, limited = message.stage, message.limited
                deadline = time.monotonic() + limits.of(limited)
            elif isinstance(message, StageDone):
                done.append(message.result)
            elif isinstance(message, Result):
                if message.sticky:
                    self._kill()  # the next attempt starts a fresh worker
                    self.restarts += 1
                if message.error:
                    done.append(StageResult(name=current, state=StageState.FAILED, message=message.error[-2000:]))
                outcome = GpuOutcome(status=message.status, message=message.message, stages=done,
                                     metrics=message.metrics)  # fmt: skip
                return outcome, message.fault
            else:  # a line that does not read, or a start-up message mid-request: a worker not to be trusted further
                self._kill()
                self.restarts += 1
                what = str(message) if isinstance(message, ProtocolError) else f"the GPU worker sent {message.kind!r}"
                return failed(Status.RUNTIME_ERROR, f"during the {current} stage, {what}")


def _put(done: list[StageResult], result: StageResult) -> None:
    """`result` in the place of the worker's stage of that name (Nsight Compute's count where CUPTI's was skipped; its
    detail keeps why, under "cupti"), else after the others."""
    at = next((i for i, s in enumerate(done) if s.name is result.name), None)
    if at is None:
        done.append(result)
        return
    if "cupti" in done[at].detail:
        result.detail = {**result.detail, "cupti": done[at].detail["cupti"]}
    done[at] = result


def _timeout_text(stage: str, part: str, limits: StageLimits) -> str:
    """What timed out, the limit and where it comes from, and what to look at."""
    text = f"no result within {limits.of(part):.0f} s during the {stage} stage ({PARTS[part]})"
    if part == "baseline":
        return text
    basis = limits.basis if part in ("run", "check", "recheck", "rerun") else "that fits the timing budget"
    return f"{text}, a limit {basis}. Most likely {TIMEOUT_HINT}"
