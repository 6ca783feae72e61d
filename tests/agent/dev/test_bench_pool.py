"""The pool benchmark's verdicts, on made-up results: per task, whether the local and the Dask benches' speedup
intervals overlap, and the lines docs/performance.md takes its figures from (the measurement itself needs GPUs)."""

from __future__ import annotations

from agent.dev.bench_pool import agreement, table


def run(task: str, speedup: float | None, interval: list[float] | None, status: str = "passed") -> dict:
    return {"task": task, "status": status, "targets_met": status == "passed", "speedup": speedup, "interval": interval}


def bench(runs: list[dict], wall_s: float, gpus: int) -> dict:
    return {"code": 0, "runs": runs, "wall_s": wall_s, "gpus": gpus, "evaluations": len(runs),
            "per_hour": 3600 * len(runs) / wall_s, "per_hour_per_gpu": 3600 * len(runs) / wall_s / gpus}  # fmt: skip


def test_speedups_agree_when_the_intervals_overlap() -> None:
    local = bench([run("gemm", 1.00, [0.98, 1.02]), run("gemm", 1.01, [0.99, 1.03]), run("attn", 0.80, [0.79, 0.81]),
                   run("bwd", None, None, "mismatch")], 100, 1)  # fmt: skip
    dask = bench([run("gemm", 1.02, [1.01, 1.04]), run("attn", 0.85, [0.84, 0.86]), run("bwd", None, None)], 90, 1)
    verdicts = agreement(local, dask)
    assert verdicts["gemm"]["overlap"] is True and verdicts["gemm"]["ratio"] == 1.02 / 1.005
    assert verdicts["attn"]["overlap"] is False
    assert verdicts["bwd"] == {"overlap": None}


def test_the_table_says_what_each_part_found() -> None:
    one = bench([run("gemm", 1.0, [0.99, 1.01])] * 20, 400, 1)
    two = bench([run("gemm", 1.0, [0.99, 1.01])] * 19 + [run("gemm", None, None, "timeout")], 210, 2)
    results = {"overhead": {"local_s": [1.0, 1.1, 1.2], "dask_s": [1.15, 1.2, 1.3], "overhead_s": 0.1},
               "local": {"error": "RuntimeError: no GPU"}, "dask1": one, "dask2": two}  # fmt: skip
    assert table(results).splitlines() == [
        "overhead per evaluation: +0.100 s (ok); median local 1.100 s, dask 1.200 s",
        "local: RuntimeError: no GPU",
        "dask1: exit 0, 20/20 correct with targets executed, 400 s, 180 evaluations/h on 1 GPU(s) (180/h per GPU)",
        "dask2: exit 0, 19/20 correct with targets executed, 210 s, 343 evaluations/h on 2 GPU(s) (171/h per GPU)",
        "throughput 2 GPUs / 1 GPU: 1.90× (ok)",
    ]
