"""The service in-process (FastAPI's TestClient): evaluate, reward, jobs, tasks, health, metrics and OpenRLHF's
shape, over the real static stages and a GPU of recorded verdicts (tests/agent/rl/verdicts.py); bad requests
get 4xx bodies that say what was expected; a token guards every route but /healthz."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from agent.rl.dataset import label
from tasks.catalog import TASKS, get_task
from tasks.schema import Arch
from tests.agent.rl.verdicts import ANSWERS, FAST, VerdictGpu
from tools.answer import extract_solution
from tools.gpu.base import Unavailable
from tools.reward import REWARD_VERSION
from tools.serve.app import create_app
from tools.serve.runner import Runner

GEMM = get_task("gemm")
CORRECT, SLOW, WRONG, BROKEN, EMPTY = ANSWERS
TOKEN = "t0ken-" + "x" * 26


@pytest.fixture(scope="module")
def runner():
    r = Runner(VerdictGpu(), static_workers=2, gpu_workers=2)
    yield r
    r.close()


@pytest.fixture(scope="module")
def client(runner: Runner):
    with TestClient(create_app(runner, token=None, pool="verdicts"), base_url="http://127.0.0.1") as c:
        yield c


def evaluate(client: TestClient, answer: str, **extra) -> dict:
    response = client.post("/v1/evaluate", json={"task": "gemm", "arch": "sm_90a", "answer": answer, **extra})
    assert response.status_code == 200, response.text
    return response.json()


def test_evaluate_returns_the_evaluation_tools_evaluate_prints(client: TestClient) -> None:
    ev = evaluate(client, CORRECT)
    assert ev["status"] == "passed" and ev["speedup"] == FAST.speedup and ev["task"] == GEMM.name
    assert [s["name"] for s in ev["stages"]][:4] == ["extract", "compile", "sass", "abi"]
    broken = evaluate(client, BROKEN)
    assert broken["status"] == "compile_error" and "threadIdz" in broken["message"]
    assert evaluate(client, EMPTY)["status"] == "extract_error"


def test_a_solution_object_is_accepted_instead_of_an_answer(client: TestClient) -> None:
    solution = extract_solution(CORRECT).model_dump(mode="json")
    response = client.post("/v1/evaluate", json={"task": "gemm", "arch": "h100", "solution": solution})
    assert response.status_code == 200 and response.json()["status"] == "passed"


def test_reward_returns_the_score_its_components_and_version(client: TestClient) -> None:
    body = client.post("/v1/reward", json={"task": "gemm", "arch": "sm_90a", "answer": WRONG}).json()
    assert body["score"] == pytest.approx(0.1) and body["reward"]["reward_version"] == REWARD_VERSION
    assert body["reward"]["compiled"] and not body["reward"]["correct"] and body["evaluation"]["status"] == "mismatch"
    only_correct = {"compiled": 0, "correct": 1, "targets": 0, "speed": 0}
    weighted = client.post(
        "/v1/reward", json={"task": "gemm", "arch": "sm_90a", "answer": CORRECT, "reward": only_correct}
    )
    assert weighted.json()["score"] == pytest.approx(1.0)


def test_a_job_of_many_answers_is_polled_until_done(client: TestClient) -> None:
    items = [{"task": "gemm", "arch": "sm_90a", "answer": a} for a in ANSWERS] * 4
    submitted = client.post("/v1/jobs", json={"items": items, "reward": {}})
    assert submitted.status_code == 202
    job = submitted.json()
    assert job["count"] == 20 and job["state"] in ("running", "done")
    deadline = time.monotonic() + 120
    while job["state"] != "done" and time.monotonic() < deadline:
        time.sleep(0.2)
        job = client.get(f"/v1/jobs/{job['id']}").json()
    assert job["state"] == "done" and job["done"] == 20
    statuses = [r["evaluation"]["status"] for r in job["results"]]
    assert (
        statuses[:5] == ["passed", "passed", "mismatch", "compile_error", "extract_error"]
        and statuses[5:10] == statuses[:5]
    )
    assert [r["reward"]["score"] for r in job["results"][:5]] == sorted(
        (r["reward"]["score"] for r in job["results"][:5]), reverse=True
    )


def test_tasks_health_and_metrics(client: TestClient) -> None:
    tasks = client.get("/v1/tasks").json()
    assert [t["name"] for t in tasks] == list(TASKS) and tasks[0]["archs"] == ["sm_90a", "sm_100a"]
    assert client.get("/healthz").json()["ok"] is True
    evaluate(client, WRONG)
    text = client.get("/metrics").text
    assert "# TYPE ptxbench_evaluations_total counter" in text
    count = next(
        line
        for line in text.splitlines()
        if line.startswith('ptxbench_evaluations_total{arch="sm_90a",status="mismatch"}')
    )
    assert int(count.split()[-1]) >= 1
    assert 'ptxbench_queue_depth{stage="gpu"} 0' in text


def test_openrlhf_remote_reward_shape(client: TestClient) -> None:
    prompt = "<|user|>Write the GEMM.<|assistant|>"
    body = {"query": [prompt + a for a in ANSWERS], "prompts": [prompt] * 5, "labels": [label(GEMM, Arch.SM_90A)] * 5}
    out = client.post("/v1/openrlhf", json=body).json()
    assert len(out["rewards"]) == 5 and out["rewards"] == out["scores"] and out["rewards"][3:] == [0.0, 0.0]
    assert out["extra_logs"]["correct"] == [1.0, 1.0, 0.0, 0.0, 0.0]
    bad = client.post("/v1/openrlhf", json={**body, "labels": ["gemm"] * 5})
    assert bad.status_code == 422 and "labels[0] must be JSON" in bad.json()["error"]
    trimmed = client.post("/v1/openrlhf", json={**body, "query": [prompt[9:] + a for a in ANSWERS]}).json()
    assert trimmed["rewards"] == out["rewards"]  # OpenRLHF cut the prompt's front to fit: the label still names it
    lost = client.post("/v1/openrlhf", json={**body, "query": ["elsewhere"] * 5})
    assert lost.status_code == 422 and "query[0] holds no part of the end of prompts[0]" in lost.json()["error"]


def test_a_reward_and_a_job_item_have_one_shape(client: TestClient) -> None:
    one = client.post("/v1/reward", json={"task": "gemm", "arch": "sm_90a", "answer": list(ANSWERS)[1]}).json()
    job = client.post("/v1/jobs", json={"items": [{"task": "gemm", "arch": "sm_90a", "answer": list(ANSWERS)[1]}],
                                        "reward": {}}).json()  # fmt: skip
    while job["state"] != "done":
        time.sleep(0.1)
        job = client.get(f"/v1/jobs/{job['id']}").json()
    (item,) = job["results"]
    assert set(item) == set(one) == {"score", "reward", "evaluation", "error"}
    assert item["score"] == one["score"] == one["reward"]["score"] and item["error"] is None


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ("{not json", 400, "the body is not JSON"),
        ({"task": "../../etc/passwd", "arch": "sm_90a", "answer": "x"}, 422, "unknown task '../../etc/passwd'"),
        ({"task": "gemm", "arch": "sm_42", "answer": "x"}, 422, "unknown arch"),
        ({"task": "gemm", "answer": "x"}, 422, "- arch: required field is missing"),
        ({"task": "gemm", "arch": "sm_90a"}, 422, "give exactly one of answer"),
        ({"task": "gemm", "arch": "sm_90a", "answer": "x", "options": {"trials": 0}}, 422, "options.trials:"),
        ({"task": "gemm", "arch": "sm_90a", "answer": "x", "options": {"profile": "loud"}}, 422, "options.profile:"),
        ({"task": "gemm", "arch": "sm_90a", "answer": "x", "path": "/etc/passwd"}, 422, "- path: unknown field"),
    ],
)
def test_bad_requests_say_what_was_expected(client: TestClient, body, status: int, message: str) -> None:
    data = body if isinstance(body, str) else json.dumps(body)
    response = client.post("/v1/evaluate", content=data, headers={"content-type": "application/json"})
    assert response.status_code == status and message in response.json()["error"], response.text


def test_an_unknown_job_and_an_oversized_body_are_refused(client: TestClient) -> None:
    assert client.get("/v1/jobs/0123456789abcdef").status_code == 404
    assert client.get("/v1/jobs/..%2f..%2fetc").status_code == 404
    too_big = "x" * ((64 << 20) + 1)
    response = client.post("/v1/evaluate", content=too_big, headers={"content-type": "application/json"})
    assert response.status_code == 413 and "over 64 MB" in response.json()["error"]


def test_chunked_bodies_are_counted_as_they_arrive(client: TestClient) -> None:
    def chunks():
        for _ in range(65):
            yield b"x" * (1 << 20)

    response = client.post("/v1/evaluate", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_a_token_guards_every_route_but_health() -> None:
    with TestClient(create_app(Runner(Unavailable("none"), 1, 1), token=TOKEN, pool="none")) as guarded:
        assert guarded.get("/healthz").status_code == 200
        for method, path in (("get", "/v1/tasks"), ("get", "/metrics"), ("post", "/v1/evaluate")):
            refused = getattr(guarded, method)(path)
            assert refused.status_code == 401 and TOKEN not in refused.text
            wrong = getattr(guarded, method)(path, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
        ok = guarded.get("/v1/tasks", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
        unverified = guarded.post("/v1/evaluate", headers={"Authorization": f"Bearer {TOKEN}"},
                                  json={"task": "gemm", "arch": "sm_90a", "answer": CORRECT})  # fmt: skip
        assert unverified.json()["status"] == "unverified"
