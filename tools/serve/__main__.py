"""`python -m tools.serve [--host 127.0.0.1] [--port 8000] [--pool local|dask://HOST:PORT]`: the harness as an
HTTP service (tools/serve/app.py lists the routes). It binds to 127.0.0.1 unless told otherwise; a bind that
other machines can reach needs a token in PTXBENCH_SERVE_TOKEN, which every request must then carry as
`Authorization: Bearer TOKEN`, and without which the command refuses to start. Exit 0 when stopped (Ctrl-C),
2 on bad usage."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys

from tools.extras import needs
from tools.options import MAX_WAIT_S
from tools.pool import open_pool
from tools.pool.base import LOCAL
from tools.serve.runner import DEFAULT_MAX_JOBS, DEFAULT_MAX_QUEUED, MAX_JOBS, Runner

with needs("serve", "python -m tools.serve"):  # the service's own dependencies; the harness runs without them
    import uvicorn

    from tools.serve.app import BODY_TIMEOUT_S, create_app

TOKEN_ENV = "PTXBENCH_SERVE_TOKEN"
MIN_TOKEN_CHARS = 16
MAX_THREADS = 1024  # --static-workers, --gpu-concurrency: threads of this process
MAX_QUEUED = 1 << 20  # attempts: each holds its request (up to an 8 MB answer) while it waits
DEFAULT_MAX_CONNECTIONS = 256
MAX_CONNECTIONS = 1 << 16
MIN_TOKEN_DISTINCT = 8  # "aaaa…" or "passwordpassword" are long and guessable


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.serve", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--pool", default=LOCAL, help="local (this machine's GPUs) or dask://HOST:PORT")
    parser.add_argument("--static-workers", type=int, default=min(4, os.cpu_count() or 1),
                        help="threads for the static stages (compile, SASS, ABI)")  # fmt: skip
    parser.add_argument("--gpu-concurrency", type=int, default=16,
                        help="attempts handed to the pool at once (it queues them per GPU)")  # fmt: skip
    parser.add_argument("--max-queued", type=int, default=DEFAULT_MAX_QUEUED,
                        help=f"attempts in flight at once; past it: 429 (default {DEFAULT_MAX_QUEUED})")  # fmt: skip
    parser.add_argument("--max-jobs", type=int, default=DEFAULT_MAX_JOBS,
                        help=f"jobs running at once; past it: 429 (default {DEFAULT_MAX_JOBS})")  # fmt: skip
    parser.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS,
                        help=f"connections at once; past it: 503 (default {DEFAULT_MAX_CONNECTIONS})")  # fmt: skip
    parser.add_argument("--body-timeout-s", type=float, default=BODY_TIMEOUT_S,
                        help=f"seconds to send a whole body; then: 408 (default {BODY_TIMEOUT_S:g})")  # fmt: skip
    parser.add_argument("--no-gpu", action="store_true", help="static stages only (every attempt unverified)")
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_ENV) or None
    problem = _problem(args, token)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        pool = open_pool(args.pool, use_gpu=not args.no_gpu)
    except ValueError as e:
        print(f"error: --pool: {e}", file=sys.stderr)
        return 2
    runner = Runner(pool, args.static_workers, args.gpu_concurrency, args.max_queued, args.max_jobs)
    app = create_app(runner, token, pool.describe(), args.body_timeout_s)
    print(f"serving PTXBench on http://{args.host}:{args.port} (pool: {pool.describe()}; "
          f"{'bearer token required' if token else 'no token'})", file=sys.stderr, flush=True)  # fmt: skip
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", limit_concurrency=args.max_connections)
    finally:
        runner.close()
        pool.close()
    return 0


def _problem(args: argparse.Namespace, token: str | None) -> str | None:
    """Why the service must not start with these settings, or None."""
    if not 0 < args.port < 65536:
        return f"--port {args.port}: use 1–65535"
    bounded = (("--static-workers", args.static_workers, MAX_THREADS),
               ("--gpu-concurrency", args.gpu_concurrency, MAX_THREADS),
               ("--max-queued", args.max_queued, MAX_QUEUED), ("--max-jobs", args.max_jobs, MAX_JOBS),
               ("--max-connections", args.max_connections, MAX_CONNECTIONS))  # fmt: skip
    for flag, value, most in bounded:
        if not 1 <= value <= most:
            return f"{flag} {value}: use 1–{most}"
    if not 0 < args.body_timeout_s <= MAX_WAIT_S:  # also refuses nan
        return f"--body-timeout-s {args.body_timeout_s}: use more than 0 and at most {MAX_WAIT_S:g}"
    return token_problem(args.host, token)


def token_problem(host: str, token: str | None) -> str | None:
    """The token rule of every server we bind (this service, the MCP server's HTTP form): a token must be long,
    printable and not guessable; a bind other machines can reach needs one."""
    if token is not None and (problem := _weak(token)):
        return f"{TOKEN_ENV} {problem}: use a long random one (python -c 'import secrets; print(secrets.token_hex())')"
    if token is None and not loopback(host):
        return (f"--host {host} can be reached from other machines: set {TOKEN_ENV} to a long random token "
                "(every request then needs Authorization: Bearer TOKEN), or bind to 127.0.0.1")  # fmt: skip
    return None


def _weak(token: str) -> str | None:
    """Why `token` cannot guard the service, without showing any of it; None when it can."""
    if len(token) < MIN_TOKEN_CHARS:
        return f"is shorter than {MIN_TOKEN_CHARS} characters"
    if not (token.isascii() and token.isprintable()) or any(c.isspace() for c in token):
        return "holds spaces or characters that are not printable ASCII (a header could not carry it)"
    if len(set(token)) < MIN_TOKEN_DISTINCT:
        return f"has fewer than {MIN_TOKEN_DISTINCT} different characters"
    return None


if __name__ == "__main__":
    sys.exit(main())
