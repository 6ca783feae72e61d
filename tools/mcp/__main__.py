"""`python -m tools.mcp [--transport stdio|http] [--host 127.0.0.1] [--port 8765] [--pool local|dask://HOST:PORT]
[--no-gpu]`: the harness as an MCP server (tools/mcp/server.py lists its tools). stdio for a client that starts
it as a subprocess (the usual registration); streamable HTTP at http://HOST:PORT/mcp for one that connects.
The HTTP form binds to 127.0.0.1 unless told otherwise, and a bind other machines can reach needs
PTXBENCH_SERVE_TOKEN, which every request must then carry as `Authorization: Bearer TOKEN` — the HTTP
service's rule. Exit 0 when stopped, 2 on bad usage."""

from __future__ import annotations

import argparse
import hmac
import os
import sys

from tools.extras import needs
from tools.pool import open_pool
from tools.pool.base import LOCAL
from tools.serve.__main__ import TOKEN_ENV, token_problem


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.mcp", description=__doc__)
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind for --transport http")
    parser.add_argument("--port", type=int, default=8765, help="port for --transport http")
    parser.add_argument("--pool", default=LOCAL, help="local (this machine's GPUs) or dask://HOST:PORT")
    parser.add_argument("--no-gpu", action="store_true", help="static stages only (every verdict unverified)")
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_ENV) or None
    if problem := _problem(args, token):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    with needs("mcp", "python -m tools.mcp"):  # the SDK is the `mcp` extra; the harness runs without it
        from tools.mcp.server import build_server

    try:
        pool = open_pool(args.pool, use_gpu=not args.no_gpu)
    except ValueError as e:
        print(f"error: --pool: {e}", file=sys.stderr)
        return 2
    server = build_server(pool)
    try:
        if args.transport == "stdio":
            server.run("stdio")  # stdout is the protocol's: nothing else may be printed there
        else:
            _serve_http(server, args.host, args.port, token, pool.describe())
    except KeyboardInterrupt:
        pass
    finally:
        pool.close()
    return 0


def _serve_http(server, host: str, port: int, token: str | None, pool: str) -> None:
    import uvicorn
    from starlette.responses import JSONResponse

    app = server.streamable_http_app(host=host)
    if token:
        inner = app

        async def app(scope, receive, send):  # every request carries the token, or is refused before the SDK
            if scope["type"] == "http":
                sent = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
                scheme, _, given = sent.partition(" ")
                if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
                    await JSONResponse({"error": "missing or wrong bearer token"}, status_code=401)(
                        scope, receive, send
                    )
                    return
            await inner(scope, receive, send)

    print(f"serving PTXBench over MCP on http://{host}:{port}/mcp (pool: {pool}; "
          f"{'bearer token required' if token else 'no token'})", file=sys.stderr, flush=True)  # fmt: skip
    uvicorn.run(app, host=host, port=port, log_level="warning")


def _problem(args: argparse.Namespace, token: str | None) -> str | None:
    if args.transport == "stdio":
        return None  # a pipe to the client that started it: nothing to bind
    if not 0 < args.port < 65536:
        return f"--port {args.port}: use 1–65535"
    return token_problem(args.host, token)


if __name__ == "__main__":
    sys.exit(main())
