"""The service's HTTP API (FastAPI): evaluate one answer, score it, submit many as a job and poll it, OpenRLHF's
remote-reward shape, the task catalog, health and Prometheus metrics.

Every 4xx body is `{"error": "…"}` naming the field and what was expected, in the command-line tools' words;
with a token configured every path but /healthz (the API docs and the schema too) needs `Authorization: Bearer
TOKEN`; without one only requests addressed to this machine's loopback names are answered (a web page that
rebinds its own name to 127.0.0.1 cannot reach the service). Bodies are capped (MAX_BODY_BYTES) before they
are parsed. Nothing a request names reaches the file system: answers are text,
task and arch names are looked up in the catalog, and CUDA answers keep the harness's include rules."""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import sys
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from tasks.catalog import TASKS
from tools import jsontext
from tools.answer import format_validation_error
from tools.evaluation import Evaluation
from tools.options import Profile
from tools.query import response_after
from tools.reward import reward
from tools.serve.runner import RETRY_AFTER_S, BadRequest, Busy, Runner
from tools.serve.schema import EvaluateRequest, JobRequest, JobState, OpenRLHFRequest, RewardRequest, ScoredItem

MAX_BODY_BYTES = 64 << 20  # a job of a few hundred answers; one answer is capped at 8 MB by the harness
# A body's integers may be as long as Python reads at all: the request models bound every number, and their
# refusal names the field (a 4,000-digit cluster extent is "…cluster.0: Input should be less than …").
BODY_MAX_DIGITS = sys.int_info.default_max_str_digits
BODY_TIMEOUT_S = 60.0  # to send a whole body: 64 MB at about 1 MB/s
JOB_ID = re.compile(r"[0-9a-f]{16}")
DEFAULT_PROFILE = Profile.AUTO  # /v1/evaluate: as tools.evaluate
REWARD_PROFILE = Profile.COUNTS  # the rewards' default: if_correct, without the perf pass
OPEN_PATHS = {"/healthz"}
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]"}


class HTTPProblem(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def create_app(runner: Runner, token: str | None, pool: str, body_timeout_s: float = BODY_TIMEOUT_S) -> FastAPI:
    """The API over `runner`; `token`: the bearer token every path but /healthz requires (None: none, and
    only loopback Host names are answered)."""
    app = FastAPI(title="PTXBench", summary="Evaluate PTX/CUDA answers; rewards for RL trainers.")
    app.router.route_class = GuardedJsonRoute
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES, timeout_s=body_timeout_s)
    app.add_middleware(Gate, token=token)  # outermost: nothing is read before the caller is let in

    @app.exception_handler(HTTPProblem)
    async def _problem(_: Request, e: HTTPProblem) -> JSONResponse:
        return JSONResponse({"error": e.message}, status_code=e.status, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        if any(item["type"] == "json_invalid" for item in errors):
            return JSONResponse({"error": "the body is not JSON"}, status_code=400)
        lines = [f"- {_where(item['loc'])}: {_message(item)}" for item in errors[:12]]
        return JSONResponse({"error": "invalid request:\n" + "\n".join(lines)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:  # 404, 405, 413 in our shape
        return JSONResponse({"error": str(e.detail)}, status_code=e.status_code, headers=e.headers)

    @app.exception_handler(Busy)
    async def _busy(_: Request, e: Busy) -> JSONResponse:
        return JSONResponse({"error": str(e)}, status_code=429, headers={"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(BadRequest)
    async def _bad(_: Request, e: BadRequest) -> JSONResponse:
        return JSONResponse({"error": str(e)}, status_code=422)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        static, gpu = runner.queue_depth()
        return {"ok": True, "pool": pool, "queued_static": static, "queued_gpu": gpu}

    @app.get("/v1/tasks")
    async def tasks() -> list[dict[str, Any]]:
        return [_task_entry(t) for t in TASKS.values()]

    @app.post("/v1/evaluate")
    async def evaluate(body: EvaluateRequest) -> Evaluation:
        return await asyncio.wrap_future(runner.evaluate(body, DEFAULT_PROFILE))

    @app.post("/v1/reward")
    async def score(body: RewardRequest) -> ScoredItem:
        evaluation = await asyncio.wrap_future(runner.evaluate(body, REWARD_PROFILE))
        scored = reward(evaluation, body.reward)
        return ScoredItem.of(evaluation, scored)

    @app.post("/v1/jobs", status_code=202)
    async def submit(body: JobRequest) -> JobState:
        profile = REWARD_PROFILE if body.reward is not None else DEFAULT_PROFILE
        return runner.submit_job(body.items, body.reward, profile).state()

    @app.get("/v1/jobs/{job_id}")
    async def poll(job_id: str) -> JobState:
        job = runner.job(job_id) if JOB_ID.fullmatch(job_id) else None
        if job is None:
            raise HTTPProblem(404, "no such job (ids are 16 hex digits, kept until the service stops)")
        return job.state()

    @app.post("/v1/openrlhf")
    async def openrlhf(body: OpenRLHFRequest) -> dict[str, Any]:
        triples = zip(body.query, body.prompts, body.labels, strict=True)
        items = [_openrlhf_item(n, *triple) for n, triple in enumerate(triples)]
        evaluations = await asyncio.gather(*map(asyncio.wrap_future, runner.evaluate_all(items, REWARD_PROFILE)))
        scored = [reward(e) for e in evaluations]
        rewards = [s.score for s in scored]
        logs = {key: [float(getattr(s, key)) for s in scored] for key in ("compiled", "correct", "targets", "speed")}
        return {"rewards": rewards, "scores": rewards, "extra_logs": logs}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> str:
        return prometheus(runner)

    return app


def _where(loc: tuple) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or "(the body)"


def _message(item: dict[str, Any]) -> str:
    if item["type"] == "missing":
        return "required field is missing"
    if item["type"] == "extra_forbidden":
        return "unknown field"
    return item["msg"].removeprefix("Value error, ")


def _task_entry(task) -> dict[str, Any]:
    return {
        "name": task.name, "version": task.version, "archs": [str(a) for a in task.targets],
        "dims": task.dims, "inputs": [i.name for i in task.inputs], "outputs": [o.name for o in task.outputs],
        "baseline": task.baseline.library,
    }  # fmt: skip


def _openrlhf_item(number: int, query: str, prompt: str, label: str) -> EvaluateRequest:
    """The response the query holds after its prompt (which OpenRLHF may have cut from the front), for the
    problem its label names."""
    response = response_after(query, prompt)
    if response is None:
        raise BadRequest(f"query[{number}] holds no part of the end of prompts[{number}]: cannot tell the response "
                         "apart")  # fmt: skip
    try:
        named = jsontext.loads(label)  # the guards answer text gets: a label is text someone else wrote
        return EvaluateRequest(task=named["task"], arch=named["arch"], answer=response)
    except (ValueError, TypeError, KeyError) as e:
        if isinstance(e, ValidationError):
            detail = format_validation_error(e)
        else:
            detail = str(e) if isinstance(e, jsontext.JsonRefused) else f"{type(e).__name__}: {e}"
        raise BadRequest(f'labels[{number}] must be JSON {{"task": …, "arch": …}} ({detail})') from None


def prometheus(runner: Runner) -> str:
    """Prometheus text format: the queue depth, evaluations per arch and status, jobs per state."""
    static, gpu = runner.queue_depth()
    lines = [
        "# HELP ptxbench_queue_depth Attempts waiting, by where they wait.", "# TYPE ptxbench_queue_depth gauge",
        f'ptxbench_queue_depth{{stage="static"}} {static}', f'ptxbench_queue_depth{{stage="gpu"}} {gpu}',
        "# HELP ptxbench_evaluations_total Evaluations finished, by arch and status.",
        "# TYPE ptxbench_evaluations_total counter",
    ]  # fmt: skip
    for (arch, status), n in sorted(runner.counters.evaluations.items()):
        lines.append(f'ptxbench_evaluations_total{{arch="{arch}",status="{status}"}} {n}')
    states = [job.state().state for job in list(runner.jobs.values())]
    lines += ["# HELP ptxbench_jobs Jobs held, by state.", "# TYPE ptxbench_jobs gauge"]
    lines += [f'ptxbench_jobs{{state="{s}"}} {states.count(s)}' for s in ("running", "done")]
    return "\n".join(lines) + "\n"


class Gate:
    """ASGI middleware: with a token, every path but OPEN_PATHS needs `Authorization: Bearer TOKEN` (the scheme
    in any case, as HTTP has it); without one, the Host must be a loopback name (DNS rebinding)."""

    def __init__(self, app, token: str | None):
        self.app, self.token = app, token

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers") or []}
        if self.token is None:
            host = headers.get(b"host", b"").decode("latin-1")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name.lower() not in LOOPBACK_HOSTS:
                await _answer(send, 421, f"this service answers requests for {', '.join(sorted(LOOPBACK_HOSTS))} "
                                         "only (it has no token)")  # fmt: skip
                return
        elif scope["path"] not in OPEN_PATHS and not self._authorized(headers.get(b"authorization", b"")):
            await _answer(send, 401, "this service needs Authorization: Bearer <PTXBENCH_SERVE_TOKEN>",
                          [(b"www-authenticate", b"Bearer")])  # fmt: skip
            return
        await self.app(scope, receive, send)

    def _authorized(self, given: bytes) -> bool:
        scheme, _, credential = given.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(credential.strip(), self.token.encode())


async def _answer(send, status: int, message: str, headers: list[tuple[bytes, bytes]] = ()) -> None:
    """A JSON error answer straight from a middleware, before the app has seen the request."""
    body = json.dumps({"error": message}).encode()
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


class GuardedJsonRequest(Request):
    """A request whose JSON body is read with tools/jsontext.py's guards, off the event loop (tens of MB)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                text = (await self.body()).decode()
            except UnicodeDecodeError:
                raise HTTPException(400, "the body is not JSON (not UTF-8 text)") from None
            try:
                self._json = await run_in_threadpool(jsontext.parse, text, BODY_MAX_DIGITS)
            except jsontext.JsonRefused as e:  # FastAPI passes HTTP exceptions through; the rest is a vague 400
                raise HTTPException(422, f"the body is refused: {e}") from None
        return self._json


class GuardedJsonRoute(APIRoute):
    def get_route_handler(self):
        handler = super().get_route_handler()

        async def guarded(request: Request):
            return await handler(GuardedJsonRequest(request.scope, request.receive))

        return guarded


class BodyLimit:
    """ASGI middleware: a body over `limit` bytes is refused with 413 before anything reads it whole, and one
    that has not all arrived `timeout_s` after the request began with 408 (half-sent bodies held forever
    would hold their connections and the memory of what came)."""

    def __init__(self, app, limit: int, timeout_s: float):
        self.app, self.limit, self.timeout_s = app, limit, timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _answer(send, 413, self.message)
            return
        seen = 0
        deadline = asyncio.get_running_loop().time() + self.timeout_s

        async def counted():  # a body sent without its length (chunked): counted as it arrives
            nonlocal seen
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:  # FastAPI passes HTTP exceptions through
                raise StarletteHTTPException(408, f"the body did not arrive within {self.timeout_s:g} s") from None
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise StarletteHTTPException(413, self.message)
            return message

        await self.app(scope, counted, send)

    @property
    def message(self) -> str:
        return f"the body is over {self.limit >> 20} MB"
