"""The evaluation pool on many GPU hosts: a Dask distributed client of a scheduler (tools/gpu/dask_scheduler.py) whose
workers are `python -m tools.gpu.dask_worker` processes, one per GPU, each offering its arch as a resource.

What crosses the wire is JSON (tools/gpu/protocol.py): the request (task, arch, the compiled module with its cubin and
launch plan, the options) to the one importable function tools.gpu.dask_worker.evaluate_request, and its reply; the
static stages stay here. Placement is the scheduler's: a request goes only to a worker offering its arch, one at a
time each, to the least occupied of them. A request for an arch no connected worker offers is unverified at once,
with that reason (Dask would hold it forever). A lost worker, host or scheduler is never a verdict: the evaluation
raises Interrupted, so the turn is not recorded and the run resumes it. Our scheduler fails a dead worker's requests
instead of running them again elsewhere; and a waiting evaluation watches that the worker holding it is still
connected, so that on a stock scheduler, which does run them again, it is dropped with its result within WATCH_S of
that worker leaving (only a worker that dies before the first look, FIRST_LOOK_S after sending, escapes the watch)."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import CancelledError
from typing import Any, TypeVar

from distributed import Client, Future, KilledWorker

from tasks.schema import Arch, Task
from tools.gpu.base import CompiledModule, GpuOutcome
from tools.gpu.dask_worker import evaluate_request
from tools.gpu.protocol import EvalReply, EvalRequest
from tools.options import EvalOptions
from tools.pool.base import Interrupted, Load

CONNECT_S = 10.0  # how long reaching the scheduler may take before it counts as unreachable
WATCH_S = 1.0  # how often a waiting evaluation checks that its worker is still there
FIRST_LOOK_S = 0.05  # how soon it first looks for that worker (the scheduler places a request in milliseconds)
QUEUED = ("ready", "constrained", "waiting")  # a Dask worker's states of a task that has not started
ARCHS = {str(a) for a in Arch}
T = TypeVar("T")


def workers_of(client: Client) -> dict[str, dict[str, Any]]:
    """The workers the scheduler knows now, by address, asked of it directly. Not Client.scheduler_info: it returns a
    cache that the client's own refresh, every 2 s and without workers, can overwrite between its fetch and its
    return, making every worker seem gone for a moment (distributed 2026.8)."""
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


class DaskPool:
    """The scheduler at `address`; it is reached on first use, as a GPU service starts its worker on first use."""

    def __init__(self, address: str):
        self.address = address
        self.interrupted = False
        self._client: Client | None = None
        self._lock = threading.Lock()
        self._in_flight: set[Future] = set()

    # ---------------------------------------------------------------------------------- the scheduler

    def _connected(self) -> Client:
        with self._lock:
            if self.interrupted:
                raise Interrupted("the pool was stopped")
            if self._client is None:
                try:
                    self._client = Client(self.address, timeout=CONNECT_S, set_as_default=False, name="ptxbench")
                except (OSError, TimeoutError) as e:
                    raise Interrupted(f"cannot reach the Dask scheduler at {self.address}: {e}") from None
            if self._client.status != "running":
                raise Interrupted(f"lost the connection to the Dask scheduler at {self.address}")
            return self._client

    def _ask(self, question: Callable[[Client], T]) -> T:
        """`question` put to the scheduler through the client; Interrupted once the connection is gone."""
        client = self._connected()
        try:
            answer = question(client)
        except (OSError, KeyError, TimeoutError) as e:  # a closing client answers with an emptied reply: KeyError
            raise Interrupted(f"lost the connection to the Dask scheduler at {self.address} ({e!r})") from None
        if client.status != "running":  # the answer came from a client giving up on its scheduler
            raise Interrupted(f"lost the connection to the Dask scheduler at {self.address}")
        return answer

    def _workers(self) -> dict[str, dict[str, Any]]:
        """The scheduler's workers by address, as it knows them now."""
        return self._ask(workers_of)

    # ----------------------------------------------------------------------------------- the Gpu protocol

    def unavailable_reason(self, arch: Arch) -> str | None:
        workers = self._workers()
        if any(str(arch) in w["resources"] for w in workers.values()):
            return None
        offered = sorted({r for w in workers.values() for r in w["resources"]})
        return (f"no worker of the Dask pool at {self.address} offers {arch} ({len(workers)} connected"
                + (f", offering {', '.join(offered)})" if offered else ")"))  # fmt: skip

    def evaluate(self, task: Task, arch: Arch, module: CompiledModule, options: EvalOptions) -> GpuOutcome:
        request = EvalRequest(task=task.name, task_version=task.version, arch=arch, module=module, options=options)
        future = self._connected().submit(evaluate_request, request.model_dump_json(), key=f"ptxbench-{uuid.uuid4()}",
                                          resources={str(arch): 1}, pure=False)  # fmt: skip
        with self._lock:
            self._in_flight.add(future)
        try:
            reply = EvalReply.model_validate_json(self._wait(future, arch))
        finally:
            with self._lock:
                self._in_flight.discard(future)
        if reply.outcome is None:
            raise Interrupted(f"{reply.worker} refused the attempt: {reply.refused}")
        return reply.outcome.model_copy(update={"worker": reply.worker})

    def _wait(self, future: Future, arch: Arch) -> str:
        """The reply; meanwhile, every WATCH_S, that the worker holding the request is still connected, and that some
        worker still offers the arch while it waits for one."""
        holder: str | None = None
        wait_s = FIRST_LOOK_S
        while True:
            try:
                return future.result(timeout=wait_s)
            except TimeoutError:
                pass
            except KilledWorker:
                raise Interrupted(f"the Dask worker holding this attempt ({holder or 'not yet seen'}) died") from None
            except CancelledError:
                raise Interrupted(
                    "the pool was stopped" if self.interrupted else f"lost the Dask scheduler at {self.address}"
                ) from None
            workers = self._workers()
            if holder is not None and holder not in workers:
                future.cancel()
                raise Interrupted(f"the Dask worker {holder} holding this attempt left the pool")
            if not any(str(arch) in w["resources"] for w in workers.values()):
                future.cancel()
                raise Interrupted(f"every worker offering {arch} left the Dask pool while this attempt waited")
            processing = self._ask(lambda client: client.processing())
            holder = next((w for w, keys in processing.items() if future.key in keys), holder)
            wait_s = WATCH_S

    def device_info(self) -> None:
        """None: the pool's GPUs are many; each Evaluation names its device and worker."""
        return None

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # ------------------------------------------------------------------------------------ the Pool protocol

    def describe(self) -> str:
        workers = self._workers()
        archs = Counter(r for w in workers.values() for r in w["resources"] if r in ARCHS)
        hosts = {w["host"] for w in workers.values()}
        offered = ", ".join(f"{arch} ×{n}" for arch, n in sorted(archs.items())) or "no arch"
        return f"Dask pool at {self.address}: {len(workers)} worker(s) on {len(hosts)} host(s), {offered}"

    def load(self) -> list[Load]:
        """Per worker, what it runs and holds queued for anyone (other clients' requests too), as of its last
        heartbeat; nothing while the scheduler cannot be reached."""
        try:
            workers = self._workers()
        except Interrupted:
            return []
        loads = []
        for w in workers.values():
            counts = w.get("metrics", {}).get("task_counts", {})
            arch = next((r for r in w["resources"] if r in ARCHS), "?")
            loads.append(Load(arch, w["host"], counts.get("executing", 0), sum(counts.get(s, 0) for s in QUEUED)))
        return loads

    def interrupt(self) -> None:
        self.interrupted = True
        with self._lock:
            futures = list(self._in_flight)
        for future in futures:
            future.cancel()
        self.close()
