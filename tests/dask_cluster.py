"""Real Dask clusters on 127.0.0.1 for the evaluation pool's tests: a scheduler process (ours, or Dask's stock one)
and worker processes started with tools.gpu.dask_worker's own `dask worker` command, optionally over TLS with a
self-signed certificate. The workers have no GPU, so their GPU stages are skipped, unless they preload the stand-in
service of tests/tools/dask_standin.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dask
from distributed import Client

from tasks.schema import Arch
from tools.gpu.dask_worker import worker_command
from tools.gpu.devices import visible_count
from tools.pool.dask import workers_of

REPO = Path(__file__).resolve().parents[1]
OURS = ["tools.gpu.dask_scheduler"]
STOCK = ["distributed.cli.dask_scheduler"]
STANDIN = "tests.tools.dask_standin"
START_S = 60.0  # a scheduler or worker process that is not up by then has failed


class Cluster:
    def __init__(self, folder: Path, scheduler: list[str] = OURS, tls: bool = False, hold_s: float = 1.5):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.log = folder / "standin.log"
        self.log.touch()
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)  # and what was installed
        self.env = dict(os.environ, PYTHONPATH=path, PTXBENCH_STANDIN_LOG=str(self.log),
                        PTXBENCH_STANDIN_HOLD_S=str(hold_s))  # fmt: skip
        self.tls = self._certificate() if tls else []
        self._config = dask.config.set(self._tls_config()) if tls else None  # this process's clients use it
        file = folder / "scheduler.json"
        self.scheduler = self._spawn("scheduler", [sys.executable, "-m", *scheduler, "--host", "127.0.0.1", "--port",
                                                   "0", "--no-dashboard", "--scheduler-file", str(file),
                                                   *self._protocol()])  # fmt: skip
        self.workers: dict[str, subprocess.Popen] = {}
        try:
            deadline = time.monotonic() + START_S
            while not file.is_file() and time.monotonic() < deadline:
                time.sleep(0.1)
            self.address = json.loads(file.read_text())["address"]
            self.client = Client(self.address, set_as_default=False, timeout=START_S)
        except Exception:
            self.scheduler.kill()
            raise

    def _certificate(self) -> list[str]:
        """One self-signed certificate, its own authority, for the scheduler, the workers and the clients."""
        if shutil.which("openssl") is None:
            raise RuntimeError("openssl is needed to make the TLS test's certificate")
        key, cert = self.folder / "key.pem", self.folder / "cert.pem"
        command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                   "-days", "1", "-subj", "/CN=localhost"]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True)
        return ["--tls-ca-file", str(cert), "--tls-cert", str(cert), "--tls-key", str(key)]

    def _tls_config(self) -> dict[str, str]:
        ca, cert, key = self.tls[1::2]
        return {"distributed.comm.tls.ca-file": ca, "distributed.comm.tls.client.cert": cert,
                "distributed.comm.tls.client.key": key}  # fmt: skip

    def _protocol(self) -> list[str]:
        return ["--protocol", "tls", *self.tls] if self.tls else []

    def _spawn(self, name: str, command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "a")  # noqa: SIM115 (the process keeps it)
        return subprocess.Popen(command, env=env or self.env, stdout=log, stderr=subprocess.STDOUT)

    def start(self, name: str, arch: Arch, standin: bool = False) -> None:
        """A worker started as tools.gpu.dask_worker starts one per GPU (plus the stand-in's preload, if asked)."""
        command = worker_command(self.address, arch, name, self.tls) + (["--preload", STANDIN] if standin else [])
        self.workers[name] = self._spawn(name, command)

    def start_host(self, visible: str | None = None) -> list[str]:
        """`python -m tools.gpu.dask_worker` itself, as on a GPU host: a worker per GPU (those of CUDA_VISIBLE_DEVICES
        `visible`, if given); their names."""
        env = self.env if visible is None else dict(self.env, CUDA_VISIBLE_DEVICES=visible)
        command = [sys.executable, "-m", "tools.gpu.dask_worker", self.address, *self.tls]
        self.workers[f"host{len(self.workers)}"] = self._spawn("host", command, env)
        ids = visible or os.environ.get("CUDA_VISIBLE_DEVICES") or ",".join(map(str, range(visible_count())))
        return [f"{socket.gethostname()}-gpu{i}" for i in ids.split(",")]

    def wait_for(self, *names: str) -> None:
        """Until every named worker is connected (after a kill, its nanny starts it again)."""
        deadline = time.monotonic() + START_S
        while set(names) - self.connected():
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers {names} did not connect; see {self.folder}")
            time.sleep(0.2)

    def connected(self) -> set[str]:
        return {w["name"] for w in workers_of(self.client).values()}

    def kill(self, name: str) -> None:
        """SIGKILL the worker process itself (not its nanny, which then starts a new one), and wait until the
        scheduler has seen it go."""
        address = next(a for a, w in workers_of(self.client).items() if w["name"] == name)
        pid = self.client.run(os.getpid, workers=[address])[address]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + START_S
        while address in workers_of(self.client):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the scheduler still lists {name} at {address} after its kill")
            time.sleep(0.05)

    def events(self) -> list[tuple[str, str]]:
        """What the stand-in services did, in order: ('took' or 'done', worker name)."""
        return [tuple(line.split()) for line in self.log.read_text().splitlines()]

    def requests(self) -> list[str]:
        """The workers that took a request, one per request taken."""
        return [worker for event, worker in self.events() if event == "took"]

    def close(self) -> None:
        """The workers first: one whose scheduler has gone waits for it before it exits."""
        self.client.close()
        for group in (list(self.workers.values()), [self.scheduler]):
            for process in group:
                process.terminate()
            for process in group:
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:  # a worker still running a request: nothing there to keep
                    process.kill()
        if self._config is not None:
            self._config.__exit__(None, None, None)


@contextmanager
def standins(folder: Path, hold_s: float) -> Iterator[Cluster]:
    """Our scheduler and two sm_90a workers, slow-a and slow-b, whose stand-in service holds each request
    `hold_s`, then passes."""
    cluster = Cluster(folder, hold_s=hold_s)
    try:
        cluster.start("slow-a", Arch.SM_90A, standin=True)
        cluster.start("slow-b", Arch.SM_90A, standin=True)
        cluster.wait_for("slow-a", "slow-b")
        yield cluster
    finally:
        cluster.close()
