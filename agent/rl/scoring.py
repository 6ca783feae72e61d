"""Who evaluates and scores a batch of answers: the HTTP service (tools/serve), where the evaluation GPUs are
apart from the trainer's, or this process (tools/pipeline on a GPU pool of this machine, or none: static
stages only, every attempt unverified). Both return tools/reward.py's Reward and the Evaluation per answer,
in the order given."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import httpx

from tasks.catalog import get_task
from tasks.schema import Arch
from tools.evaluation import Evaluation
from tools.gpu.base import Gpu, Unavailable
from tools.options import EvalOptions, Profile
from tools.pipeline import evaluate_answer
from tools.reward import Reward, RewardConfig, reward

URL_ENV = "PTXBENCH_SERVE_URL"
TOKEN_ENV = "PTXBENCH_SERVE_TOKEN"


@dataclass(frozen=True)
class Attempt:
    """One sampled answer to score: the problem and the model's text."""

    task: str
    arch: str
    answer: str


@dataclass(frozen=True)
class Scored:
    reward: Reward | None  # None: the answer could not be evaluated at all (`error` says why)
    evaluation: Evaluation | None
    error: str | None = None

    @property
    def score(self) -> float:
        return self.reward.score if self.reward else 0.0


class Scorer(Protocol):
    def score(self, attempts: list[Attempt]) -> list[Scored]: ...


class ServiceScorer:
    """A batch as one job of the service (POST /v1/jobs, then GET until done)."""

    def __init__(self, url: str, token: str | None = None, config: RewardConfig | None = None,
                 timeout_s: float = 3600.0, poll_s: float = 0.5):  # fmt: skip
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=60.0)
        self.config = config or RewardConfig()
        self.timeout_s, self.poll_s = timeout_s, poll_s

    @classmethod
    def from_environment(cls, config: RewardConfig | None = None) -> ServiceScorer:
        url = os.environ.get(URL_ENV)
        if not url:
            raise RuntimeError(f"set {URL_ENV} to the service's address (python -m tools.serve; e.g. "
                               "http://127.0.0.1:8000), or pass a scorer yourself")  # fmt: skip
        return cls(url, os.environ.get(TOKEN_ENV) or None, config)

    def score(self, attempts: list[Attempt]) -> list[Scored]:
        items = [{"task": a.task, "arch": a.arch, "answer": a.answer} for a in attempts]
        job = self._json(self.client.post("/v1/jobs", json={"items": items, "reward": self.config.model_dump()}))
        deadline = time.monotonic() + self.timeout_s
        while job["state"] != "done":
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job['id']} was not done within {self.timeout_s:.0f} s")
            time.sleep(self.poll_s)
            job = self._json(self.client.get(f"/v1/jobs/{job['id']}"))
        return [_scored(item) for item in job["results"]]

    @staticmethod
    def _json(response: httpx.Response) -> dict:
        if response.status_code >= 400:
            try:
                detail = response.json().get("error", response.text)
            except ValueError:
                detail = response.text
            raise RuntimeError(f"the service answered {response.status_code}: {detail[:500]}")
        return response.json()

    def close(self) -> None:
        self.client.close()


def _scored(item: dict) -> Scored:
    return Scored(
        reward=Reward.model_validate(item["reward"]) if item.get("reward") else None,
        evaluation=Evaluation.model_validate(item["evaluation"]) if item.get("evaluation") else None,
        error=item.get("error"),
    )


class LocalScorer:
    """In this process: the static stages on `threads` threads, the GPU stages on `gpu` (none: unverified)."""

    def __init__(self, gpu: Gpu | None = None, config: RewardConfig | None = None,
                 options: EvalOptions | None = None, threads: int = 4):  # fmt: skip
        self.gpu = gpu or Unavailable("no GPU pool given to the scorer")
        self.config = config or RewardConfig()
        self.options = options or EvalOptions(profile=Profile.COUNTS)
        self.threads = threads

    def score(self, attempts: list[Attempt]) -> list[Scored]:
        with ThreadPoolExecutor(self.threads) as pool:
            return list(pool.map(self._one, attempts))

    def _one(self, attempt: Attempt) -> Scored:
        try:
            task, arch = get_task(attempt.task), Arch.resolve(attempt.arch)
        except ValueError as e:
            return Scored(None, None, str(e))
        evaluation = evaluate_answer(attempt.answer, task, arch, self.options, self.gpu)
        return Scored(reward(evaluation, self.config), evaluation)
