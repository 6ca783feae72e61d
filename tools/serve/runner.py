"""Where the service's evaluations run: the static stages (extract, compile, SASS, ABI) on a bounded pool of
threads in this process, so that one huge answer holds one thread and not the others; the GPU stages on the
evaluation pool (tools/pool), which queues them per GPU. Jobs are kept in memory until the service stops;
the counters behind /metrics live here too. Admission is bounded: past `max_queued` attempts in flight or
`max_jobs` running jobs a request is refused with Busy (the service's 429), so its memory and its backlog
stay bounded however much is sent."""

from __future__ import annotations

import secrets
import threading
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from tasks.catalog import get_task
from tasks.schema import Arch
from tools.evaluation import Evaluation
from tools.gpu.base import Gpu
from tools.options import Profile
from tools.pipeline import build, extract, on_gpu
from tools.reward import RewardConfig, reward
from tools.serve.schema import EvaluateRequest, JobState, ScoredItem

MAX_JOBS = 256  # kept in memory; the oldest finished ones go first when a new one would exceed this
DEFAULT_MAX_QUEUED = 8192  # attempts waiting or running: two jobs of the most items a job holds
DEFAULT_MAX_JOBS = 4  # running at once
RETRY_AFTER_S = 10


class BadRequest(ValueError):
    """A request that names something that does not exist (a task, an arch): a 4xx, with this message."""


class Busy(Exception):
    """More than the service admits now: a 429 with Retry-After, with this message."""


@dataclass
class Job:
    id: str
    count: int
    results: list[ScoredItem | None]
    done: int = 0

    def state(self) -> JobState:
        """Where the job stands; its results once every item is done (each is set before `done` counts it)."""
        finished = self.done == self.count
        results = [r for r in self.results if r is not None] if finished else None
        return JobState(id=self.id, state="done" if finished else "running", count=self.count, done=self.done,
                        results=results)  # fmt: skip


@dataclass
class Counters:
    """What /metrics reports; guarded by the runner's lock."""

    evaluations: Counter[tuple[str, str]] = field(default_factory=Counter)  # (arch, status) → count
    waiting_static: int = 0
    waiting_gpu: int = 0


class Runner:
    def __init__(self, gpu: Gpu, static_workers: int, gpu_workers: int, max_queued: int = DEFAULT_MAX_QUEUED,
                 max_jobs: int = DEFAULT_MAX_JOBS):  # fmt: skip
        self.gpu, self.max_queued, self.max_jobs = gpu, max_queued, max_jobs
        self._static = ThreadPoolExecutor(static_workers, thread_name_prefix="static")
        self._gpu = ThreadPoolExecutor(gpu_workers, thread_name_prefix="gpu")  # the pool queues per GPU itself
        self._lock = threading.Lock()
        self.counters = Counters()
        self.jobs: dict[str, Job] = {}

    def close(self) -> None:
        self._static.shutdown(cancel_futures=True)
        self._gpu.shutdown(cancel_futures=True)

    # --------------------------------------------------------------------------------------- one attempt

    def evaluate(self, request: EvaluateRequest, default_profile: Profile) -> Future[Evaluation]:
        """The attempt's Evaluation, when both halves are done. BadRequest at once for an unknown task or arch,
        Busy when the queue is full."""
        return self.evaluate_all([request], default_profile)[0]

    def evaluate_all(self, requests: list[EvaluateRequest], default_profile: Profile) -> list[Future[Evaluation]]:
        """Every attempt's Evaluation, admitted together or not at all (Busy)."""
        problems = [problem(r) for r in requests]
        with self._lock:
            self._admit(len(requests))
        return [self._start(r, *p, default_profile) for r, p in zip(requests, problems, strict=True)]

    def _admit(self, count: int, job: bool = False) -> None:
        """Count `count` attempts (of a new job) as waiting, or Busy; under the lock, so admissions never race."""
        if job and sum(j.done < j.count for j in self.jobs.values()) >= self.max_jobs:
            raise Busy(f"the service is busy: {self.max_jobs} jobs are running, the most it runs at once; "
                       f"retry in {RETRY_AFTER_S} s")  # fmt: skip
        queued = self.counters.waiting_static + self.counters.waiting_gpu
        if queued + count > self.max_queued:
            raise Busy(f"the service is busy: {queued} attempts queued, {count} more would pass its bound of "
                       f"{self.max_queued}; retry in {RETRY_AFTER_S} s")  # fmt: skip
        self.counters.waiting_static += count

    def _start(self, request: EvaluateRequest, task, arch, default_profile: Profile) -> Future[Evaluation]:
        """The attempt on the static threads, then the GPU's; it was admitted (counted as waiting) already."""
        options = request.eval_options(default_profile)
        done: Future[Evaluation] = Future()

        def static_part() -> None:
            try:
                extracted = extract(task, arch, answer=request.answer, solution=request.solution)
                static = build(extracted, task, arch, options)
            except BaseException as e:  # a harness bug: the request fails, the service does not
                self._settle(done, error=e, waiting="waiting_static")
                return
            with self._lock:
                self.counters.waiting_static -= 1
                self.counters.waiting_gpu += 1
            self._gpu.submit(gpu_part, static)

        def gpu_part(static) -> None:
            try:
                evaluation = on_gpu(static, task, arch, options, self.gpu)
            except BaseException as e:
                self._settle(done, error=e, waiting="waiting_gpu")
                return
            self._settle(done, evaluation=evaluation, waiting="waiting_gpu")

        self._static.submit(static_part)
        return done

    def _settle(self, done: Future, *, waiting: str, evaluation: Evaluation | None = None,
                error: BaseException | None = None) -> None:  # fmt: skip
        with self._lock:
            setattr(self.counters, waiting, getattr(self.counters, waiting) - 1)
            if evaluation is not None:
                self.counters.evaluations[(str(evaluation.arch), str(evaluation.status))] += 1
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(evaluation)

    # -------------------------------------------------------------------------------------------- jobs

    def submit_job(self, items: list[EvaluateRequest], scoring: RewardConfig | None, profile: Profile) -> Job:
        """A job of every item, started now. BadRequest names the first item that cannot be evaluated at all."""
        for number, item in enumerate(items):
            try:
                problem(item)
            except BadRequest as e:
                raise BadRequest(f"items[{number}]: {e}") from None
        job = Job(id=secrets.token_hex(8), count=len(items), results=[None] * len(items))
        with self._lock:
            self._admit(len(items), job=True)
            self._make_room()
            self.jobs[job.id] = job
        for number, item in enumerate(items):
            future = self._start(item, *problem(item), profile)
            future.add_done_callback(lambda f, n=number: self._item_done(job, n, f, scoring))
        return job

    def _item_done(self, job: Job, number: int, future: Future[Evaluation], scoring: RewardConfig | None) -> None:
        try:
            evaluation = future.result()
            item = ScoredItem.of(evaluation, reward(evaluation, scoring) if scoring else None)
        except Exception as e:  # one item's failure is that item's result
            item = ScoredItem(error=f"{type(e).__name__}: {e}")
        with self._lock:
            job.results[number] = item
            job.done += 1

    def _make_room(self) -> None:
        finished = [j for j in self.jobs.values() if j.done == j.count]
        while len(self.jobs) >= MAX_JOBS and finished:
            del self.jobs[finished.pop(0).id]

    def job(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    def queue_depth(self) -> tuple[int, int]:
        with self._lock:
            return self.counters.waiting_static, self.counters.waiting_gpu


def problem(request: EvaluateRequest):
    """The request's task and arch, or BadRequest saying which name is unknown and what is known."""
    try:
        return get_task(request.task), Arch.resolve(request.arch)
    except ValueError as e:  # UnknownName
        raise BadRequest(str(e)) from None
