"""`python -m tools.serve` as a real uvicorn process on 127.0.0.1: what it serves, who it refuses, what it never
writes or prints; the RL scorer against it; and its --pool on a real Dask cluster (workers without GPUs)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agent.rl.scoring import Attempt, ServiceScorer
from tasks.catalog import get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tests.tools.serve.process import REPO, Service

TOKEN = "s3rve-" + "0123456789abcdef" * 2  # long and random-looking: the start refuses weak ones
REFERENCE = reference_answer(get_task("gemm").name, Arch.SM_90A)


@pytest.fixture()
def service(tmp_path: Path):
    s = Service(tmp_path, "--no-gpu")
    yield s
    if s.proc.poll() is None:
        s.stop()


def test_the_process_evaluates_scores_and_reports_then_stops_cleanly(service: Service) -> None:
    ev = service.http.post("/v1/evaluate", json={"task": "gemm", "arch": "sm_90a", "answer": REFERENCE}).json()
    assert ev["status"] == "unverified" and "turned off" in ev["message"]  # --no-gpu: static stages only
    job = service.http.post("/v1/jobs", json={"items": [{"task": "gemm", "arch": "sm_90a", "answer": "no code"}] * 3,
                                              "reward": {}}).json()  # fmt: skip
    while job["state"] != "done":
        time.sleep(0.2)
        job = service.http.get(f"/v1/jobs/{job['id']}").json()
    assert [r["reward"]["score"] for r in job["results"]] == [0.0] * 3
    assert len(service.http.get("/v1/tasks").json()) > 5
    assert 'ptxbench_evaluations_total{arch="sm_90a",status="extract_error"} 3' in service.http.get("/metrics").text
    assert (
        service.http.post("/v1/evaluate", content=b"{oops", headers={"content-type": "application/json"}).status_code
        == 400
    )
    code, _, _ = service.stop()
    assert code == 0
    assert list(service.cwd.iterdir()) == [] and list(service.temp.iterdir()) == []  # nothing written, nothing left


def test_the_rl_scorer_sends_a_batch_as_one_job(service: Service) -> None:
    scorer = ServiceScorer(service.url)
    broken = REFERENCE.replace(".entry", ".entyr", 1)
    got = scorer.score([Attempt("gemm", "sm_90a", REFERENCE), Attempt("gemm", "h200", broken),
                        Attempt("gemm", "sm_90a", "no code")])  # fmt: skip
    assert [s.evaluation.status for s in got] == ["unverified", "compile_error", "extract_error"]
    assert [s.score for s in got] == [pytest.approx(0.1), 0.0, 0.0] and got[0].reward.unverified
    # a misspelled task is that attempt's error: the rest of the batch still scores (the service would refuse
    # the whole job for it)
    nope, fine = scorer.score([Attempt("nope", "sm_90a", "x"), Attempt("gemm", "sm_90a", REFERENCE)])
    assert nope.reward is None and "unknown task 'nope'" in nope.error and fine.score == pytest.approx(0.1)
    scorer.close()


def test_a_bind_other_machines_reach_needs_a_token(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PTXBENCH_SERVE_TOKEN"} | {"PYTHONPATH": str(REPO)}
    for extra_env, message in (({}, "can be reached from other machines: set PTXBENCH_SERVE_TOKEN"),
                               ({"PTXBENCH_SERVE_TOKEN": "short"}, "shorter than 16 characters")):  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "tools.serve", "--host", "0.0.0.0", "--no-gpu"], cwd=tmp_path,
                              env=env | extra_env, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_with_a_token_requests_without_it_are_refused_and_it_is_never_printed(tmp_path: Path) -> None:
    s = Service(tmp_path, "--no-gpu", token=TOKEN, host="0.0.0.0")
    try:
        bare = httpx.get(f"{s.url}/v1/tasks")
        assert bare.status_code == 401 and bare.headers["www-authenticate"] == "Bearer"
        assert httpx.get(f"{s.url}/v1/tasks", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert s.http.get("/v1/tasks").status_code == 200
        assert s.http.post("/v1/evaluate", json={"task": "gemm", "arch": "sm_90a", "answer": "x"}).status_code == 200
    finally:
        code, out, err = s.stop()
    assert code == 0 and TOKEN not in out + err and "bearer token required" in err


def test_the_pool_can_be_dask(tmp_path: Path, dask_gpus) -> None:
    s = Service(tmp_path, "--pool", dask_gpus.address)
    try:
        assert "dask" in s.http.get("/healthz").json()["pool"].lower()
        ev = s.http.post("/v1/evaluate", json={"task": "gemm", "arch": "sm_90a", "answer": REFERENCE}).json()
        assert ev["status"] == "unverified" and "cpu-hopper" in ev["message"]  # the sm_90a worker, without a GPU
    finally:
        assert s.stop()[0] == 0


def test_a_bad_pool_is_one_line(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "tools.serve", "--pool", "carrier-pigeon"]
    env = os.environ | {"PYTHONPATH": str(REPO)}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("error: --pool: 'carrier-pigeon' is not a pool")
