"""How much GPU memory an attempt needs at the least, and its refusal when the GPU has less free: checked before
any launch, so a workload too large for the GPU fails with the numbers rather than out of memory part-way."""

from __future__ import annotations

import math

from pydantic import BaseModel

from tasks.references import working_bytes
from tasks.schema import DTYPE_BYTES, Task
from tools.plan import LaunchPlan

GIB = 1 << 30


class Footprint(BaseModel):
    """Bytes an attempt holds on the GPU at its peak, by what holds them."""

    buffers: int  # the candidate's tensors and scratch buffers
    pristine_inputs: int  # the check's copy of the inputs, kept to compare against and to tell writes into them
    reference: int  # the fp32 reference: fp32 copies of every task tensor and its working set

    @property
    def total(self) -> int:
        return self.buffers + self.pristine_inputs + self.reference


def footprint(task: Task, plan: LaunchPlan) -> Footprint:
    """The least an attempt on `task` under `plan` holds at once (the draw's and the baseline's transients are not
    counted: this is a floor, to refuse what cannot fit, not a promise that the rest does)."""
    sizes = {b.name: math.prod(b.shape) for b in plan.buffers}
    inputs = sum(sizes[t.name] * DTYPE_BYTES[t.dtype] for t in task.inputs)
    fp32_copies = sum(sizes[t.name] * 4 for t in task.tensors)
    return Footprint(
        buffers=sum(sizes[b.name] * DTYPE_BYTES[b.dtype] for b in plan.buffers),
        pristine_inputs=inputs,
        reference=fp32_copies + working_bytes(task.reference, task.dims),
    )


def refusal(need: Footprint, free: int) -> str | None:
    """Why the attempt cannot run with `free` bytes free on the GPU, or None when its floor fits."""
    if need.total <= free:
        return None
    return (
        f"this workload needs at least {need.total:,} bytes of GPU memory ({need.total / GIB:.1f} GiB: "
        f"{need.buffers / GIB:.1f} for the task's tensors and scratch, {need.pristine_inputs / GIB:.1f} for the "
        f"check's copy of the inputs, {need.reference / GIB:.1f} for the fp32 reference) and the GPU has "
        f"{free:,} bytes ({free / GIB:.1f} GiB) free: it was not launched"
    )
