"""The Dask evaluation pool on real clusters on 127.0.0.1 (tests/dask_cluster.py): a request lands on the worker of
its arch; an arch no worker offers is unverified at once; the least busy worker of the arch takes the next request,
one at a time each; a worker killed under a request makes the evaluation Interrupted and the request never runs
again; on a stock scheduler reached over TLS, the pool drops a request whose worker left; a request from other code
is refused, never evaluated."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import pytest

from tasks.catalog import get_task
from tasks.schema import Arch
from tests.dask_cluster import REPO, STOCK, Cluster
from tests.tools.test_pool import FAKE_METRICS, FakeService, built
from tools.evaluation import Stage, StageState, Status
from tools.gpu import dask_worker
from tools.gpu.base import Unavailable
from tools.gpu.dask_worker import evaluate_request
from tools.gpu.protocol import EvalReply, EvalRequest
from tools.options import EvalOptions
from tools.pipeline import on_gpu
from tools.pool import dask as dask_pool
from tools.pool import open_gpu, open_pool
from tools.pool.base import OFF, Interrupted, scheduler_address
from tools.pool.dask import DaskPool

TASK = get_task("gemm")


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """`fn` running in a thread; the dict gets its result or its exception."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["result"] = fn()
        except Exception as e:
            out["error"] = e

    thread = threading.Thread(target=target)
    thread.start()
    return thread, out


def wait_for_requests(cluster: Cluster, count: int, timeout_s: float = 30.0) -> list[str]:
    """The stand-ins' request log once it has `count` lines."""
    deadline = time.monotonic() + timeout_s
    while len(cluster.requests()) < count:
        assert time.monotonic() < deadline, "the stand-in never took the request"
        time.sleep(0.05)
    return cluster.requests()


def test_requests_land_on_the_worker_of_their_arch(dask_gpus: Cluster) -> None:
    pool = DaskPool(dask_gpus.address)
    try:
        for arch, name in ((Arch.SM_90A, "cpu-hopper"), (Arch.SM_100A, "cpu-blackwell")):
            task, static = built(arch)
            ev = on_gpu(static, task, arch, EvalOptions(), pool)
            assert (ev.status, ev.worker) == (Status.UNVERIFIED, name)
            run = ev.stage(Stage.RUN)
            assert run.state is StageState.SKIPPED and run.message.startswith(f"{name}: ")  # its own reason: no GPU
        assert pool.describe() == f"Dask pool at {dask_gpus.address}: 2 worker(s) on 1 host(s), sm_100a ×1, sm_90a ×1"
        assert sorted((load.arch, load.host) for load in pool.load()) == [
            ("sm_100a", "127.0.0.1"),
            ("sm_90a", "127.0.0.1"),
        ]
    finally:
        pool.close()


def test_the_workers_never_seem_gone_while_the_client_refreshes_its_cache(dask_gpus: Cluster) -> None:
    """The client's periodic refresh of its scheduler cache (here every millisecond) must not make the pool see an
    empty cluster, as reading Client.scheduler_info did on a loaded machine: 'every worker offering sm_90a left'."""
    with dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}):
        pool = DaskPool(dask_gpus.address)
        try:
            missing = [i for i in range(300) if pool.unavailable_reason(Arch.SM_90A) is not None]
        finally:
            pool.close()
    assert missing == []


def test_an_arch_no_worker_offers_is_unverified_at_once(dask_standins: Cluster) -> None:
    pool = DaskPool(dask_standins.address)
    task, static = built(Arch.SM_100A)
    taken = len(dask_standins.requests())
    try:
        start = time.perf_counter()
        ev = on_gpu(static, task, Arch.SM_100A, EvalOptions(), pool)
        assert time.perf_counter() - start < 5.0  # a round trip to the scheduler, not a wait for a worker
    finally:
        pool.close()
    assert ev.status is Status.UNVERIFIED and ev.worker is None
    expected = f"no worker of the Dask pool at {dask_standins.address} offers sm_100a (2 connected, offering sm_90a)"
    assert ev.stage(Stage.RUN).message == expected
    assert len(dask_standins.requests()) == taken


def test_the_least_busy_worker_of_the_arch_takes_the_next_request(dask_standins: Cluster) -> None:
    pool = DaskPool(dask_standins.address)
    task, static = built()
    seen = len(dask_standins.events())
    try:
        threads = [in_thread(lambda: pool.evaluate(task, Arch.SM_90A, static.module, EvalOptions())) for _ in range(4)]
        for thread, _ in threads:
            thread.join(60)
    finally:
        pool.close()
    outcomes = [out["result"] for _, out in threads]
    assert [o.status for o in outcomes] == [Status.PASSED] * 4
    assert Counter(o.worker for o in outcomes) == {"slow-a": 2, "slow-b": 2}
    events = dask_standins.events()[seen:]
    for worker in ("slow-a", "slow-b"):  # one request at a time on each
        assert [e for e, w in events if w == worker] == ["took", "done", "took", "done"]
    assert [e for e, _ in events[:2]] == ["took", "took"]  # both at work from the start


def test_a_worker_killed_under_a_request_is_no_verdict_and_the_request_never_runs_again(dask_standins: Cluster) -> None:
    pool = DaskPool(dask_standins.address)
    task, static = built()
    taken = len(dask_standins.requests())
    try:
        thread, out = in_thread(lambda: pool.evaluate(task, Arch.SM_90A, static.module, EvalOptions()))
        holder = wait_for_requests(dask_standins, taken + 1)[-1]
        dask_standins.kill(holder)
        thread.join(30)
    finally:
        pool.close()
    assert isinstance(out.get("error"), Interrupted), out
    assert "died" in str(out["error"])
    dask_standins.wait_for("slow-a", "slow-b")  # the nanny started a new worker process
    time.sleep(2.0)  # longer than a request takes: a re-run would be in the log by now
    assert len(dask_standins.requests()) == taken + 1


def test_on_a_stock_scheduler_over_tls_a_request_whose_worker_left_is_no_verdict(tmp_path: Path) -> None:
    """Dask's own scheduler would run the request again elsewhere; the pool drops it once it sees its worker go."""
    cluster = Cluster(tmp_path, scheduler=STOCK, tls=True, hold_s=2.5)
    try:
        assert cluster.address.startswith("tls://")
        cluster.start("tls-a", Arch.SM_90A, standin=True)
        cluster.wait_for("tls-a")
        pool = DaskPool(cluster.address)
        task, static = built()
        assert pool.evaluate(task, Arch.SM_90A, static.module, EvalOptions()).worker == "tls-a"
        thread, out = in_thread(lambda: pool.evaluate(task, Arch.SM_90A, static.module, EvalOptions()))
        wait_for_requests(cluster, 2)
        time.sleep(0.5)  # the pool has looked for the worker holding it (FIRST_LOOK_S)
        cluster.kill("tls-a")
        thread.join(30)
        pool.close()
    finally:
        cluster.close()
    assert isinstance(out.get("error"), Interrupted), out
    assert "left the pool" in str(out["error"])


def test_a_request_from_other_code_is_refused_not_evaluated(dask_gpus: Cluster) -> None:
    pool = DaskPool(dask_gpus.address)
    newer = TASK.model_copy(update={"version": TASK.version + 1})
    _, static = built()
    try:
        with pytest.raises(Interrupted) as refused:
            pool.evaluate(newer, Arch.SM_90A, static.module, EvalOptions())
    finally:
        pool.close()
    assert str(refused.value) == (
        f"cpu-hopper refused the attempt: {TASK.name} is definition v{TASK.version} here but "
        f"v{TASK.version + 1} on the caller"
    )


def test_the_worker_function_answers_every_request_with_json(monkeypatch: pytest.MonkeyPatch) -> None:
    _, static = built()
    request = EvalRequest(task=TASK.name, task_version=TASK.version, arch=Arch.SM_90A, module=static.module,
                          options=EvalOptions())  # fmt: skip
    monkeypatch.setattr(dask_worker, "_service", None)
    assert "no GPU service in this process" in EvalReply.model_validate_json(evaluate_request("{}")).refused
    monkeypatch.setattr(dask_worker, "_name", "host-gpu3")
    monkeypatch.setattr(dask_worker, "_service", FakeService("blackwell", cc=(10, 0)))
    garbled = EvalReply.model_validate_json(evaluate_request('{"task": "gemm"}'))
    assert garbled.worker == "host-gpu3" and "- arch: required field is missing" in garbled.refused
    renamed = request.model_copy(update={"task": "nope"})
    unknown = EvalReply.model_validate_json(evaluate_request(renamed.model_dump_json()))
    assert unknown.refused.startswith("unknown task 'nope'")
    newer = EvalReply.model_validate_json(
        evaluate_request(request.model_copy(update={"protocol": 3}).model_dump_json())
    )
    assert newer.refused == "this host reads protocol v2, the caller sent v3"
    skipped = EvalReply.model_validate_json(evaluate_request(request.model_dump_json())).outcome
    assert skipped.status is Status.UNVERIFIED
    assert [s.message for s in skipped.stages] == ["host-gpu3: blackwell cannot run sm_90a"] * 4
    monkeypatch.setattr(dask_worker, "_service", FakeService("hopper"))
    passed = EvalReply.model_validate_json(evaluate_request(request.model_dump_json())).outcome
    assert (passed.status, passed.device, passed.metrics) == (Status.PASSED, "hopper", FAKE_METRICS)


def test_an_unreachable_scheduler_interrupts_instead_of_a_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dask_pool, "CONNECT_S", 0.5)
    pool = open_pool("dask://127.0.0.1:9")  # the discard port: nothing listens
    assert isinstance(pool, DaskPool)
    with pytest.raises(Interrupted, match=r"cannot reach the Dask scheduler at tcp://127\.0\.0\.1:9"):
        pool.unavailable_reason(Arch.SM_90A)
    assert pool.load() == []


def test_pool_settings_read_as_addresses() -> None:
    assert scheduler_address("local") is None
    assert scheduler_address("dask://gpu-host-1:8786") == "tcp://gpu-host-1:8786"
    assert scheduler_address("tls://10.0.0.5:8786") == "tls://10.0.0.5:8786"
    assert scheduler_address("tcp://[::1]:8786") == "tcp://[::1]:8786"
    for bad in ("dask://host", "http://host:8786", "dask://host:99999", "dask://-x:1", "host:8786"):
        with pytest.raises(ValueError, match="is not a pool: use local, dask://HOST:PORT"):
            scheduler_address(bad)
    off = open_gpu("dask://gpu-host-1:8786", use_gpu=False)
    assert isinstance(off, Unavailable) and off.unavailable_reason(Arch.SM_90A) == OFF


def test_the_worker_command_without_a_gpu_says_so_in_a_line() -> None:
    for args, expected in (
        (["tcp://127.0.0.1:9"], "error: no usable NVIDIA GPU here"),
        (["local"], "error: name the scheduler's address, e.g. tcp://HOST:8786"),
        (["dask://nowhere"], "error: 'dask://nowhere' is not a pool"),
    ):
        done = subprocess.run([sys.executable, "-m", "tools.gpu.dask_worker", *args], cwd=REPO, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert done.returncode == 2 and expected in done.stderr and "Traceback" not in done.stderr, done.stderr
