"""What the GPU was doing while it was timed: NVML samples (SM and memory clocks, power, temperature, the
clock-event reasons) taken on a background thread every few ms and tagged with which of the two — the
candidate or the baseline — was running; their summary per phase; and whether they make a measurement noisy.

NVML ignores CUDA_VISIBLE_DEVICES, so the device is opened by its PCI bus id (tools/gpu/devices.py). Without
NVML (no library, no driver) the state reads "not recorded: <why>" and nothing else changes.

Power capping is how an H200 runs a kernel at peak: during a bf16 cuBLAS GEMM the SW power cap reason is set
in every sample (tests/fixtures/gpu/recorded/nvml_probe_h200.json). So a cap alone is reported, with its
share of samples for the candidate's runs and the baseline's, and marks the measurement noisy only when the
paired blocks disagree; thermal and hardware slowdowns are not normal operation and mark it noisy anyway."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pydantic import BaseModel, Field

INTERVAL_S = 0.005
NOISY_SPREAD = 0.04  # an interval wider than this share of the speedup is wider than the ±2% the harness aims for
SLOWDOWN_SHARE = 0.1  # of a phase's samples, before a slowdown counts (one sample can straddle a phase change)
REASONS = {  # NVML's clock-event reason bits (nvmlClocksEventReason*)
    1: "gpu_idle",
    2: "applications_clocks_setting",
    4: "sw_power_cap",
    8: "hw_slowdown",
    16: "sync_boost",
    32: "sw_thermal_slowdown",
    64: "hw_thermal_slowdown",
    128: "hw_power_brake_slowdown",
    256: "display_clock_setting",
}
THROTTLING = {  # the reasons that lower clocks under load, in words
    "sw_power_cap": "power cap",
    "hw_slowdown": "hardware slowdown",
    "sw_thermal_slowdown": "thermal slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "hw_power_brake_slowdown": "power brake",
}
SLOWDOWNS = set(THROTTLING) - {"sw_power_cap"}


class GpuSample(BaseModel):
    t_ms: float  # since sampling began
    phase: str
    sm_mhz: int
    mem_mhz: int
    power_w: float
    temperature_c: int
    reasons: int  # the clock-event reason bits


class PhaseState(BaseModel):
    """The samples taken while one of the two ran."""

    samples: int
    sm_mhz: float = Field(description="Median SM clock.")
    sm_mhz_range: tuple[int, int]
    mem_mhz: float = Field(description="Median memory clock.")
    power_w: float = Field(description="Median board power.")
    temperature_c: int = Field(description="Highest GPU temperature.")
    reasons: dict[str, float] = Field(description="Share of samples with each clock-event reason set (those seen).")


class GpuState(BaseModel):
    """The GPU during a paired measurement, per phase ('candidate', 'baseline')."""

    recorded: bool
    note: str = Field("", description="'not recorded: <why>' when there are no samples.")
    max_sm_mhz: int | None = None
    power_limit_w: float | None = None
    phases: dict[str, PhaseState] = Field(default_factory=dict)

    def share(self, reason: str, phase: str) -> float:
        state = self.phases.get(phase)
        return state.reasons.get(reason, 0.0) if state else 0.0

    def throttling(self, library: str) -> list[str]:
        """'power cap throttling during 40% of the candidate's samples and 100% of cuBLAS's', per reason seen."""
        seen = [r for r in THROTTLING if any(self.share(r, p) for p in self.phases)]
        return [
            f"{THROTTLING[r]} throttling during {self.share(r, 'candidate'):.0%} of the candidate's samples "
            f"and {self.share(r, 'baseline'):.0%} of {library}'s"
            for r in seen
        ]

    def line(self, library: str) -> str:
        if not self.recorded:
            return f"GPU state {self.note}"
        parts = [
            f"{who} SM {p.sm_mhz:.0f} MHz ({p.sm_mhz_range[0]}–{p.sm_mhz_range[1]}), {p.power_w:.0f} W, "
            f"≤{p.temperature_c} °C"
            for name, who in (("candidate", "candidate"), ("baseline", library))
            if (p := self.phases.get(name))
        ]
        limits = f" (max SM {self.max_sm_mhz} MHz, {self.power_limit_w:.0f} W)" if self.max_sm_mhz else ""
        return "; ".join([f"GPU{limits}: " + "; ".join(parts), *self.throttling(library)])


def summarize_state(samples: list[GpuSample], max_sm_mhz: int | None, power_limit_w: float | None) -> GpuState:
    """Per phase: median clocks and power, the highest temperature, each reason's share of the samples."""
    if not samples:
        return GpuState(recorded=False, note="not recorded: no sample fell inside the timed runs")
    phases = {}
    for name in dict.fromkeys(s.phase for s in samples):
        mine = [s for s in samples if s.phase == name]
        counts = {r: sum(bool(s.reasons & bit) for s in mine) for bit, r in REASONS.items()}
        phases[name] = PhaseState(
            samples=len(mine),
            sm_mhz=statistics.median(s.sm_mhz for s in mine),
            sm_mhz_range=(min(s.sm_mhz for s in mine), max(s.sm_mhz for s in mine)),
            mem_mhz=statistics.median(s.mem_mhz for s in mine),
            power_w=statistics.median(s.power_w for s in mine),
            temperature_c=max(s.temperature_c for s in mine),
            reasons={r: n / len(mine) for r, n in counts.items() if n},
        )
    return GpuState(recorded=True, max_sm_mhz=max_sm_mhz, power_limit_w=power_limit_w, phases=phases)


def noisy_flag(
    spread: float, state: GpuState, library: str, spread_of: str = "the speedup's interval spans"
) -> str | None:
    """'noisy — …' when the speedup's interval is wider than NOISY_SPREAD of it (under eval.speedup=paper: the
    paper's trial medians spread wider) or a thermal or hardware slowdown held in SLOWDOWN_SHARE of a phase's
    samples; the throttling seen says why. None otherwise."""
    causes = [f"{spread_of} {spread:.1%}"] if spread > NOISY_SPREAD else []
    slowed = any(state.share(r, p) >= SLOWDOWN_SHARE for r in SLOWDOWNS for p in state.phases)
    if not causes and not slowed:
        return None
    return "noisy — " + "; ".join(causes + state.throttling(library))


# ------------------------------------------------------------------------------------------- sampling

Reader = Callable[[], dict]  # one reading: sm_mhz, mem_mhz, power_w, temperature_c, reasons


class Recording:
    """One measurement's samples; `phase` is what the timing loop says runs now (None: take no sample)."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self.samples: list[GpuSample] = []
        self.error: str | None = None
        self.state: GpuState | None = None  # set when the recording ends

    def mark(self, phase: str | None) -> None:
        self.phase = phase


class GpuSampler:
    """Samples one GPU's state on a background thread during a recording."""

    def __init__(self, read: Reader | None, why_not: str = "", max_sm_mhz: int | None = None,
                 power_limit_w: float | None = None, interval_s: float = INTERVAL_S):  # fmt: skip
        self.read, self.why_not = read, why_not
        self.max_sm_mhz, self.power_limit_w, self.interval_s = max_sm_mhz, power_limit_w, interval_s

    @classmethod
    def open(cls, pci_bus_id: str) -> GpuSampler:
        """NVML's view of the GPU at `pci_bus_id`; one that records nothing, saying why, when NVML fails."""
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)

            def read() -> dict:
                return {
                    "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                    "mem_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
                    "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
                    "temperature_c": pynvml.nvmlDeviceGetTemperatureV(handle, pynvml.NVML_TEMPERATURE_GPU),
                    "reasons": pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle),
                }

            read()  # every call once now: an older nvidia-ml-py or a GPU that refuses one says so here
            max_sm = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
            limit_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3
        except Exception as e:  # no package, no library, no driver, an unknown bus id, a refused call
            return cls(None, f"NVML unavailable ({type(e).__name__}: {e})")
        return cls(read, max_sm_mhz=max_sm, power_limit_w=limit_w)

    @contextmanager
    def recording(self) -> Iterator[Recording]:
        """Samples while the block runs; afterwards the recording's `state` holds their summary."""
        rec = Recording()
        if self.read is None:
            yield rec
            rec.state = GpuState(recorded=False, note=f"not recorded: {self.why_not}")
            return
        stop = threading.Event()
        thread = threading.Thread(target=self._sample, args=(rec, stop), daemon=True)
        thread.start()
        try:
            yield rec
        finally:
            stop.set()
            thread.join()
        if rec.error:
            rec.state = GpuState(recorded=False, note=f"not recorded: {rec.error}")
        else:
            rec.state = summarize_state(rec.samples, self.max_sm_mhz, self.power_limit_w)

    def _sample(self, rec: Recording, stop: threading.Event) -> None:
        start = time.perf_counter()
        while not stop.wait(self.interval_s):
            phase = rec.phase
            if phase is None:
                continue
            try:
                reading = self.read()
            except Exception as e:  # a reading NVML refuses mid-way: say so rather than guess
                rec.error = f"NVML reading failed ({type(e).__name__}: {e})"
                return
            rec.samples.append(GpuSample(t_ms=(time.perf_counter() - start) * 1e3, phase=phase, **reading))
