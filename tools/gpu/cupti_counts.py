"""Executed target instructions counted in the GPU worker itself, per candidate launch, with CUPTI's range profiler
(hardware counters; cupti_range_profiler.h and cupti_profiler_host.h of CUDA 13.0) through ctypes on libcupti: the
profile stage's default for counts (Profile.COUNTS), in place of a fresh Nsight Compute process per attempt.

Which counter counts each target group, and why it decides as Nsight Compute's per-opcode counts do (the opcode lists
are CUPTI 13.0's own descriptions of the metrics, which tests/tools/gpu/test_cupti_counts.py reads back from the
library; the values were measured on our H200 against ncu by tools/dev/probe_h200.py):

- sm_90a wgmma (`^[HQI]GMMA`): `sm__inst_executed_pipe_tensor_op_gmma.sum`, warp instructions on the tensor pipe's
  gmma path: HGMMA/QGMMA/IGMMA/BGMMA. It equals ncu's warp-level `sass__inst_executed_per_opcode` HGMMA count
  (573,440 of 573,440 for the reference GEMM at M=1024). wgmma is `.sync.aligned`: every thread of the warp executes
  it, so ncu's predicate-true thread-level count is 32× that (18,350,080, seen) and the count is > 0 exactly when
  ncu's predicate-true count is. Where it cannot decide the same: a kernel whose every wgmma is predicated off (it
  would count them, ncu's predicate-true count would not; no correct kernel we know of does this).
- sm_90a tma (`^UTMA(LDG|STG|REDG)`): `smsp__sass_inst_executed_op_tma_{ld,st,red}.sum`, warp instructions of
  UTMALDG/UTMASTG/UTMAREDG (and UBLKCP/UBLKRED) that executed with their predicate true: 35,840 for the GEMM, where
  ncu counts 293,056 warp-level UTMALDG (predicated-off ones included) and 1,146,880 = 35,840 × 32 predicate-true
  threads. It is ncu's predicate-true thread-level count / 32 where the issuing warp is converged (a uniform
  instruction: all its threads share the predicate), and > 0 exactly when that count is — the paper's predicate-true
  rule (tools/gpu/profile.py decides on the same).
- A counter also counts opcodes outside its group (BGMMA; UBLKCP, UBLKRED: the non-tensor bulk copies): where the
  launched kernels' SASS holds one of those, the counter cannot tell them apart and Nsight Compute counts instead.
- sm_100a (tcgen05, tmem, tma): Nsight Compute. CUPTI 13.0 names candidates for GB100
  (`smsp__sass_inst_executed_op_utcmma`, `_tmem`, `_tma_*`), but none was measured on a B200.

The worker calls `Counter.count` after its check (and time) stages pass; the profiler is enabled for that attempt
only and always disabled and de-initialized afterwards, a kernel fault included, and never while CUPTI's activity API
times kernels (tools/gpu/cupti_user.py). CountUnavailable (no library, an
unsupported device or arch, a CUPTI error) leaves the count to Nsight Compute, in the service."""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.schema import Arch, TargetGroup
from tools.gpu import cupti_user

COUNTER = "cupti"  # what the record names as the counter (Nsight Compute's: "ncu")
MAX_PASSES = 16  # the counters below need 1 or 2 (cuptiProfilerHostGetNumOfPasses); more means something is wrong


class CuptiError(RuntimeError):
    """A CUPTI call that failed, with CUPTI's own message."""


class CountUnavailable(Exception):
    """CUPTI cannot count this attempt's target groups: Nsight Compute counts them. `lasting`: it never will in this
    process (no library, unsupported device), so the worker stops asking."""

    def __init__(self, reason: str, lasting: bool = False):
        super().__init__(reason)
        self.lasting = lasting


# ------------------------------------------------------------------------------- the target groups' counters


@dataclass(frozen=True)
class GroupCounter:
    metrics: tuple[str, ...]  # summed
    opcodes: tuple[str, ...]  # every base opcode the metrics count (CUPTI's descriptions), the group's and others
    ncu: str  # which of ncu's counts it equals: "warp" (warp-level) or "thread/32" (predicate-true threads / 32)


COUNTERS: dict[Arch, dict[str, GroupCounter]] = {
    Arch.SM_90A: {
        "wgmma": GroupCounter(
            ("sm__inst_executed_pipe_tensor_op_gmma.sum",), ("HGMMA", "QGMMA", "IGMMA", "BGMMA"), "warp"
        ),
        "tma": GroupCounter(
            tuple(f"smsp__sass_inst_executed_op_tma_{op}.sum" for op in ("ld", "st", "red")),
            ("UTMALDG", "UTMASTG", "UTMAREDG", "UBLKCP", "UBLKRED"),
            "thread/32",
        ),
    },
}


def plan(arch: Arch, groups: list[TargetGroup], opcodes: Mapping[str, int] | None) -> dict[str, GroupCounter]:
    """The counter of each group, for launched kernels whose static SASS holds `opcodes` (base opcode → count);
    CountUnavailable when CUPTI cannot count one of them as Nsight Compute would."""
    counters = COUNTERS.get(arch)
    if counters is None:
        raise CountUnavailable(f"no CUPTI counters are mapped for {arch}'s target groups")
    missing = [g.name for g in groups if g.name not in counters]
    if missing:
        raise CountUnavailable(f"no CUPTI counter for {', '.join(missing)}")
    if opcodes is None:
        raise CountUnavailable("the module carries no static SASS opcodes to tell what the counters count")
    for g in groups:
        others = [op for op in counters[g.name].opcodes if opcodes.get(op) and not _in_group(op, g)]
        if others:
            raise CountUnavailable(
                f"the {g.name} counter also counts {', '.join(others)}, which the kernels hold: it cannot tell them "
                "from the group's"
            )
    return {g.name: counters[g.name] for g in groups}


def _in_group(opcode: str, group: TargetGroup) -> bool:
    return any(re.search(p, opcode) for p in group.sass_patterns)


def metrics_of(counters: Mapping[str, GroupCounter]) -> list[str]:
    return list(dict.fromkeys(m for c in counters.values() for m in c.metrics))


def summarize(launches: list[dict[str, float]], groups: list[TargetGroup],
              counters: Mapping[str, GroupCounter]) -> dict[str, Any]:  # fmt: skip
    """The profile stage's summary (the keys tools/gpu/profile.py's summarize gives that a decision reads) from each
    launch's metric values: per-group counts, targets_met, the paper's tag; decided on count > 0."""
    total: dict[str, float] = {}
    for launch in launches:
        for metric, value in launch.items():
            total[metric] = total.get(metric, 0.0) + value
    counts = {g.name: round(sum(total.get(m, 0.0) for m in counters[g.name].metrics)) for g in groups}
    return {
        "counter": COUNTER,
        "target_counts": counts,
        "target_executed": {g.name: counts[g.name] > 0 for g in groups},
        "targets_met": all(counts[g.name] > 0 for g in groups if g.required),
        "paper_tag": any(counts[g.name] > 0 for g in groups if g.paper_tag),
        "metrics": {name: [c.ncu, *c.metrics] for name, c in counters.items()},
        "launch_values": [{m: round(v) for m, v in launch.items()} for launch in launches],
    }


# ------------------------------------------------------------------------------------ CUPTI through ctypes
# The params structs of cupti_profiler_target.h, cupti_target.h, cupti_profiler_host.h and cupti_range_profiler.h
# (CUDA 13.0), as "field:type …" after the structSize and pPriv every one starts with, each named by its C type (the
# tests compile the headers and compare every field's offset). structSize is the header's _STRUCT_SIZE macro: the end
# of the field the macro names, the last one except where a header says otherwise.

_CTYPES = {"size": ctypes.c_size_t, "ptr": ctypes.c_void_p, "str": ctypes.c_char_p, "int": ctypes.c_int,
           "u8": ctypes.c_uint8, "u16": ctypes.c_uint16, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64}  # fmt: skip
_HEAD = "structSize:size pPriv:ptr"


def params(c_name: str, spec: str, *, head: bool = True, size_field: str | None = None,
           types: Mapping[str, type] | None = None) -> type[ctypes.Structure]:  # fmt: skip
    """A ctypes struct for the C struct `c_name`; `types`: structs that fields of it embed."""
    fields = [f.split(":") for f in (f"{_HEAD} {spec}" if head else spec).split()]
    known = {**_CTYPES, **(types or {})}
    cls = type(c_name, (ctypes.Structure,), {"_fields_": [(f, known[t]) for f, t in fields]})
    end = getattr(cls, size_field or fields[-1][0])
    cls.STRUCT_SIZE = end.offset + end.size  # type: ignore[attr-defined]
    cls.C_NAME = c_name  # type: ignore[attr-defined]
    return cls


ProfilerInitialize = params("CUpti_Profiler_Initialize_Params", "")
ProfilerDeInitialize = params("CUpti_Profiler_DeInitialize_Params", "")
DeviceSupported = params("CUpti_Profiler_DeviceSupported_Params", "cuDevice:int isSupported:int architecture:int "
                         "sli:int vGpu:int confidentialCompute:int cmp:int wsl:int api:int")  # fmt: skip
GetChipName = params("CUpti_Device_GetChipName_Params", "deviceIndex:size pChipName:str")
GetCounterAvailability = params("CUpti_Profiler_GetCounterAvailability_Params", "ctx:ptr "
                                "counterAvailabilityImageSize:size pCounterAvailabilityImage:ptr")  # fmt: skip
HostInitialize = params("CUpti_Profiler_Host_Initialize_Params", "profilerType:int pChipName:str "
                        "pCounterAvailabilityImage:ptr pHostObject:ptr")  # fmt: skip
HostDeinitialize = params("CUpti_Profiler_Host_Deinitialize_Params", "pHostObject:ptr")
HostGetBaseMetrics = params("CUpti_Profiler_Host_GetBaseMetrics_Params", "pHostObject:ptr metricType:int "
                            "ppMetricNames:ptr numMetrics:size")  # fmt: skip
HostGetMetricProperties = params("CUpti_Profiler_Host_GetMetricProperties_Params", "pHostObject:ptr pMetricName:str "
                                 "pDescription:str pHwUnit:str pDimUnit:str metricType:int")  # fmt: skip
HostConfigAddMetrics = params("CUpti_Profiler_Host_ConfigAddMetrics_Params", "pHostObject:ptr ppMetricNames:ptr "
                              "numMetrics:size")  # fmt: skip
HostGetConfigImageSize = params("CUpti_Profiler_Host_GetConfigImageSize_Params", "pHostObject:ptr "
                                "configImageSize:size")  # fmt: skip
HostGetConfigImage = params("CUpti_Profiler_Host_GetConfigImage_Params", "pHostObject:ptr configImageSize:size "
                            "pConfigImage:ptr")  # fmt: skip
HostGetNumOfPasses = params("CUpti_Profiler_Host_GetNumOfPasses_Params", "configImageSize:size pConfigImage:ptr "
                            "numOfPasses:size")  # fmt: skip
HostEvaluate = params("CUpti_Profiler_Host_EvaluateToGpuValues_Params", "pHostObject:ptr pCounterDataImage:ptr "
                      "counterDataImageSize:size rangeIndex:size ppMetricNames:ptr numMetrics:size "
                      "pMetricValues:ptr")  # fmt: skip
RangeEnable = params("CUpti_RangeProfiler_Enable_Params", "ctx:ptr pRangeProfilerObject:ptr")
RangeDisable = params("CUpti_RangeProfiler_Disable_Params", "pRangeProfilerObject:ptr")
RangeStart = params("CUpti_RangeProfiler_Start_Params", "pRangeProfilerObject:ptr")
RangeStop = params("CUpti_RangeProfiler_Stop_Params", "pRangeProfilerObject:ptr passIndex:size "
                   "targetNestingLevel:size isAllPassSubmitted:u8")  # fmt: skip
RangeDecode = params("CUpti_RangeProfiler_DecodeData_Params", "pRangeProfilerObject:ptr numOfRangeDropped:size")
RangeSetConfig = params("CUpti_RangeProfiler_SetConfig_Params", "pRangeProfilerObject:ptr configSize:size "
                        "pConfig:ptr counterDataImageSize:size pCounterDataImage:ptr range:int replayMode:int "
                        "maxRangesPerPass:size numNestingLevels:u16 minNestingLevel:u16 passIndex:size "
                        "targetNestingLevel:u16")  # fmt: skip
RangeGetCounterDataSize = params("CUpti_RangeProfiler_GetCounterDataSize_Params", "pRangeProfilerObject:ptr "
                                 "pMetricNames:ptr numMetrics:size maxNumOfRanges:size maxNumRangeTreeNodes:u32 "
                                 "counterDataSize:size")  # fmt: skip
RangeCounterDataInitialize = params("CUpti_RangeProfiler_CounterDataImage_Initialize_Params",
                                    "pRangeProfilerObject:ptr counterDataSize:size pCounterData:ptr")  # fmt: skip
RangeGetCounterDataInfo = params("CUpti_RangeProfiler_GetCounterDataInfo_Params", "pCounterDataImage:ptr "
                                 "counterDataImageSize:size numTotalRanges:size")  # fmt: skip

SUPPORT_FIELDS = ("isSupported", "architecture", "sli", "vGpu", "confidentialCompute", "cmp", "wsl")
SUPPORT_LEVELS = {0: "unknown", 1: "unsupported", 2: "disabled", 3: "supported"}
SUPPORTED = 3
API_RANGE_PROFILING = 0  # CUpti_Profiler_API
AUTO_RANGE, USER_REPLAY = 1, 3  # CUpti_ProfilerRange, CUpti_ProfilerReplayMode
RANGE_PROFILER_TYPE, COUNTER_METRIC = 0, 0  # CUpti_ProfilerType, CUpti_MetricType


def library_candidates() -> list[str]:
    """libcupti.so files this process can use, best first: PTXBENCH_CUPTI when set (the one to use, as PTXBENCH_NCU
    names ncu), one already loaded (torch's, from its nvidia-cuda-cupti wheel: one copy of CUPTI per process), then
    the CUDA wheels' on sys.path, then the toolkit's."""
    if os.environ.get("PTXBENCH_CUPTI"):
        return [os.environ["PTXBENCH_CUPTI"]]
    loaded = loaded_libraries("libcupti.so")
    patterns = [f"{p}/nvidia/{sub}/lib/libcupti.so*" for p in sys.path if p for sub in ("cu13", "cuda_cupti")]
    toolkits = [os.environ["CUDA_HOME"]] if os.environ.get("CUDA_HOME") else []
    for toolkit in [*toolkits, "/usr/local/cuda"]:
        patterns += [os.path.join(toolkit, sub, "libcupti.so*")
                     for sub in ("extras/CUPTI/lib64", "lib64", "lib", "targets/x86_64-linux/lib")]  # fmt: skip
    found = [os.path.realpath(p) for p in loaded]
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            if os.path.realpath(path) not in found:
                found.append(os.path.realpath(path))
    return found


def loaded_libraries(name: str) -> list[str]:
    """Files of this process's mapped libraries whose name contains `name`."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    return sorted({line.split()[-1] for line in maps.splitlines() if name in line and line.split()[-1].startswith("/")})


class Cupti:
    """libcupti through ctypes. `cupti("cuptiX", Params, field=value…)` fills the params struct (a ctypes array given
    for a pointer field passes its address), calls, and returns the struct, or raises CuptiError with CUPTI's own
    message. The profiler's nvperf libraries, beside libcupti, are loaded first: CUPTI opens them by name."""

    def __init__(self, path: str):
        self.path = path
        folder = os.path.dirname(path)
        for helper in ("libnvperf_host.so", "libnvperf_target.so"):
            if os.path.isfile(os.path.join(folder, helper)):
                ctypes.CDLL(os.path.join(folder, helper), mode=ctypes.RTLD_GLOBAL)
        self.lib = ctypes.CDLL(path)
        self.lib.cuptiGetResultString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]

    def __call__(self, function: str, cls: type[ctypes.Structure], **values: Any) -> Any:
        p = cls(**{k: ctypes.addressof(v) if isinstance(v, ctypes.Array) else v for k, v in values.items()})
        p.structSize = cls.STRUCT_SIZE  # type: ignore[attr-defined]
        fn = getattr(self.lib, function)
        fn.argtypes = [ctypes.c_void_p]
        result = fn(ctypes.byref(p))
        if result != 0:
            text = ctypes.c_char_p()
            self.lib.cuptiGetResultString(result, ctypes.byref(text))
            raise CuptiError(f"{function}: {result} {(text.value or b'').decode()}")
        return p

    def support(self, device: int, api: int) -> dict[str, str]:
        """Whether the device supports `api`, field by field (the profiler initialized)."""
        p = self("cuptiProfilerDeviceSupported", DeviceSupported, cuDevice=device, api=api)
        return {f: SUPPORT_LEVELS.get(getattr(p, f), str(getattr(p, f))) for f in SUPPORT_FIELDS}

    def chip(self, device: int) -> bytes:
        return self("cuptiDeviceGetChipName", GetChipName, deviceIndex=device).pChipName

    @contextmanager
    def host(self, chip: bytes, availability: Any = None) -> Iterator[int]:
        """A profiler host object for `chip` (CPU only: metric names, config images, evaluation), then deinitialized."""
        host = self("cuptiProfilerHostInitialize", HostInitialize, profilerType=RANGE_PROFILER_TYPE, pChipName=chip,
                    pCounterAvailabilityImage=availability).pHostObject  # fmt: skip
        try:
            yield host
        finally:
            _quietly(self, "cuptiProfilerHostDeinitialize", HostDeinitialize, pHostObject=host)

    def describe(self, host: int, metric: str) -> str:
        """CUPTI's description of `metric`; CuptiError when the host does not know it."""
        p = self("cuptiProfilerHostGetMetricProperties", HostGetMetricProperties, pHostObject=host,
                 pMetricName=metric.encode())  # fmt: skip
        return (p.pDescription or b"").decode()

    def config(self, host: int, metrics: list[str]) -> tuple[Any, int]:
        """The config image that collects `metrics`, and the passes it needs."""
        names = names_array(metrics)
        self("cuptiProfilerHostConfigAddMetrics", HostConfigAddMetrics, pHostObject=host, ppMetricNames=names,
             numMetrics=len(metrics))  # fmt: skip
        size = self("cuptiProfilerHostGetConfigImageSize", HostGetConfigImageSize, pHostObject=host).configImageSize
        image = (ctypes.c_uint8 * size)()
        self("cuptiProfilerHostGetConfigImage", HostGetConfigImage, pHostObject=host, configImageSize=size,
             pConfigImage=image)  # fmt: skip
        passes = self("cuptiProfilerHostGetNumOfPasses", HostGetNumOfPasses, configImageSize=size,
                      pConfigImage=image).numOfPasses  # fmt: skip
        return image, passes


def names_array(names: list[str]) -> Any:
    return (ctypes.c_char_p * len(names))(*[n.encode() for n in names])


# --------------------------------------------------------------------------------------- the worker's counter


class Counter:
    """The worker's CUPTI counter for its one GPU (`device`, the CUDA ordinal of the worker's context): opened on
    first use; once CUPTI proves unusable here for good (CountUnavailable lasting), every later call says so at once."""

    def __init__(self, device: int = 0):
        self.device = device
        self._cupti: Cupti | None = None
        self._chip: bytes | None = None
        self._lasting: str | None = None

    def _open(self) -> tuple[Cupti, bytes]:
        if self._lasting:
            raise CountUnavailable(self._lasting, lasting=True)
        if self._cupti is None or self._chip is None:
            try:
                self._cupti, self._chip = self._first_open()
            except CountUnavailable as e:
                self._lasting = str(e)
                raise
        return self._cupti, self._chip

    def _first_open(self) -> tuple[Cupti, bytes]:
        candidates = library_candidates()
        if not candidates:
            raise CountUnavailable("libcupti is not installed here", lasting=True)
        try:
            cupti = Cupti(candidates[0])
        except OSError as e:
            raise CountUnavailable(f"libcupti did not load ({candidates[0]}): {e}", lasting=True) from None
        try:
            cupti("cuptiProfilerInitialize", ProfilerInitialize)
            try:
                support = cupti.support(self.device, API_RANGE_PROFILING)
                chip = cupti.chip(self.device)
            finally:
                cupti("cuptiProfilerDeInitialize", ProfilerDeInitialize)
        except (CuptiError, AttributeError) as e:  # AttributeError: a libcupti without these functions
            raise CountUnavailable(f"CUPTI's profiler cannot start here: {e}", lasting=True) from None
        refused = {f: level for f, level in support.items() if level != "supported"}
        if refused:
            raise CountUnavailable(f"CUPTI's range profiler does not support this device: {refused}", lasting=True)
        return cupti, chip

    def count(
        self, context: int, counters: Mapping[str, GroupCounter], launches: int, run_pass: Callable[[], None],
        before_pass: Callable[[], None],
    ) -> tuple[list[dict[str, float]], dict]:  # fmt: skip
        """Each of the `launches` candidate launches' metric values, over as many passes as the metrics need: per pass
        `before_pass` (outside the profiled range: resetting scratch), then `run_pass` (the candidate's launches, and
        a synchronize). Also what it cost. CountUnavailable on a CUPTI error; what `run_pass` raises (a kernel fault)
        passes through, the profiler disabled and de-initialized first either way."""
        cupti, chip = self._open()
        metrics = metrics_of(counters)
        start = time.perf_counter()
        try:
            with cupti_user.holding("range profiler"), _profiler(cupti) as availability_of:
                availability = availability_of(context)
                with cupti.host(chip, availability) as host:
                    image, passes = cupti.config(host, metrics)
                    if passes > MAX_PASSES:
                        raise CountUnavailable(f"the counters need {passes} passes, more than {MAX_PASSES}")
                    values, ran = _collect(cupti, host, context, image, metrics, launches, run_pass, before_pass)
        except CuptiError as e:
            raise CountUnavailable(f"CUPTI failed: {e}") from None
        except cupti_user.CuptiBusy as e:
            raise CountUnavailable(str(e)) from None
        cost = {"library": cupti.path, "chip": chip.decode(), "passes": ran, "seconds": time.perf_counter() - start}
        return values, cost


@contextmanager
def _profiler(cupti: Cupti) -> Iterator[Callable[[int], Any]]:
    """The profiler initialized for one attempt, de-initialized after however it ends; yields the counter availability
    image of a context."""
    cupti("cuptiProfilerInitialize", ProfilerInitialize)

    def availability_of(context: int) -> Any:
        size = cupti("cuptiProfilerGetCounterAvailability", GetCounterAvailability,
                     ctx=context).counterAvailabilityImageSize  # fmt: skip
        image = (ctypes.c_uint8 * size)()
        cupti("cuptiProfilerGetCounterAvailability", GetCounterAvailability, ctx=context,
              counterAvailabilityImageSize=size, pCounterAvailabilityImage=image)  # fmt: skip
        return image

    try:
        yield availability_of
    finally:
        _quietly(cupti, "cuptiProfilerDeInitialize", ProfilerDeInitialize)


def _collect(
    cupti: Cupti, host: int, context: int, image: Any, metrics: list[str], launches: int,
    run_pass: Callable[[], None], before_pass: Callable[[], None],
) -> tuple[list[dict[str, float]], int]:  # fmt: skip
    """The range profiler on the context for one launch sequence: auto ranges (one per launch), user replay (the
    sequence once per pass); per range, the metrics' values."""
    names = names_array(metrics)
    profiler = cupti("cuptiRangeProfilerEnable", RangeEnable, ctx=context).pRangeProfilerObject
    try:
        size = cupti("cuptiRangeProfilerGetCounterDataSize", RangeGetCounterDataSize, pRangeProfilerObject=profiler,
                     pMetricNames=names, numMetrics=len(metrics), maxNumOfRanges=launches,
                     maxNumRangeTreeNodes=launches).counterDataSize  # fmt: skip
        data = (ctypes.c_uint8 * size)()
        cupti("cuptiRangeProfilerCounterDataImageInitialize", RangeCounterDataInitialize,
              pRangeProfilerObject=profiler, counterDataSize=size, pCounterData=data)  # fmt: skip
        cupti("cuptiRangeProfilerSetConfig", RangeSetConfig, pRangeProfilerObject=profiler, configSize=len(image),
              pConfig=image, counterDataImageSize=size, pCounterDataImage=data, range=AUTO_RANGE,
              replayMode=USER_REPLAY, maxRangesPerPass=launches, numNestingLevels=1, minNestingLevel=1, passIndex=0,
              targetNestingLevel=1)  # fmt: skip
        ran = 0
        while True:
            if ran == MAX_PASSES:
                raise CountUnavailable(f"the range profiler still wanted passes after {MAX_PASSES}")
            before_pass()
            cupti("cuptiRangeProfilerStart", RangeStart, pRangeProfilerObject=profiler)
            run_pass()
            ran += 1
            if cupti("cuptiRangeProfilerStop", RangeStop, pRangeProfilerObject=profiler).isAllPassSubmitted:
                break
        cupti("cuptiRangeProfilerDecodeData", RangeDecode, pRangeProfilerObject=profiler)
        ranges = cupti("cuptiRangeProfilerGetCounterDataInfo", RangeGetCounterDataInfo, pCounterDataImage=data,
                       counterDataImageSize=size).numTotalRanges  # fmt: skip
        if ranges != launches:
            raise CountUnavailable(f"the range profiler recorded {ranges} range(s) for {launches} launch(es)")
        out = []
        for index in range(ranges):
            values = (ctypes.c_double * len(metrics))()
            cupti("cuptiProfilerHostEvaluateToGpuValues", HostEvaluate, pHostObject=host, pCounterDataImage=data,
                  counterDataImageSize=size, rangeIndex=index, ppMetricNames=names, numMetrics=len(metrics),
                  pMetricValues=values)  # fmt: skip
            out.append(dict(zip(metrics, values, strict=True)))
        return out, ran
    finally:
        _quietly(cupti, "cuptiRangeProfilerDisable", RangeDisable, pRangeProfilerObject=profiler)


def _quietly(cupti: Cupti, function: str, cls: type[ctypes.Structure], **values: Any) -> None:
    """A clean-up call after a failure, whose own error (a context a fault left unusable) must not hide that one."""
    with contextlib.suppress(CuptiError):
        cupti(function, cls, **values)
