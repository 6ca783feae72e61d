"""SMS at run time: the service re-plans a module's launches at its GPU's own multiprocessor count where that
differs from the arch's nominal one, keeps the static plan where it is the same (or the module predates SMS), and
refuses a spec that does not fit the GPU's count with a launch error naming it, before any worker runs."""

from __future__ import annotations

import pytest

from tasks.catalog import get_task
from tasks.schema import Arch
from tests.tools.gpu.stub_worker import STAND_IN
from tools.evaluation import Status
from tools.gpu.base import CompiledModule
from tools.gpu.service import GpuService
from tools.options import EvalOptions
from tools.plan import plan_launches
from tools.solution import LaunchSpec

TASK = get_task("gemm")
SPEC = LaunchSpec.model_validate({"launches": [{
    "kernel": "k", "grid": ["min(SMS, cdiv(M,128)*cdiv(N,256))", 1, 1], "block": [256, 1, 1], "cluster": [2, 1, 1],
    "args": [{"tensor": "C"}, {"scalar": "SMS", "type": "u32"}]}]})  # fmt: skip


class _Service(GpuService):
    worker_module = "tests.tools.gpu.stub_worker"

    def __init__(self, sm_count: int):
        super().__init__()
        self.info = STAND_IN.model_copy(update={"sm_count": sm_count})

    def device_info(self):
        return self.info


def _module(launch: LaunchSpec | None) -> CompiledModule:
    return CompiledModule(language="ptx", ptx="", cubin=b"", plan=plan_launches(SPEC, TASK, Arch.SM_90A), launch=launch)


@pytest.mark.parametrize(("sm_count", "launch", "grid"), [(132, SPEC, 132), (114, SPEC, 114), (114, None, 132)])
def test_the_plan_follows_the_gpus_own_count(sm_count, launch, grid):
    with _Service(sm_count) as service:
        plan = service._replanned(TASK, Arch.SM_90A, _module(launch)).plan
    assert plan.launches[0].grid[0] == grid and plan.launches[0].args[1].value == grid


def test_a_spec_that_does_not_fit_the_gpus_count_is_a_launch_error():
    with _Service(113) as service:  # an odd count: the grid is no longer a multiple of the 2-block cluster
        outcome = service.evaluate(TASK, Arch.SM_90A, _module(SPEC), EvalOptions(time=False, profile=False))
    assert outcome.status is Status.LAUNCH_ERROR
    assert outcome.message.startswith("at this GPU's 113 multiprocessors (SMS), the launch spec cannot run:")
    assert "grid[0]: 113 blocks is not divisible by cluster[0] = 2" in outcome.message
