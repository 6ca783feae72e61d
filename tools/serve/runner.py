"""Where the service's evaluations run: the static stages (extract, compile, SASS, ABI) on a bounded pool of
threads in this process, so that one huge answer holds one thread and not the others; the GPU stages on the
evaluation pool (tools/pool), which queues them per GPU. Jobs are kept in memory until the service stops;
the counters behind /metrics live here too."""

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


class BadRequest(ValueError):
    """A request that names something that does not exist (a task, an arch): a 4xx, with this message."""


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
    def __init__(self, gpu: Gpu, static_workers: int, gpu_workers: int):
        self.gpu = gpu
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
        """The attempt's Evaluation, when both halves are done. BadRequest at once for an unknown task or arch."""
        task, arch = problem(request)
        options = request.eval_options(default_profile)
        done: Future[Evaluation] = Future()
        with self._lock:
            self.counters.waiting_static += 1

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
            self._make_room()
            self.jobs[job.id] = job
        for number, item in enumerate(items):
            self.evaluate(item, profile).add_done_callback(lambda f, n=number: self._item_done(job, n, f, scoring))
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
