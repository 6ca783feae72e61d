"""GPU time per run from CUPTI's activity records (NVIDIA's cupti-python, module `cupti`): the paper's way of timing a
function alone, as flashinfer's `bench_gpu_time_with_cupti` (which the paper's harness calls) does it. The paper's
figure uses it under eval.speedup=paper (tools/gpu/timing.py); CUDA events where it is unavailable.

Each run: the untimed L2 flush, a synchronize, CUPTI's host timestamp, the function's launches, the timestamp again,
a synchronize (the GPU idles between runs, as in flashinfer's loop). CUPTI records every runtime and driver API call
(its host start time and correlation id) and every kernel, memset and memcpy on the GPU (start, end, and the
correlation id of the call that launched it). A run's GPU work is the records whose launching call started inside
its host window — every kernel the baseline library launches, the candidate's scratch reset and each of its launches;
never the flush, launched before the window. Its time is the sum of their durations (the GPU's time on the run's
work, gaps between kernels left out); the span, first start to last end (flashinfer's figure, gaps in), is kept
beside it. For one kernel the two are the same.

How cupti-python finds libcupti: it needs a CUDA 13 driver, then opens `nvidia/cu13/lib/libcupti.so.13` of the
`nvidia-cuda-cupti` wheel it depends on (found through `importlib.util.find_spec("nvidia")`), the copy torch loads
and tools/gpu/cupti_counts.py prefers, so the process holds one CUPTI. On a machine without a driver (a CPU
machine) `import cupti` works and its first call raises NotSupportedError: the timer says so once and stays off.

The attribution (`attribute`) and the statistics' input (`traced`) are pure functions of records
(tests/tools/gpu/test_cupti_durations.py); `KernelTimer` is the part on the GPU
(tests/gpu/test_cupti_durations_gpu.py)."""

from __future__ import annotations

import bisect
import contextlib
import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch
from pydantic import BaseModel

from tools.extras import pip_command
from tools.gpu import cupti_user
from tools.gpu.cupti_counts import loaded_libraries

SOURCE = "cupti"  # what the paper's figure names as its source (CUDA events': "events")
API_KINDS = ("RUNTIME", "DRIVER")  # the launching calls: host start, correlation id
WORK_KINDS = ("CONCURRENT_KERNEL", "MEMSET", "MEMCPY")  # the GPU's work: start, end, correlation id
BUFFER_BYTES = 8 << 20  # per activity buffer CUPTI asks for; 0 records as the limit: as many as fit


class DurationsUnavailable(Exception):
    """CUPTI cannot time this (CUDA events do). `lasting`: it never will in this process (no cupti-python, no
    driver for it, two copies of libcupti), so the timer stops trying. Not a RuntimeError: the worker reads those
    as the candidate's faults."""

    def __init__(self, reason: str, lasting: bool = False):
        super().__init__(reason)
        self.lasting = lasting


class ApiCall(NamedTuple):
    start: int  # host time the call began (ns, CUPTI's clock, as cupti.get_timestamp)
    correlation_id: int


class GpuWork(NamedTuple):
    name: str  # the kernel's (mangled) name, or "memset" / "memcpy"
    start: int  # GPU start and end (ns, CUPTI's clock)
    end: int
    correlation_id: int  # of the API call that launched it


class RunWork(NamedTuple):
    """One run's GPU work."""

    total_ns: int  # the sum of the durations
    span_ns: int  # first start to last end
    names: tuple[str, ...]  # in start order


class Traced(BaseModel):
    """One function's timed runs by CUPTI, in trials (ms)."""

    per_trial: list[list[float]]  # each run's summed durations
    span_per_trial: list[list[float]]
    kernels: list[str]  # a run's GPU work by name, in start order (the first run's)
    kernels_vary: bool  # some run's work differs from the first's (names or count)


# ------------------------------------------------------------------------------------------- pure part


def attribute(windows: list[tuple[int, int]], calls: list[ApiCall], work: list[GpuWork]) -> list[RunWork]:
    """Each run's GPU work: the records launched by the calls that started inside its host window [t0, t1] (windows
    in run order, disjoint). DurationsUnavailable when a run has none (records dropped or never delivered) or a
    record has no duration."""
    ordered = sorted(calls)
    starts = [c.start for c in ordered]
    launched: dict[int, list[GpuWork]] = {}
    for w in work:
        launched.setdefault(w.correlation_id, []).append(w)
    runs = []
    for index, (t0, t1) in enumerate(windows):
        ids = {c.correlation_id for c in ordered[bisect.bisect_left(starts, t0) : bisect.bisect_right(starts, t1)]}
        mine = sorted((w for i in ids for w in launched.get(i, [])), key=lambda w: w.start)
        if not mine:
            raise DurationsUnavailable(f"CUPTI recorded no GPU work for run {index + 1} of {len(windows)}")
        bad = [w.name for w in mine if w.end <= w.start or w.start <= 0]
        if bad:
            raise DurationsUnavailable(f"CUPTI recorded {bad[0]} of run {index + 1} without a duration")
        runs.append(
            RunWork(
                total_ns=sum(w.end - w.start for w in mine),
                span_ns=max(w.end for w in mine) - mine[0].start,
                names=tuple(w.name for w in mine),
            )
        )
    return runs


def traced(runs: list[RunWork], trials: int, reps: int) -> Traced:
    """The runs of one function (`trials` × `reps`, in order) as trials of milliseconds."""
    if len(runs) != trials * reps:
        raise ValueError(f"{len(runs)} runs for {trials} trials of {reps}")
    ms = [r.total_ns / 1e6 for r in runs]
    span = [r.span_ns / 1e6 for r in runs]
    shapes = Counter(r.names for r in runs)
    return Traced(
        per_trial=[ms[t * reps : (t + 1) * reps] for t in range(trials)],
        span_per_trial=[span[t * reps : (t + 1) * reps] for t in range(trials)],
        kernels=list(runs[0].names),
        kernels_vary=len(shapes) > 1,
    )


# ------------------------------------------------------------------------------------------- on the GPU


class KernelTimer:
    """The worker's CUPTI timer: `cupti` imported on first use; once it proves unusable here for good
    (DurationsUnavailable lasting), every later call says so at once."""

    def __init__(self) -> None:
        self._cupti: Any = None
        self._lasting: str | None = None
        self.library: str | None = None  # the libcupti the activity API runs on, once it ran

    def time(
        self, functions: list[Callable[[], object]], flush: Callable[[], None], trials: int, reps: int
    ) -> list[Traced]:
        """`trials` × `reps` runs of each function, one function after the other, in one CUPTI session. What a
        function raises (a kernel fault) passes through, the session closed first; CUPTI's own failures are
        DurationsUnavailable."""
        cupti = self._open()
        calls: list[ApiCall] = []
        work: list[GpuWork] = []
        windows: list[list[tuple[int, int]]] = [[] for _ in functions]
        with self._tracing(cupti, calls, work):
            for fn, mine in zip(functions, windows, strict=True):
                for _ in range(trials * reps):
                    flush()
                    torch.cuda.synchronize()
                    t0 = _cupti_call(cupti.get_timestamp)
                    fn()
                    mine.append((t0, _cupti_call(cupti.get_timestamp)))
                    torch.cuda.synchronize()
        self._one_library()
        return [traced(attribute(w, calls, work), trials, reps) for w in windows]

    def _open(self) -> Any:
        if self._lasting:
            raise DurationsUnavailable(self._lasting, lasting=True)
        if self._cupti is None:
            try:
                from cupti import cupti  # cupti-python; absent where it is not installed
            except ImportError as e:
                self._lasting = f"cupti-python is not installed here ({e}): {pip_command('cupti')}"
                raise DurationsUnavailable(self._lasting, lasting=True) from None
            self._cupti = cupti
        return self._cupti

    @contextmanager
    def _tracing(self, cupti: Any, calls: list[ApiCall], work: list[GpuWork]) -> Iterator[None]:
        """The activity kinds enabled and the records collected for the block; afterwards flushed (when the block
        ended normally) and disabled, however the block ended. Not finalized: after `cuptiFinalize` the range
        profiler's `cuptiProfilerInitialize` failed in the same process (CUPTI_ERROR_NOT_INITIALIZED, the H200,
        2026-12-04), and with every kind disabled CUPTI records nothing more."""
        kinds = cupti.ActivityKind
        api = {int(getattr(kinds, k)) for k in API_KINDS}
        gpu = {int(getattr(kinds, k)): k for k in WORK_KINDS}

        def completed(activities: list) -> None:  # copied out: the buffer is CUPTI's again after the callback
            for a in activities:
                if a.kind in api:
                    calls.append(ApiCall(a.start, a.correlation_id))
                elif a.kind in gpu:
                    name = a.name if gpu[a.kind] == "CONCURRENT_KERNEL" else gpu[a.kind].lower()
                    work.append(GpuWork(name, a.start, a.end, a.correlation_id))

        try:
            with cupti_user.holding("activity API"):
                enabled = []
                try:
                    for kind in (*API_KINDS, *WORK_KINDS):
                        self._enable(cupti, getattr(kinds, kind))
                        enabled.append(getattr(kinds, kind))
                    _cupti_call(cupti.activity_register_callbacks, lambda: (BUFFER_BYTES, 0), completed)
                    yield
                    _cupti_call(cupti.activity_flush_all, int(cupti.ActivityFlag.FLUSH_FORCED))
                finally:
                    for kind in enabled:
                        with contextlib.suppress(Exception):
                            cupti.activity_disable(kind)
        except cupti_user.CuptiBusy as e:
            raise DurationsUnavailable(str(e)) from None

    def _enable(self, cupti: Any, kind: Any) -> None:
        try:
            cupti.activity_enable(kind)
        except Exception as e:
            # NotSupportedError (cupti._internal.utils): no CUDA 13 driver, or no libcupti — for good.
            lasting = type(e).__name__ == "NotSupportedError"
            reason = f"CUPTI's activity API cannot start here: {type(e).__name__}: {e}"
            if lasting:
                self._lasting = reason
            raise DurationsUnavailable(reason, lasting=lasting) from None

    def _one_library(self) -> None:
        """The activity API and the range profiler must share one libcupti: two copies in a process each attach to
        the driver. Two found: this figure stands (it was measured), the timer stays off from now on."""
        copies = sorted({os.path.realpath(p) for p in loaded_libraries("libcupti.so")})
        self.library = copies[0] if len(copies) == 1 else None
        if len(copies) > 1:
            self._lasting = f"two copies of libcupti are loaded in this process: {', '.join(copies)}"


def _cupti_call(fn: Callable[..., Any], *args: Any) -> Any:
    """A cupti-python call whose failure (cuptiError, NotSupportedError, …) is CUPTI's, not the candidate's."""
    try:
        return fn(*args)
    except Exception as e:
        raise DurationsUnavailable(f"CUPTI failed: {type(e).__name__}: {e}") from None
