"""`python -m tools.gpu.dask_scheduler [dask scheduler options]`: Dask's own scheduler (`dask scheduler`, with every
option it has: --host, --port, --tls-ca-file/--tls-cert/--tls-key …), set as the evaluation pool relies on:

- no allowed failures: a request whose worker died fails at once (KilledWorker) instead of running again on another
  worker, since the request may be what killed it; the caller's run resumes that attempt later;
- a worker TTL of 60 s: a host that vanishes without closing its connections (power, network) counts as lost after
  a minute instead of Dask's five.

The same with a plain `dask scheduler`: DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0
DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL=60s dask scheduler."""

from __future__ import annotations

from tools.extras import needs

with needs("dask", "python -m tools.gpu.dask_scheduler"):
    import dask
    from distributed.cli import dask_scheduler

SETTINGS = {"distributed.scheduler.allowed-failures": 0, "distributed.scheduler.worker-ttl": "60s"}


def main(argv: list[str] | None = None) -> None:
    dask.config.set(SETTINGS)
    dask_scheduler.main(args=argv, prog_name="python -m tools.gpu.dask_scheduler")


if __name__ == "__main__":
    main()
