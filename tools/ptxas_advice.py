"""Which of ptxas's messages say a kernel will run slowly, and the usual cause of each, in one line.

The codes are those ptxas 13.0 prints for wgmma pipelines it cannot keep asynchronous (each provoked by a kernel
in tests/fixtures/ptx/ptxas_*.ptx); the spill and local-memory warnings come from `--warn-on-spills` and
`--warn-on-local-memory-usage`. A message with another code that ptxas itself calls a "Potential Performance Loss"
counts too, with no cause of ours beside its words.
"""

from __future__ import annotations

import re

_CODE = re.compile(r"\((C\d{4})\)")
_PERFORMANCE_LOSS = "Potential Performance Loss"

CAUSES = {
    "C7508": "setmaxnreg needs the register count at entry: give the entry `.maxnreg R`, or `.reqntid`/`.maxntid` "
    "with `.minnctapersm 1`",
    "C7509": "a call to a function ptxas cannot see (an `.extern .func`) sits inside the wgmma pipeline: define "
    "the function in the module, or call it outside the span from the first wgmma to its wait_group",
    "C7510": "a call that is not inlined (an indirect call, or a .func ptxas keeps) lies between a wgmma and its "
    "wait_group: inline it, or move it after the wait",
    "C7511": "the accumulators of every wgmma group kept in flight do not fit under the register cap (.maxnreg, "
    "setmaxnreg, __launch_bounds__): fewer groups in flight, a narrower N per warpgroup, or a higher cap",
    "C7514": "an accumulator is read before the wait_group that covers its wgmma, on some path: often a wgmma (or "
    "its wait) issued under a condition inside the loop, so `wait_group N` covers different groups on different "
    "paths; issue the same wgmmas every iteration (peel the last iteration out of the loop)",
    "C7515": "an accumulator is written (rescaled, zeroed, moved) while its wgmma is in flight: do it after the "
    "wait_group that covers that wgmma",
    "C7517": "ptxas inserted a wgmma wait before a use of accumulator registers, at the line it names: that use "
    "comes before your wait_group covers its wgmma, so the pipeline drains there",
    "C7519": "a wgmma follows writes to its registers with no `wgmma.fence.sync.aligned` between: ptxas added one "
    "at the line it names; fence once yourself before the first wgmma after writing accumulators or A registers",
    "C7520": "a call or a divergent branch between wgmmas made ptxas insert a warpgroup arrive on one path only: "
    "keep the wgmma sequence free of calls and of branches that split the warpgroup",
}
SPILLS = "registers spill to local memory: the kernel needs more registers than its cap allows (.maxnreg, "
SPILLS += "setmaxnreg, __launch_bounds__, or 255); keep fewer values live, or raise the cap"
LOCAL_MEMORY = "the kernel uses local memory: spills, an array indexed at run time, or a call's stack frame; "
LOCAL_MEMORY += "index per-thread arrays with constants (or keep them in shared memory) and inline calls"


def code_of(message: str) -> str | None:
    """The `(Cnnnn)` code ptxas put at the start of a message, if any."""
    m = _CODE.search(message)
    return m.group(1) if m else None


def performance_cause(message: str) -> str | None:
    """The usual cause of a ptxas message that says the kernel will run slowly; None for any other message.
    "" for a performance message whose code we have no cause for (ptxas's own words are then the whole story)."""
    code = code_of(message)
    if code in CAUSES:
        return CAUSES[code]
    if message.startswith("Registers are spilled to local memory"):
        return SPILLS
    if message.startswith("Local memory used for function"):
        return LOCAL_MEMORY
    return "" if _PERFORMANCE_LOSS in message else None
