"""Requests a hostile client sends the service (a real uvicorn process): numbers Python cannot print, JSON
nested past the recursion limit, in a body, a Solution object or an OpenRLHF label; a missing or lower-case
token, on the docs as on the API; a Host that is not this machine (DNS rebinding). Each is a 4xx naming what
was wrong, on every route it can reach, and never a 500 or a traceback in the service's log; a token that
cannot guard the service stops its start in one line; more work, connections or half-sent bodies than it
takes are refused (429 with Retry-After, 503, 408), so its memory stays bounded."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.adversarial.helpers import fill_ok
from tests.tools.serve.process import REPO, Service
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


TOKEN = "Adv3rsarial-" + "0123456789abcdef"


def test_with_a_token_the_docs_and_schema_need_it_too(tmp_path: Path) -> None:
    with Service(tmp_path, "--no-gpu", token=TOKEN, host="0.0.0.0") as s:
        for path in ("/docs", "/redoc", "/openapi.json", "/nowhere"):
            bare = httpx.get(s.url + path)
            assert bare.status_code == 401 and bare.json()["error"].startswith("this service needs"), path
        assert httpx.get(s.url + "/healthz").status_code == 200  # the one open path
        for scheme in ("Bearer", "bearer", "BEARER"):  # HTTP's schemes are case-insensitive
            assert httpx.get(s.url + "/openapi.json", headers={"Authorization": f"{scheme} {TOKEN}"}).status_code == 200
        assert httpx.get(s.url + "/docs", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (" " * 32, "holds spaces"),
        ("\t" + "x" * 31, "holds spaces"),
        ("tok\u00e9n-" + "0123456789abcdef", "not printable ASCII"),
        ("a" * 40, "fewer than 8 different characters"),
        ("passwordpassword", "fewer than 8 different characters"),
    ],
)
def test_a_token_that_cannot_guard_refuses_the_start(token: str, why: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PTXBENCH_SERVE_TOKEN"}
    env |= {"PYTHONPATH": str(REPO), "PTXBENCH_SERVE_TOKEN": token}
    done = subprocess.run([sys.executable, "-m", "tools.serve", "--host", "0.0.0.0", "--port", "1", "--no-gpu"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and why in done.stderr, done.stderr
    piece = token.strip()[:8]  # of the ones with something to show
    assert "Traceback" not in done.stderr and not (piece and piece in done.stderr.replace("PTXBENCH", ""))


def test_without_a_token_only_loopback_hosts_are_answered(service: Service) -> None:
    # A page on evil.example that rebinds its name to 127.0.0.1 sends Host: evil.example.
    for host in ("evil.example", f"evil.example:{service.port}", "127.0.0.1.evil.example", "[::2]", ""):
        refused = service.http.get("/v1/tasks", headers={"Host": host})
        assert refused.status_code == 421 and "answers requests for" in refused.json()["error"], host
    for host in (f"127.0.0.1:{service.port}", f"localhost:{service.port}", "LOCALHOST", f"[::1]:{service.port}"):
        assert service.http.get("/v1/tasks", headers={"Host": host}).status_code == 200, host


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) / 1024


def test_past_its_bounds_the_service_answers_429_and_stays_small(tmp_path: Path) -> None:
    # 40 jobs of 4,096 answers each were all accepted: 163,825 attempts queued, memory 256 → 1,512 MB.
    item = {"task": "gemm", "arch": "sm_90a", "answer": fill_ok()}
    label = '{"task": "gemm", "arch": "sm_90a"}'
    with Service(tmp_path, "--no-gpu", "--static-workers", "1", "--max-queued", "4", "--max-jobs", "1") as s:
        assert s.http.post("/v1/jobs", json={"items": [item] * 4}).status_code == 202  # seconds of compiling
        busy_jobs = s.http.post("/v1/jobs", json={"items": [item]})  # one job runs at a time
        assert busy_jobs.status_code == 429 and "1 jobs are running" in busy_jobs.json()["error"]
        assert int(busy_jobs.headers["retry-after"]) > 0
        for path, body in (
            ("/v1/evaluate", item),
            ("/v1/openrlhf", {"query": ["p"], "prompts": ["p"], "labels": [label]}),
        ):
            busy = s.http.post(path, json=body)  # 4 queued + 1 > 4
            assert busy.status_code == 429 and "would pass its bound of 4" in busy.json()["error"], path
            assert int(busy.headers["retry-after"]) > 0
        before = rss_mb(s.proc.pid)
        flood = {"items": [{"task": "gemm", "arch": "sm_90a", "answer": "no code"}] * 4096}
        codes = [s.http.post("/v1/jobs", json=flood).status_code for _ in range(40)]
        assert codes == [429] * 40
        health = s.http.get("/healthz").json()
        assert health["queued_static"] + health["queued_gpu"] <= 4
        assert rss_mb(s.proc.pid) - before < 100


@pytest.mark.parametrize(
    ("options", "where"),
    [({"static_timeout_s": 1e300}, "options.static_timeout_s"), ({"timeout_s": 3e6}, "options.timeout_s"),
     ({"trials": 10**9}, "options.trials"), ({"timing_blocks": 10**9}, "options.timing_blocks"),
     ({"timing_block_runs": 10**9}, "options.timing_block_runs"), ({"seed": 10**3999}, "options.seed")],
)  # fmt: skip
def test_a_request_cannot_set_limits_past_the_bounds(service: Service, options: dict, where: str) -> None:
    # static_timeout_s=1e300 was a 500 (the OS call overflowed); a billion trials were accepted.
    item = {"task": "gemm", "arch": "sm_90a", "answer": fill_ok(), "options": options}
    for path, body in (("/v1/evaluate", item), ("/v1/jobs", {"items": [item]})):
        response = post(service, path, body)
        assert response.status_code == 422 and "Input should be less than or equal to" in response.text, response.text
        assert where in response.json()["error"]


def half_sent(port: int) -> socket.socket:
    """A connection that sends its headers and 10 bytes of a 1,000-byte body, then nothing."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"POST /v1/evaluate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: 1000\r\n\r\n" + b'{"task": "')  # fmt: skip
    return s


def answer_of(connection: socket.socket) -> bytes:
    """Everything the service sends on `connection` until it closes it."""
    chunks = [connection.recv(4096)]
    while chunks[-1]:
        chunks.append(connection.recv(4096))
    return b"".join(chunks)


def test_half_sent_bodies_time_out_and_connections_are_bounded(tmp_path: Path) -> None:
    # 300 half-sent bodies stayed open after 20 s, each holding a connection.
    with Service(tmp_path, "--no-gpu", "--body-timeout-s", "2", "--max-connections", "20") as s:
        waiting = [half_sent(s.port) for _ in range(15)]
        time.sleep(1)  # their requests have begun: the service waits for their bodies
        extra = [half_sent(s.port) for _ in range(10)]  # 25 connections: past the bound, refused at once
        try:
            refused = [answer_of(c) for c in extra]
            assert all(a.startswith(b"HTTP/1.1 503") for a in refused), refused[0]
            start = time.monotonic()
            timed_out = [answer_of(c) for c in waiting]
            assert all(a.startswith(b"HTTP/1.1 408") for a in timed_out), timed_out[0]
            assert b"the body did not arrive within 2 s" in timed_out[0] and time.monotonic() - start < 20
        finally:
            for c in waiting + extra:
                c.close()
        assert s.http.get("/healthz").status_code == 200  # and the service goes on
