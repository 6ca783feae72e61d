"""The worker's CUPTI count without a GPU: its ctypes structs against CUDA 13.0's headers, its counters' opcode lists
against CUPTI's own descriptions (the real library's host API, which runs on a CPU), the decision on the values our
H200 recorded beside Nsight Compute's, when a kernel's SASS leaves the count to ncu, the real fallback paths (no
library; a library and no GPU), and the service putting ncu's count in the place of the worker's skipped one."""

from __future__ import annotations

import ctypes
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from tasks import get_task
from tasks.catalog import CORE, TARGETS
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tests.tools.gpu.cupti_headers import header_layout, mismatches
from tests.tools.gpu.stub_worker import STAND_IN
from tools.evaluation import Stage, StageState, Status
from tools.gpu import cupti_counts, profile
from tools.gpu.base import CompiledModule
from tools.gpu.service import GpuService
from tools.options import EvalOptions, Profile
from tools.pipeline import build, extract
from tools.plan import LaunchPlan

RECORDED = json.loads((Path(__file__).parents[2] / "fixtures/gpu/recorded/cupti_gemm_h200.json").read_text())
HOPPER = TARGETS[Arch.SM_90A]
STRUCTS = [v for v in vars(cupti_counts).values() if isinstance(v, type) and issubclass(v, ctypes.Structure)]


def test_the_structs_follow_the_cuda_13_headers() -> None:
    layout = header_layout(STRUCTS)
    if layout is None:
        pytest.skip("CUPTI's headers or a C++ compiler are not here")
    assert len(STRUCTS) >= 20 and mismatches(STRUCTS, layout) == []


def _library() -> cupti_counts.Cupti:
    candidates = cupti_counts.library_candidates()
    if not candidates:
        pytest.skip("no libcupti here")
    return cupti_counts.Cupti(candidates[0])


def test_each_counter_counts_exactly_the_opcodes_cupti_describes() -> None:
    cupti = _library()
    with cupti.host(b"GH100") as host:  # the H100/H200 chip; the host API needs no GPU
        for name, counter in cupti_counts.COUNTERS[Arch.SM_90A].items():
            described = set()
            for metric in counter.metrics:
                text = cupti.describe(host, metric)
                described |= {op.split(".")[0] for op in re.findall(r"\b[A-Z][A-Z0-9]{3,}(?:\.[A-Z.]+)?", text)}
            assert described == set(counter.opcodes), (name, described)
            group = next(g for g in HOPPER if g.name == name)
            assert all(any(re.search(p, op) for op in counter.opcodes) for p in group.sass_patterns)
        image, passes = cupti.config(host, cupti_counts.metrics_of(cupti_counts.COUNTERS[Arch.SM_90A]))
        assert len(image) > 0 and passes == 2  # the tensor pipe's counter in one pass, the TMA ones in the other


def test_on_the_recorded_gemm_cupti_decides_and_counts_as_ncu() -> None:
    counters = cupti_counts.plan(Arch.SM_90A, HOPPER, {"HGMMA": 4, "UTMALDG": 8, "UTMASTG": 4, "UTMACMDFLUSH": 4})
    cupti = cupti_counts.summarize([RECORDED["cupti"]["values"]], HOPPER, counters)
    ncu_launch = {profile.WARP: Counter(RECORDED["ncu"]["warp"]), profile.THREAD: Counter(RECORDED["ncu"]["thread"])}
    ncu = profile.summarize([ncu_launch], HOPPER)
    for key in ("targets_met", "paper_tag", "target_executed"):
        assert cupti[key] == ncu[key]
    assert cupti["targets_met"] is True and cupti["counter"] == "cupti" and ncu["counter"] == "ncu"
    # wgmma: ncu's warp-level count; tma: ncu's predicate-true threads / 32 (tma_st was not recorded: UTMALDG only)
    assert cupti["target_counts"]["wgmma"] == ncu["target_counts"]["wgmma"] == 573_440
    assert cupti["target_counts"]["tma"] == RECORDED["ncu"]["thread"]["UTMALDG"] // 32 == 35_840
    assert ncu["target_counts"]["tma"] > cupti["target_counts"]["tma"]  # ncu's warp-level count holds predicated-off
    targets = profile.targets_of(cupti)
    assert (targets.met, targets.counter, targets.counts) == (True, "cupti", cupti["target_counts"])
    assert profile.message(cupti, HOPPER).splitlines()[-1] == "targets met: yes"


def test_ncu_decides_on_predicate_true_executions() -> None:
    launch = {profile.WARP: Counter({"HGMMA": 64, "UTMALDG": 8}), profile.THREAD: Counter({"HGMMA": 2048})}
    summary = profile.summarize([launch], HOPPER)
    assert summary["target_counts"] == {"wgmma": 64, "tma": 8}  # reached, but never with its predicate true
    assert summary["targets_met"] is False and summary["target_executed"] == {"wgmma": True, "tma": False}
    assert "tma executed: 8 warp instructions — required, but every one ran with its predicate false" in (
        profile.message(summary, HOPPER)
    )
    cupti = cupti_counts.summarize([{"sm__inst_executed_pipe_tensor_op_gmma.sum": 64.0}], HOPPER,
                                   cupti_counts.plan(Arch.SM_90A, HOPPER, {"HGMMA": 1, "UTMALDG": 1}))  # fmt: skip
    assert cupti["targets_met"] is False and cupti["target_executed"] == summary["target_executed"]


def test_several_launches_add_up() -> None:
    counters = cupti_counts.plan(Arch.SM_90A, HOPPER, {"HGMMA": 1, "UTMALDG": 1})
    launches = [{"sm__inst_executed_pipe_tensor_op_gmma.sum": 4.0, "smsp__sass_inst_executed_op_tma_ld.sum": 1.0},
                {"smsp__sass_inst_executed_op_tma_st.sum": 2.0}]  # fmt: skip
    summary = cupti_counts.summarize(launches, HOPPER, counters)
    assert summary["target_counts"] == {"wgmma": 4, "tma": 3} and len(summary["launch_values"]) == 2


@pytest.mark.parametrize(
    ("arch", "opcodes", "reason"),
    [
        (Arch.SM_90A, {"HGMMA": 4, "BGMMA": 1, "UTMALDG": 2}, "the wgmma counter also counts BGMMA"),
        (Arch.SM_90A, {"HGMMA": 4, "UTMALDG": 2, "UBLKCP": 1}, "the tma counter also counts UBLKCP"),
        (Arch.SM_90A, None, "no static SASS opcodes"),
        (Arch.SM_100A, {"UTCHMMA": 1}, "no CUPTI counters are mapped for sm_100a"),
    ],
)
def test_where_cupti_cannot_tell_the_groups_apart_ncu_counts(arch, opcodes, reason) -> None:
    with pytest.raises(cupti_counts.CountUnavailable, match=reason):
        cupti_counts.plan(arch, TARGETS[arch], opcodes)


def test_the_core_five_references_are_counted_by_cupti() -> None:
    for name in CORE:
        task = get_task(name)
        static = build(extract(task, Arch.SM_90A, answer=reference_answer(name, Arch.SM_90A)), task, Arch.SM_90A,
                       EvalOptions())  # fmt: skip
        assert static.module is not None and static.module.opcodes
        counters = cupti_counts.plan(Arch.SM_90A, task.targets[Arch.SM_90A], static.module.launched_opcodes())
        assert set(counters) == {"wgmma", "tma"}


def test_without_libcupti_the_count_falls_to_ncu_for_good(monkeypatch) -> None:
    monkeypatch.setenv("PTXBENCH_CUPTI", "/nonexistent/libcupti.so.13")
    counter = cupti_counts.Counter()
    for _ in range(2):  # the second answers from what the first found
        with pytest.raises(cupti_counts.CountUnavailable, match="libcupti did not load") as e:
            counter.count(0, {}, 1, lambda: None, lambda: None)
        assert e.value.lasting


def test_a_library_without_a_gpu_falls_to_ncu() -> None:
    _library()
    with pytest.raises(cupti_counts.CountUnavailable, match="CUPTI's profiler cannot start here") as e:
        cupti_counts.Counter().count(0, {}, 1, lambda: None, lambda: None)
    assert e.value.lasting


class _Service(GpuService):
    worker_module = "tests.tools.gpu.stub_worker"

    def device_info(self):
        return STAND_IN


def test_the_service_counts_with_ncu_in_place_of_the_workers_skipped_count(monkeypatch) -> None:
    reason = "libcupti is not installed here"
    monkeypatch.setenv("PTXBENCH_STUB_SCRIPT", json.dumps([["run", None, 0], ["profile", None, 0]]))
    skipped = {"stage": "profile", "message": f"not counted: {reason}", "detail": {"fallback": "ncu", "cupti": reason}}
    monkeypatch.setenv("PTXBENCH_STUB_SKIPPED", json.dumps(skipped))
    monkeypatch.setenv("PTXBENCH_NCU", "/nonexistent/ncu")
    monkeypatch.setenv("PATH", "/nonexistent")  # no ncu either (or one refusing an empty cubin): skipped, its reason
    plan = LaunchPlan.model_validate({"launches": [{"kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1],
                                                    "cluster": [1, 1, 1], "shared_bytes": 0, "args": []}],
                                      "buffers": []})  # fmt: skip
    module = CompiledModule(language="ptx", ptx="", cubin=b"", plan=plan)
    with _Service() as service:
        outcome = service.evaluate(get_task("gemm"), Arch.SM_90A, module,
                                   EvalOptions(time=False, profile=Profile.COUNTS))  # fmt: skip
    assert outcome.status is Status.PASSED
    profiles = [s for s in outcome.stages if s.name is Stage.PROFILE]
    assert len(profiles) == 1 and profiles[0].state is StageState.SKIPPED
    assert profiles[0].message != f"not counted: {reason}" and profiles[0].detail["cupti"] == reason  # ncu's own
    assert outcome.metrics.targets is None
