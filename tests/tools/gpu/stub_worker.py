"""`python -m tests.tools.gpu.stub_worker`: a stand-in for the GPU worker (tools/gpu/worker.py) that speaks its
pipe (tools/gpu/protocol.py, the same messages) without a GPU, for the service's tests. Per request it follows the
script in PTXBENCH_STUB_SCRIPT, a JSON list of [stage, part, seconds] (part null: the stage itself): it announces
each part as the worker does, spends its seconds there, then answers `passed` — or, when PTXBENCH_STUB_FAILURE
holds {"status", "stage", "message", "detail", "sticky"}, fails that stage as the worker reports a failure (a
`fault` in the detail is the kernel's fault, as the worker reports one). PTXBENCH_STUB_SKIPPED, {"stage", "message",
"detail"}, reports that stage skipped before a passed result (the worker's profile stage where CUPTI cannot count).
PTXBENCH_STUB_LINE, when set, is written
as a line before the result (one that is not a message); PTXBENCH_STUB_TORN is written without its newline before
the stand-in dies, as a worker killed mid-write leaves its last line."""

from __future__ import annotations

import json
import os
import sys
import time

from tools.evaluation import StageResult, StageState, Status
from tools.gpu.devices import DeviceInfo
from tools.gpu.protocol import Exit, Progress, Ready, Result, StageDone, line, to_worker

STAND_IN = DeviceInfo(ordinal=0, name="stand-in", capability=(9, 0), sm_count=132, l2_bytes=50 << 20, driver=13000,
                      pci_bus_id="0000:00:00.0")  # fmt: skip


def emit(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def main() -> None:
    script = json.loads(os.environ["PTXBENCH_STUB_SCRIPT"])
    emit(line(Ready(device=STAND_IN)))
    for text in sys.stdin:
        if isinstance(to_worker(text), Exit):
            return
        for stage, part, seconds in script:
            emit(line(Progress(stage=stage, part=part)))
            time.sleep(seconds)
        if "PTXBENCH_STUB_LINE" in os.environ:
            emit(os.environ["PTXBENCH_STUB_LINE"] + "\n")
        if "PTXBENCH_STUB_TORN" in os.environ:
            emit(os.environ["PTXBENCH_STUB_TORN"])
            os._exit(3)
        result = Result(status=Status.PASSED, message="correct")
        if skipped := json.loads(os.environ.get("PTXBENCH_STUB_SKIPPED", "null")):
            emit(line(StageDone(result=StageResult(name=skipped["stage"], state=StageState.SKIPPED,
                                                   message=skipped["message"], detail=skipped["detail"]))))  # fmt: skip
        if failure := json.loads(os.environ.get("PTXBENCH_STUB_FAILURE", "null")):
            detail = failure.get("detail", {})
            failed = StageResult(
                name=failure["stage"], state=StageState.FAILED, message=failure["message"], detail=detail
            )
            emit(line(StageDone(result=failed)))
            result = Result(status=failure["status"], message=failure["message"], sticky=failure.get("sticky", False),
                            fault=detail.get("fault"))  # fmt: skip
        emit(line(result))
        if result.sticky:
            return


if __name__ == "__main__":
    main()
