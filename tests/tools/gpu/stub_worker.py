"""`python -m tests.tools.gpu.stub_worker`: a stand-in for the GPU worker (tools/gpu/worker.py) that speaks its
protocol on stdin/stdout without a GPU, for the service's time-limit tests. Per request it follows the script
in PTXBENCH_STUB_SCRIPT, a JSON list of [stage, part, seconds] (part null: the stage itself): it announces
each part as the worker does, spends its seconds there, then answers `passed` — or, when PTXBENCH_STUB_FAILURE
holds {"status", "stage", "message", "detail", "sticky"}, fails that stage as the worker reports a failure."""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    script = json.loads(os.environ["PTXBENCH_STUB_SCRIPT"])
    print(json.dumps({"ready": {}}), flush=True)
    for line in sys.stdin:
        if json.loads(line).get("op") == "exit":
            return
        for stage, part, seconds in script:
            print(json.dumps({"progress": stage} | ({"part": part} if part else {})), flush=True)
            time.sleep(seconds)
        result = {"status": "passed", "message": "correct", "metrics": {}, "sticky": False}
        if failure := json.loads(os.environ.get("PTXBENCH_STUB_FAILURE", "null")):
            stage = {"name": failure["stage"], "state": "failed", "message": failure["message"],
                     "detail": failure.get("detail", {})}  # fmt: skip
            print(json.dumps({"stage_done": stage}), flush=True)
            result = {"status": failure["status"], "message": failure["message"], "metrics": {},
                      "sticky": failure.get("sticky", False)}  # fmt: skip
        print(json.dumps({"result": result}), flush=True)
        if result["sticky"]:
            return


if __name__ == "__main__":
    main()
