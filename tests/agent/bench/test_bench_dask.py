"""`python -m agent.bench … eval.pool=dask://…` on a real Dask cluster on 127.0.0.1 whose two CPU workers claim
sm_90a and sm_100a: each run's GPU stages go to the worker of its arch (skipped there: no GPU), and the bench says
where its evaluations go; a scheduler out of reach stops the bench before any run starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.bench.__main__ import main
from agent.bench.plan import load
from agent.loop.store import RunFolder
from tests.dask_cluster import Cluster
from tools.evaluation import Stage, Status
from tools.pool import dask as dask_pool

GEMM = "gemm_n7168_k5120"


def test_a_bench_over_two_archs_sends_each_run_to_its_arch(
    dask_gpus: Cluster, runs_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    args = ["tasks=gemm_n7168_k5120", "archs=sm_90a,sm_100a", "llm=reference", "modes=single",
            f"eval.pool={dask_gpus.address}", f"runs_dir={runs_dir}", "bench_id=b-dask"]  # fmt: skip
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"4 at a time; Dask pool at {dask_gpus.address}: 2 worker(s) on 1 host(s), sm_100a ×1, sm_90a ×1" in err
    for arch, worker in (("sm_90a", "cpu-hopper"), ("sm_100a", "cpu-blackwell")):
        (turn,) = RunFolder(runs_dir / "b-dask" / f"{GEMM}-{arch}-single-s00").turns()
        assert (turn.evaluation.status, turn.evaluation.worker) == (Status.UNVERIFIED, worker)
        assert turn.evaluation.stage(Stage.RUN).message.startswith(f"{worker}: no usable NVIDIA GPU here")
    assert main(["resume=b-dask", f"runs_dir={runs_dir}", "eval.pool=local"]) == 0  # may move; nothing left to run
    assert load(runs_dir / "b-dask").resumed[-1]["changed"] == {"eval.pool": "local"}


def test_a_bench_whose_scheduler_is_out_of_reach_starts_nothing(
    runs_dir: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dask_pool, "CONNECT_S", 0.5)
    args = ["tasks=gemm_n7168_k5120", "archs=sm_90a", "llm=reference", "modes=single", "eval.pool=dask://127.0.0.1:9",
            f"runs_dir={runs_dir}", "bench_id=b-nowhere"]  # fmt: skip
    assert main(args) == 2
    assert "error: cannot reach the Dask scheduler at tcp://127.0.0.1:9" in capsys.readouterr().err
    assert sorted(p.name for p in (runs_dir / "b-nowhere").iterdir()) == ["bench.json"]  # resume=b-nowhere later
