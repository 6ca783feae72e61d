"""A repair-loop run whose GPU stages go to a Dask pool (eval.pool=…): a worker killed under its attempt ends the run
resumable with the turn unrecorded, and the resumed run records that turn once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from agent.loop.command_line import from_command_line
from agent.loop.records import StopReason
from agent.loop.run import execute, resume
from agent.loop.store import RunFolder
from tests.dask_cluster import Cluster, standins
from tools.evaluation import Status

HOLD_S = 8.0  # each request's time on the stand-in: the kill must land inside it, however loaded the machine


@pytest.fixture(scope="module")
def dask_standins(tmp_path_factory: pytest.TempPathFactory):
    """The stand-in cluster with requests held long enough to be killed under."""
    with standins(tmp_path_factory.mktemp("dask-lost"), hold_s=HOLD_S) as cluster:
        yield cluster


def test_a_worker_lost_under_an_attempt_leaves_the_run_resumable_without_a_duplicated_turn(
    dask_standins: Cluster, runs_dir: Path
) -> None:
    argv = ["task=gemm", "arch=sm_90a", "llm=reference", "max_turns=1", f"eval.pool={dask_standins.address}",
            f"runs_dir={runs_dir}", "run_id=lost-worker"]  # fmt: skip
    taken = len(dask_standins.requests())
    codes: list[int] = []
    run = threading.Thread(target=lambda: codes.append(execute(from_command_line(argv, quiet=True))))
    run.start()
    deadline = time.monotonic() + 60
    while len(dask_standins.requests()) == taken:
        assert run.is_alive() and time.monotonic() < deadline, "the attempt never reached a worker"
        time.sleep(0.05)
    dask_standins.kill(dask_standins.requests()[-1])
    run.join(60)
    assert codes == [1]
    folder = RunFolder(runs_dir / "lost-worker")
    assert folder.turns() == []
    summary = folder.summary()
    assert summary.stop_reason is StopReason.ERROR and "died" in summary.stop_detail

    dask_standins.wait_for("slow-a", "slow-b")
    assert execute(resume("lost-worker", {"runs_dir": runs_dir}, quiet=True)) == 0
    (turn,) = folder.turns()
    assert (turn.index, turn.evaluation.status) == (1, Status.PASSED)
    assert turn.evaluation.worker in ("slow-a", "slow-b")
    assert len(dask_standins.requests()) == taken + 2  # the lost attempt once, then its resumption
