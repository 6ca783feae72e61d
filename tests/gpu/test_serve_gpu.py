"""The service on a real Hopper GPU through the local pool: the reference GEMM is evaluated, correct with its
targets executed, and rewarded accordingly. Skipped without an sm_90 GPU."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tasks.catalog import get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tools.pool import open_pool
from tools.serve.app import create_app
from tools.serve.runner import Runner

pytestmark = pytest.mark.hopper


def test_a_reference_answer_is_correct_and_earns_its_targets_credit():
    pool = open_pool()
    runner = Runner(pool, static_workers=2, gpu_workers=2)
    try:
        with TestClient(create_app(runner, token=None, pool=pool.describe()), base_url="http://127.0.0.1") as client:
            answer = reference_answer(get_task("gemm").name, Arch.SM_90A)
            body = client.post("/v1/reward", json={"task": "gemm", "arch": "sm_90a", "answer": answer}).json()
    finally:
        runner.close()
        pool.close()
    assert body["evaluation"]["status"] == "passed", body["evaluation"]["message"]
    assert body["reward"]["targets_source"] == "executed" and body["reward"]["targets"]
    assert body["score"] >= 0.7 and body["evaluation"]["perf"] is None  # rewards do not run the perf pass
