"""Requests a hostile client sends the service (a real uvicorn process): numbers Python cannot print, JSON
nested past the recursion limit, in a body, a Solution object or an OpenRLHF label. Each is a 4xx naming
what was wrong, on every route it can reach, and never a 500 or a traceback in the service's log."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.adversarial.helpers import fill_ok
from tests.tools.serve.process import Service
from tools.answer import extract_solution

HUGE = 10**3999  # 4,000 digits: Python reads it, and refuses to print it


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with Service(tmp_path_factory.mktemp("service"), "--no-gpu") as s:
        yield s
        _, _, err = s.stop()
    assert "Traceback" not in err, err


def post(service: Service, path: str, body: object | str):
    text = body if isinstance(body, str) else json.dumps(body)
    return service.http.post(path, content=text, headers={"content-type": "application/json"})


def solution_with_cluster(extent: int) -> dict:
    solution = extract_solution(fill_ok()).model_dump(mode="json")
    solution["launch"]["launches"][0]["cluster"] = [extent, extent, 1]
    return solution


@pytest.mark.parametrize(
    ("path", "wrap", "where"),
    [
        ("/v1/evaluate", lambda item: item, "solution.launch.launches.0.cluster.0"),
        ("/v1/reward", lambda item: item, "solution.launch.launches.0.cluster.0"),
        ("/v1/jobs", lambda item: {"items": [item]}, "items.0.solution.launch.launches.0.cluster.0"),
    ],
)
def test_a_solution_object_gets_the_digit_guard(service: Service, path: str, wrap, where: str) -> None:
    # A cluster of 4,000-digit extents passed the schema and failed the plan's message: a 500 (a raw Python
    # error as a job item's result).
    item = {"task": "gemm", "arch": "sm_90a", "solution": solution_with_cluster(HUGE)}
    response = post(service, path, wrap(item))
    assert response.status_code == 422 and f"- {where}: " in response.json()["error"], response.text


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("grid", [HUGE, 1, 1], "grid.0: an integer outside the 64-bit range"),
        ("shared_bytes", 2**64, "shared_bytes: Input should be less than"),
        ("args", [{"scalar": 1e300 * 1e300, "type": "f32"}], "the body is refused: the number 1e999 is out of range"),
    ],
)
def test_every_number_of_a_solution_is_bounded(service: Service, field: str, value: object, message: str) -> None:
    solution = extract_solution(fill_ok()).model_dump(mode="json")
    solution["launch"]["launches"][0][field] = value
    body = json.dumps({"task": "gemm", "arch": "sm_90a", "solution": solution}).replace("Infinity", "1e999")
    response = post(service, "/v1/evaluate", body)
    assert response.status_code == 422 and message in response.json()["error"], response.text


def test_a_label_nested_100000_deep_is_refused(service: Service) -> None:
    body = {"query": ["p answer"], "prompts": ["p"], "labels": ["[" * 100_000 + "]" * 100_000]}
    response = post(service, "/v1/openrlhf", body)
    assert response.status_code == 422, response.text
    assert 'labels[0] must be JSON {"task": …, "arch": …} (nested deeper than 32' in response.json()["error"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"task": "gemm", "arch": "sm_90a", "answer": "x", "options": ' + "[" * 100_000 + "]" * 100_000 + "}",
         "the body is refused: nested too deep"),
        ('{"task": "gemm", "arch": "sm_90a", "answer": "x", "options": {"seed": 1' + "0" * 5000 + "}}",
         "the body is refused: an integer of 5,001 digits"),
        ('{"task": "gemm", "arch": "sm_90a", "answer": "x", "options": {"perf_below": NaN}}',
         "the body is refused: NaN is not a JSON value"),
    ],
)  # fmt: skip
def test_a_body_python_cannot_read_safely_is_refused(service: Service, body: str, message: str) -> None:
    for path in ("/v1/evaluate", "/v1/reward"):
        response = post(service, path, body)
        assert response.status_code == 422 and message in response.json()["error"], response.text
