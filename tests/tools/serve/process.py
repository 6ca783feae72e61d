"""`python -m tools.serve` as a real uvicorn process on 127.0.0.1, started for a test and stopped after it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    def __init__(self, tmp: Path, *args: str, token: str | None = None, host: str = "127.0.0.1"):
        self.port = free_port()
        self.cwd, self.temp = tmp / "cwd", tmp / "temp"
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.temp.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "PTXBENCH_SERVE_TOKEN"}
        env |= {"PYTHONPATH": str(REPO), "TMPDIR": str(self.temp)} | ({"PTXBENCH_SERVE_TOKEN": token} if token else {})
        self.proc = subprocess.Popen([sys.executable, "-m", "tools.serve", "--host", host, "--port", str(self.port),
                                      *args], cwd=self.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=120)
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.http.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the service did not start: {self.proc.communicate()}")
            time.sleep(0.2)

    def stop(self) -> tuple[int, str, str]:
        self.http.close()
        self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, out, err

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *_) -> None:
        if self.proc.poll() is None:
            self.stop()
