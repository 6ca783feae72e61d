"""The evaluation service: the caller's side of one GPU. It keeps a long-lived worker process
(tools/gpu/worker.py, a fresh interpreter spawned with `python -m`, so none of the caller's modules —
langgraph, openai — load into it), enforces a wall-clock limit per attempt, and kills and restarts the
worker after a hang, a crash or a sticky CUDA error. No kernel can take the caller down.

Profiling (Nsight Compute) and compute-sanitizer run here, on the torch-free launcher: memcheck locates every
fault of the kernel (and checks a correct attempt when asked), racecheck looks at a mismatch when asked."""

from __future__ import annotations

import base64
import contextlib
import json
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
from tools.gpu import launcher, perf, profile, sanitizer
from tools.gpu.base import CompiledModule, GpuOutcome
from tools.gpu.devices import DeviceInfo, NoDevice, device_info
from tools.gpu.limits import WORKER_START_S, StageLimits, stage_limits
from tools.options import EvalOptions, Profile

TIMEOUT_HINT = (
    "a hang: check mbarrier waits (phase parity, and that arrive.expect_tx counts exactly the bytes the TMA "
    "copies deliver), barriers that not every thread reaches, and loops whose bounds come from uninitialised values"
)
PARTS = {  # what the worker was doing in each part of a stage, for the time-out message
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
        message = self._next(self.start_timeout_s)
        if message is None or "ready" not in message:
            reason = (message or {}).get("fatal") or self._log_tail() or "it exited"
            self._kill()
            raise RuntimeError(f"the GPU worker did not start: {reason}")
        self.last_start_s = time.perf_counter() - start

    @staticmethod
    def _read(proc: subprocess.Popen, lines: queue.Queue) -> None:
        for line in proc.stdout:
            try:
                lines.put(json.loads(line))
            except json.JSONDecodeError:
                continue
        lines.put(None)  # end of stream: the worker exited

    def _next(self, timeout_s: float) -> dict | None:
        """The worker's next message; None if it exited; raises queue.Empty on time-out."""
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
                self._proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
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
        """run → check → time in the worker, then profile (and perf) and memcheck here; stops at the first
        failure."""
        outcome = self._evaluate(task, arch, module, options)
        info = self.device_info()
        outcome.device = info.name if info else None
        return outcome

    def _evaluate(self, task: Task, arch: Arch, module: CompiledModule, options: EvalOptions) -> GpuOutcome:
        seed = options.seed if options.seed is not None else int.from_bytes(os.urandom(4), "little") % 10**6
        request = {
            "op": "evaluate",
            "task": task.name,
            "plan": module.plan.model_dump(mode="json"),
            "cubin": base64.b64encode(module.cubin).decode(),
            "options": {**options.model_dump(mode="json", include=set(EvalOptions.model_fields)), "seed": seed},
        }
        limits = stage_limits(task, options)
        outcome = self._in_worker(request, limits)

        def sanitize(stage: Stage) -> StageResult:
            result = sanitizer.sanitize_module(stage, module, arch, self.device, limits.memcheck,
                                               options.static_timeout_s)  # fmt: skip
            outcome.stages.append(result)
            return result

        if outcome.status is Status.RUNTIME_ERROR and _kernel_fault(outcome):
            located = sanitize(Stage.MEMCHECK)
            if located.state is StageState.FAILED:
                first = located.detail["findings"][0]
                outcome.message += "\nLocated: " + sanitizer.Finding.model_validate(first).line_text()
        if outcome.status is Status.MISMATCH and options.racecheck:
            sanitize(Stage.RACECHECK)
        if outcome.status is not Status.PASSED:
            return outcome
        groups = task.targets[arch]
        if options.profile is not Profile.OFF:
            stage, metrics = profile.profile_stage(module.cubin, module.plan, groups, self.device, limits.profile)
            outcome.stages.append(stage)
            outcome.metrics.update(metrics)
        if options.profile is not Profile.OFF and options.wants_perf(outcome.metrics.get("speedup")):
            stage, report = perf.perf_stage(task, module.cubin, module.plan, self._library_profiles, limits.perf)
            outcome.stages.append(stage)
            if report is not None:
                outcome.metrics["perf"] = report
        if options.memcheck and sanitize(Stage.MEMCHECK).state is StageState.FAILED:
            outcome.status, outcome.message = Status.RUNTIME_ERROR, f"memcheck: {outcome.stages[-1].message}"
            outcome.metrics = {k: v for k, v in outcome.metrics.items() if not k.startswith("speedup")}
        return outcome

    def _in_worker(self, request: dict, limits: StageLimits) -> GpuOutcome:
        if self._proc is None or self._proc.poll() is not None:
            try:
                self._start()
            except RuntimeError as e:
                return GpuOutcome(status=Status.RUNTIME_ERROR, message=str(e), stages=[])
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
        except OSError:  # it died since the last attempt; one fresh start
            self._kill()
            return self._in_worker(request, limits)
        stages: list[StageResult] = []
        current = part = "run"
        deadline = time.monotonic() + limits.run
        while True:
            try:
                message = self._next(deadline - time.monotonic())
            except queue.Empty:
                self._kill()  # the next attempt starts a fresh worker
                self.restarts += 1
                text = _timeout_text(current, part, limits)
                stages.append(StageResult(name=Stage(current), state=StageState.FAILED, message=text))
                return GpuOutcome(status=Status.TIMEOUT, message=text, stages=stages)
            if message is None:
                code = self._proc.wait()
                tail = self._log_tail(600)
                self._proc = None
                text = f"the GPU worker died (exit code {code}) during the {current} stage" + (
                    f"; its last output: {tail}" if tail else ""
                )
                stages.append(StageResult(name=Stage(current), state=StageState.FAILED, message=text))
                return GpuOutcome(status=Status.RUNTIME_ERROR, message=text, stages=stages)
            if "progress" in message:  # a stage, or a part of one, begins: its own limit starts now
                current = message["progress"]
                part = message.get("part", current)
                deadline = time.monotonic() + limits.of(part)
            elif "stage_done" in message:
                stages.append(StageResult.model_validate(message["stage_done"]))
            elif "result" in message:
                result = message["result"]
                if result.get("sticky"):
                    self._kill()  # the next attempt starts a fresh worker
                    self.restarts += 1
                if result.get("error"):
                    stages.append(
                        StageResult(name=Stage(current), state=StageState.FAILED, message=result["error"][-2000:])
                    )
                metrics = {k: v for k, v in result["metrics"].items() if v is not None}
                return GpuOutcome(
                    status=Status(result["status"]), message=result["message"], stages=stages, metrics=metrics
                )


def _kernel_fault(outcome: GpuOutcome) -> bool:
    """Whether the kernel itself faulted (the worker says which driver error), not the worker or a launch."""
    return any("fault" in s.detail for s in outcome.stages if s.state is StageState.FAILED)


def _timeout_text(stage: str, part: str, limits: StageLimits) -> str:
    """What timed out, the limit and where it comes from, and what to look at."""
    text = f"no result within {limits.of(part):.0f} s during the {stage} stage ({PARTS[part]})"
    if part == "baseline":
        return text
    basis = limits.basis if part in ("run", "check", "recheck", "rerun") else "that fits the timing budget"
    return f"{text}, a limit {basis}. Most likely {TIMEOUT_HINT}"
