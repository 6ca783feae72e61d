"""Who evaluates and scores a batch of answers: the HTTP service (tools/serve), where the evaluation GPUs are
apart from the trainer's, or this process (tools/pipeline on a GPU pool of this machine, or none: static
stages only, every attempt unverified). Both return tools/reward.py's Reward and the Evaluation per answer,
in the order given; an attempt naming no known task or arch comes back with its error, never as a score.

The scorer the path-loaded adapters use (`use()`, `default_scorer()`) lives here, in a module imported by name:
verl and OpenRLHF load agent/rl/rewards.py as a fresh module from its path, so state kept there would be a
second copy that `use()` never reaches."""

from __future__ import annotations

import email.utils
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
RETRIED = {429, 502, 503, 504}  # busy or restarting: worth another try; any other 4xx/5xx is final


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


class ServiceUnreachable(RuntimeError):
    """The service did not answer, or stayed busy, through every retry."""


def resolve(attempt: Attempt) -> str | None:
    """Why the attempt names no problem of the catalog (None: it does)."""
    try:
        get_task(attempt.task), Arch.resolve(attempt.arch)
    except ValueError as e:
        return str(e)
    return None


_scorer: Scorer | None = None


def use(scorer: Scorer | None) -> None:
    """The scorer the path-loaded adapters (verl, OpenRLHF) use; None: back to the service the environment names."""
    global _scorer
    _scorer = scorer


def default_scorer(url: str | None = None) -> Scorer:
    """`use()`'s scorer, else a service at `url` (verl's reward_kwargs), else the one PTXBENCH_SERVE_URL names."""
    global _scorer
    if _scorer is None:
        _scorer = ServiceScorer(url, os.environ.get(TOKEN_ENV) or None) if url else ServiceScorer.from_environment()
    return _scorer


class ServiceScorer:
    """A batch as one job of the service (POST /v1/jobs, then GET until done)."""

    def __init__(self, url: str, token: str | None = None, config: RewardConfig | None = None,
                 timeout_s: float = 3600.0, poll_s: float = 0.5, tries: int = 5, backoff_s: float = 0.5):  # fmt: skip
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.client = httpx.Client(base_url=self.url, headers=headers, timeout=60.0)
        self.config = config or RewardConfig()
        self.timeout_s, self.poll_s = timeout_s, poll_s
        self.tries, self.backoff_s = tries, backoff_s

    @classmethod
    def from_environment(cls, config: RewardConfig | None = None) -> ServiceScorer:
        url = os.environ.get(URL_ENV)
        if not url:
            raise RuntimeError(f"set {URL_ENV} to the service's address (python -m tools.serve; e.g. "
                               "http://127.0.0.1:8000), or pass a scorer yourself")  # fmt: skip
        return cls(url, os.environ.get(TOKEN_ENV) or None, config)

    def score(self, attempts: list[Attempt]) -> list[Scored]:
        """One job of the attempts that name a problem (the service would refuse the whole job for one that does
        not); those that do not come back with their error."""
        errors = [resolve(a) for a in attempts]
        valid = [a for a, e in zip(attempts, errors, strict=True) if e is None]
        results = iter(self._job(valid) if valid else [])
        return [Scored(None, None, e) if e else next(results) for e in errors]

    def _job(self, attempts: list[Attempt]) -> list[Scored]:
        items = [{"task": a.task, "arch": a.arch, "answer": a.answer} for a in attempts]
        job = self._request("POST", "/v1/jobs", {"items": items, "reward": self.config.model_dump()})
        deadline = time.monotonic() + self.timeout_s
        while job["state"] != "done":
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job['id']} at {self.url} was not done within {self.timeout_s:.0f} s")
            time.sleep(self.poll_s)
            job = self._request("GET", f"/v1/jobs/{job['id']}")
        return [_scored(item) for item in job["results"]]

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        """The answer's JSON; a refused connection, a time-out or a busy answer is tried again after a doubling
        wait (the service's Retry-After when it gives one), `tries` times in all, then ServiceUnreachable."""
        why, wait = "", 0.0
        for attempt in range(self.tries):
            time.sleep(wait)
            wait = self.backoff_s * 2**attempt
            try:
                response = self.client.request(method, path, json=body)
            except httpx.TransportError as e:
                why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                continue
            if response.status_code in RETRIED:
                why = f"it answered {response.status_code}"
                wait = max(wait, _retry_after(response))
                continue
            return self._json(response)
        raise ServiceUnreachable(f"the PTXBench service at {self.url} did not answer {method} {path} after "
                                 f"{self.tries} tries ({why}); is `python -m tools.serve` running there?")  # fmt: skip

    def _json(self, response: httpx.Response) -> dict:
        if response.status_code >= 400:
            try:
                detail = response.json().get("error", response.text)
            except ValueError:
                detail = response.text
            raise RuntimeError(f"the service at {self.url} answered {response.status_code}: {str(detail)[:500]}")
        return response.json()

    def close(self) -> None:
        self.client.close()


def _retry_after(response: httpx.Response) -> float:
    """The wait a Retry-After header asks for, in seconds (0 when absent or unreadable), at most a minute."""
    value = response.headers.get("Retry-After", "")
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            seconds = 0.0
    return min(60.0, max(0.0, seconds)) if seconds == seconds else 0.0  # NaN reads as absent


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
        if error := resolve(attempt):
            return Scored(None, None, error)
        task, arch = get_task(attempt.task), Arch.resolve(attempt.arch)
        evaluation = evaluate_answer(attempt.answer, task, arch, self.options, self.gpu)
        return Scored(reward(evaluation, self.config), evaluation)
