"""The GPU state during timing, from NVML samples recorded on the H200 under a bf16 cuBLAS GEMM loop
(tests/fixtures/gpu/recorded/nvml_probe_h200.json: the first three samples before the power cap engaged, then
the SW power cap in every one): the summary per phase, the throttle flagging, and the background sampler
itself (a real thread, fed the recorded readings; NVML itself where this machine has none)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tools.gpu.gpu_state import GpuSample, GpuSampler, noisy_flag, summarize_state

PROBE = json.loads((Path(__file__).parents[2] / "fixtures" / "gpu" / "recorded" / "nvml_probe_h200.json").read_text())
THERMAL = 32  # nvmlClocksEventReasonSwThermalSlowdown


def reading(raw: dict) -> dict:
    return {"sm_mhz": raw["sm"], "mem_mhz": raw["mem"], "power_w": raw["power_mw"] / 1e3,
            "temperature_c": raw["temp_v"], "reasons": raw["events"]}  # fmt: skip


def samples(extra_reasons: dict[int, int] | None = None, candidate: int = 3) -> list[GpuSample]:
    """The recorded loop: its first `candidate` samples as the candidate's (a kernel that stays under the
    cap), the rest as cuBLAS's; `extra_reasons` ORs reason bits into samples by index."""
    out = []
    for i, raw in enumerate(PROBE["busy"]):
        values = reading(raw)
        values["reasons"] |= (extra_reasons or {}).get(i, 0)
        out.append(GpuSample(t_ms=5.0 * i, phase="candidate" if i < candidate else "baseline", **values))
    return out


def state(**kwargs):
    idle = PROBE["idle"]
    return summarize_state(samples(**kwargs), idle["max_sm"], idle["power_limit_mw"] / 1e3)


def test_summary_per_phase_of_the_recorded_samples() -> None:
    s = state()
    assert s.recorded and (s.max_sm_mhz, s.power_limit_w) == (1980, 700.0)
    cand, base = s.phases["candidate"], s.phases["baseline"]
    assert (cand.samples, cand.sm_mhz, cand.reasons) == (3, 1980, {})
    assert base.samples == 10 and base.reasons == {"sw_power_cap": 1.0}  # capped in every sample
    assert base.sm_mhz == 1485 and base.sm_mhz_range == (1200, 1500)
    assert base.power_w == pytest.approx(690.4985) and base.temperature_c == 59  # the ramp to the cap included
    line = s.line("cuBLAS")
    assert line.startswith("GPU (max SM 1980 MHz, 700 W): candidate SM 1980 MHz (1980–1980), 91 W, ≤36 °C; ")
    assert "; cuBLAS SM 1485 MHz (1200–1500), 690 W, ≤59 °C; " in line
    assert line.endswith("power cap throttling during 0% of the candidate's samples and 100% of cuBLAS's")


def test_a_power_cap_alone_is_reported_but_is_not_noise() -> None:
    """Every cuBLAS GEMM on this GPU runs capped: were that noise, every GEMM evaluation would be flagged."""
    assert noisy_flag(0.01, state(), "cuBLAS") is None


def test_blocks_that_disagree_are_noisy_and_the_throttling_says_why() -> None:
    flag = noisy_flag(0.062, state(), "cuBLAS")
    assert flag == (
        "noisy — the speedup's interval spans 6.2%; "
        "power cap throttling during 0% of the candidate's samples and 100% of cuBLAS's"
    )
    assert noisy_flag(0.04, state(), "cuBLAS") is None  # the 4% limit itself is not over it


def test_a_thermal_slowdown_is_noisy_even_when_the_blocks_agree() -> None:
    flag = noisy_flag(0.01, state(extra_reasons={5: THERMAL}), "cuBLAS")  # 1 of cuBLAS's 10 samples
    assert flag == (
        "noisy — power cap throttling during 0% of the candidate's samples and 100% of cuBLAS's; "
        "thermal slowdown throttling during 0% of the candidate's samples and 10% of cuBLAS's"
    )
    # One sample in 13 (8%) is below the 10% a phase change can blur: reported, not a verdict.
    lone = state(extra_reasons={5: THERMAL}, candidate=0)
    assert lone.phases["baseline"].reasons["sw_thermal_slowdown"] == pytest.approx(1 / 13)
    assert noisy_flag(0.01, lone, "cuBLAS") is None


def test_no_samples_is_not_recorded() -> None:
    s = summarize_state([], 1980, 700.0)
    assert not s.recorded and s.note.startswith("not recorded: ")
    assert noisy_flag(0.01, s, "cuBLAS") is None
    assert noisy_flag(0.05, s, "cuBLAS") == "noisy — the speedup's interval spans 5.0%"


class Replay:
    """The recorded readings, one per call, round and round."""

    def __init__(self, fail_after: int | None = None):
        self.calls, self.fail_after = 0, fail_after

    def __call__(self) -> dict:
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        raw = PROBE["busy"][self.calls % len(PROBE["busy"])]
        self.calls += 1
        return reading(raw)


def test_the_sampler_tags_samples_with_the_phase_that_runs() -> None:
    sampler = GpuSampler(Replay(), max_sm_mhz=1980, power_limit_w=700.0, interval_s=0.001)
    with sampler.recording() as rec:
        time.sleep(0.05)  # no phase marked: nothing is sampled
        rec.mark("candidate")
        time.sleep(0.05)
        rec.mark("baseline")
        time.sleep(0.05)
        rec.mark(None)
        time.sleep(0.03)
    assert rec.state.recorded and set(rec.state.phases) == {"candidate", "baseline"}
    assert {s.phase for s in rec.samples} == {"candidate", "baseline"}
    phases = [s.phase for s in rec.samples]
    assert phases == sorted(phases, key=["candidate", "baseline"].index)  # in the order they ran
    assert rec.samples[0].t_ms >= 40  # the first sample came once a phase was marked
    assert sum(p.samples for p in rec.state.phases.values()) == len(rec.samples)


def test_a_reading_that_fails_mid_way_records_nothing_and_says_why() -> None:
    sampler = GpuSampler(Replay(fail_after=2), interval_s=0.001)
    with sampler.recording() as rec:
        rec.mark("candidate")
        time.sleep(0.05)
    assert not rec.state.recorded
    assert rec.state.note == "not recorded: NVML reading failed (RuntimeError: NVML_ERROR_GPU_IS_LOST)"


def test_without_nvml_the_state_says_why_and_timing_goes_on() -> None:
    sampler = GpuSampler.open("0000:ff:1f.7")  # no NVML library here, or no such device where there is one
    with sampler.recording() as rec:
        rec.mark("candidate")
    assert not rec.state.recorded
    assert rec.state.note.startswith("not recorded: NVML unavailable (NVMLError")
    assert rec.state.line("cuBLAS") == f"GPU state {rec.state.note}"
