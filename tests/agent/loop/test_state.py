"""What the loop's checkpointed state carries: the compiled module stays in the run folder (the state holds its
path and sha256, checked when the GPU step reads it), no placeholder evaluation waits for the GPU step, and the
GPU's availability is asked once per run. A checkpoint written before modules were kept apart still resumes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver

from agent.loop.graph import build_graph
from agent.loop.store import RunFolder
from tests.agent.helpers import RecordedGpu, answer_replaying, solve, write_script
from tools.evaluation import Status
from tools.pool.base import Interrupted


def run(tmp_path: Path, runs_dir: Path, answers: list[str], gpu: Any, *extra: str):
    script = write_script(tmp_path / "script.json", answers)
    return solve(["task=gemm", "arch=sm_90a", "llm=scripted", f"llm.path={script}", f"runs_dir={runs_dir}",
                  "run_id=kept", *extra], gpu=gpu)  # fmt: skip


@contextlib.contextmanager
def checkpoints(folder: RunFolder):
    """The run's graph over its checkpoints, and its thread."""
    with contextlib.closing(sqlite3.connect(folder.checkpoints_path, check_same_thread=False)) as conn:
        yield build_graph(SqliteSaver(conn)), {"configurable": {"thread_id": folder.run_id}}


class LosesTheFirstAttempt(RecordedGpu):
    """The pool loses the first attempt it is given (a worker died): the run stops, resumable at the GPU step."""

    def evaluate(self, *args: Any, **kwargs: Any):
        if not self.calls:
            self.calls.append("lost")
            raise Interrupted("the worker running it left the pool")
        return super().evaluate(*args, **kwargs)


def test_the_state_holds_the_modules_hash_and_no_placeholder(tmp_path: Path, runs_dir: Path) -> None:
    gpu = RecordedGpu()
    code, folder = run(tmp_path, runs_dir, [answer_replaying("passed_slow"), answer_replaying("passed_fast")], gpu)
    assert code == 0 and [t.evaluation.status for t in folder.turns()] == [Status.PASSED, Status.PASSED]
    assert gpu.asked == 1  # two turns, one question
    with checkpoints(folder) as (graph, thread):
        history = list(graph.get_state_history(thread))
    assert history and all("cubin" not in json.dumps(s.values, default=str) for s in history)
    before_gpu = [s.values for s in history if s.next == ("gpu",)]
    assert len(before_gpu) == 2
    for values in before_gpu:
        kept = values["module"]
        assert values["evaluation"] is None and values["gpu_pending"] is True
        data = (folder.path / kept["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == kept["sha256"] and b'"cubin"' in data


def test_a_module_changed_in_the_run_folder_is_refused_on_resume(tmp_path: Path, runs_dir: Path, capsys) -> None:
    code, folder = run(tmp_path, runs_dir, [answer_replaying("passed_fast")], LosesTheFirstAttempt())
    assert code == 1 and folder.turns() == []
    kept = folder.path / "attempts" / "turn_01.module.json"
    original = kept.read_text()
    kept.write_text(original.replace('"language":"ptx"', '"language":"cuda"'))
    code, _ = solve(["resume=kept", f"runs_dir={runs_dir}"], gpu=RecordedGpu())
    assert code == 2 and f"{kept} changed since the compile step wrote it" in capsys.readouterr().err
    kept.write_text(original)
    code, folder = solve(["resume=kept", f"runs_dir={runs_dir}"], gpu=RecordedGpu())
    assert code == 0 and [t.evaluation.status for t in folder.turns()] == [Status.PASSED]


def test_a_checkpoint_with_the_module_inside_the_state_still_resumes(tmp_path: Path, runs_dir: Path) -> None:
    code, folder = run(tmp_path, runs_dir, [answer_replaying("passed_fast")], LosesTheFirstAttempt())
    assert code == 1
    kept = folder.path / "attempts" / "turn_01.module.json"
    with checkpoints(folder) as (graph, thread):  # the shape the loop checkpointed before modules were kept apart
        values = graph.get_state(thread).values
        old = {**values["static"], "module": json.loads(kept.read_text())}
        graph.update_state(thread, {"static": old, "module": None}, as_node="compile")
        assert graph.get_state(thread).next == ("gpu",)
    kept.unlink()  # so the module can only come from the state
    gpu = RecordedGpu()
    code, folder = solve(["resume=kept", f"runs_dir={runs_dir}"], gpu=gpu)
    assert code == 0 and [t.evaluation.status for t in folder.turns()] == [Status.PASSED] and len(gpu.calls) == 1
