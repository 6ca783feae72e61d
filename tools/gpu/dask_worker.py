"""A GPU host's side of the Dask evaluation pool (tools/pool/dask.py is the caller's side).

`python -m tools.gpu.dask_worker tcp://SCHEDULER:8786 [--tls-ca-file F --tls-cert F --tls-key F]` starts one Dask
worker (Dask's own `dask worker`, whose nanny restarts a worker process that dies) per visible GPU, each pinned to
its GPU with CUDA_VISIBLE_DEVICES, with one thread and the resource {ARCH: 1} of the GPU's compute capability: the
scheduler sends it requests of that arch only, one at a time. Every worker process preloads this module, which holds
the process's one long-lived GpuService (a kernel fault stays inside the service's own worker process, as on a GPU
of the caller's machine) and closes it when the worker stops.

The one thing the pool submits is `evaluate_request`: a request's JSON in, the reply's JSON out (the messages of
tools/gpu/protocol.py).
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys

from pydantic import ValidationError

from tasks.catalog import get_task
from tasks.schema import Arch, UnknownName
from tools.answer import format_validation_error
from tools.extras import needs
from tools.gpu import launcher
from tools.gpu.base import Gpu
from tools.gpu.devices import NoDevice, device_info, visible_count
from tools.gpu.protocol import PROTOCOL, EvalReply, EvalRequest
from tools.gpu.service import GpuService
from tools.gpu.stages import skipped
from tools.pool.base import scheduler_address

with needs("dask", "python -m tools.gpu.dask_worker"):
    import distributed  # noqa: F401  (the workers this starts, and whose preload this module is, are Dask's)

PRELOAD = "tools.gpu.dask_worker"
TLS_FLAGS = ("--tls-ca-file", "--tls-cert", "--tls-key")  # passed to `dask worker` as given


_service: Gpu | None = None  # this worker process's GPU service
_name = "a Dask worker without the preload"


def hold(service: Gpu, name: str) -> None:
    """Make `service` the one this process evaluates on (closing the one before it)."""
    global _service, _name
    if _service is not None:
        _service.close()
    _service, _name = service, name


def dask_setup(worker) -> None:
    """Dask calls this in each worker process that preloads the module; CUDA_VISIBLE_DEVICES shows it one GPU."""
    hold(GpuService(device=0), str(worker.name))  # its worker process starts on the first request


def dask_teardown(worker) -> None:
    if _service is not None:
        _service.close()


def evaluate_request(request_json: str) -> str:
    """The GPU stages of one request on this process's service, and the reply as JSON. Never raises: a GPU that cannot
    run the arch gives the skipped stages (unverified), a request this worker cannot read is refused with why."""
    if _service is None:
        return _refuse("no GPU service in this process: start workers with python -m tools.gpu.dask_worker")
    try:
        request = EvalRequest.model_validate_json(request_json)
        if request.protocol != PROTOCOL:
            return _refuse(f"this host reads protocol v{PROTOCOL}, the caller sent v{request.protocol}")
        task = get_task(request.task)
    except ValidationError as e:
        return _refuse(f"the request does not read here (other code than the caller's):\n{format_validation_error(e)}")
    except UnknownName as e:
        return _refuse(f"{e} (this host runs other code than the caller)")
    if task.version != request.task_version:
        return _refuse(f"{task.name} is definition v{task.version} here but v{request.task_version} on the caller")
    reason = _service.unavailable_reason(request.arch)
    if reason:
        outcome = skipped(f"{_name}: {reason}")
    else:
        outcome = _service.evaluate(task, request.arch, request.module, request.options)
    return EvalReply(worker=_name, outcome=outcome).model_dump_json()


def _refuse(reason: str) -> str:
    return EvalReply(worker=_name, refused=reason).model_dump_json()


# ---------------------------------------------------------------------------------------- the command


def worker_command(scheduler: str, arch: Arch, name: str, tls: list[str]) -> list[str]:
    """`dask worker` for one GPU: one thread, and the GPU's arch as its one resource; no memory limit, since what the
    GPU service holds is not Dask's to spill or pause for."""
    return [sys.executable, "-m", "distributed.cli.dask_worker", scheduler, "--name", name, "--nthreads", "1",
            "--resources", f"{arch}=1", "--memory-limit", "0", "--no-dashboard", "--preload", PRELOAD,
            *tls]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu.dask_worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("scheduler", help="the scheduler: tcp://HOST:8786 (dask:// reads the same) or tls://HOST:8786")
    for flag in TLS_FLAGS:
        parser.add_argument(flag, metavar="FILE", help="for a tls:// scheduler (Dask's own TLS settings work too)")
    args = parser.parse_args(argv)
    try:
        address = scheduler_address(args.scheduler)
    except ValueError as e:
        parser.error(str(e))
    if address is None:
        parser.error("name the scheduler's address, e.g. tcp://HOST:8786")
    tls = []
    for flag in TLS_FLAGS:
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        tls += [flag, value] if value else []
    try:
        count = visible_count()
    except NoDevice as e:
        print(f"error: {e}; no worker started", file=sys.stderr)
        return 2
    host, workers = socket.gethostname(), []
    for ordinal in range(count):
        info = device_info(ordinal)
        if info.arch is None:
            print(f"gpu {ordinal}: {info.name} (sm_{''.join(map(str, info.capability))}) runs neither sm_90a nor "
                  "sm_100a; no worker", file=sys.stderr)  # fmt: skip
            continue
        env = launcher.environment(ordinal)
        name = f"{host}-gpu{env['CUDA_VISIBLE_DEVICES']}"  # the GPU's own id: unique on the host, whoever sees it
        workers.append(subprocess.Popen(worker_command(address, info.arch, name, tls), env=env))
        print(f"gpu {ordinal}: {info.name} ({info.arch}) → Dask worker {name} of {address}", file=sys.stderr)
    if not workers:
        print("error: no GPU here runs sm_90a or sm_100a; no worker started", file=sys.stderr)
        return 2
    return _supervise(workers)


def _supervise(workers: list[subprocess.Popen]) -> int:
    """Wait for the workers; SIGTERM or Ctrl-C stops them all (each closes its GPU service on the way out)."""

    def stop(signum: int, frame: object) -> None:
        for worker in workers:
            if worker.poll() is None:
                worker.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    codes = [worker.wait() for worker in workers]
    return next((code for code in codes if code), 0)


if __name__ == "__main__":
    sys.exit(main())
