"""`python -m agent.dev.bench_serve [--out DIR] [--answers 64] [RUN_DIR …]`: the service's throughput on a GPU
machine (a script, not a test; its figures go into docs/performance.md). Starts `python -m
tools.serve` on 127.0.0.1 with the local pool, posts N recorded answers (the responses in RUN_DIRs, default the
fixture runs, and the reference answers, taken in turn until there are N) as one job with rewards
(profile=if_correct), polls it to the end, and reports the wall time, evaluations per minute, the statuses and
the scores. JSON goes to DIR/bench_serve.json; a short table is printed last."""

from __future__ import annotations

import argparse
import itertools
import json
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

from agent.loop.records import RunConfig, Turn
from agent.loop.writes import write_inside
from tasks.catalog import TASKS
from tasks.schema import Arch
from tasks.solutions import reference_answer

REPO = Path(__file__).resolve().parents[2]
FIXTURE_RUNS = REPO / "tests" / "fixtures" / "runs"


def recorded_items(run_dirs: list[Path]) -> list[dict]:
    """Every sm_90a attempt the run folders below `run_dirs` hold, as the model wrote it (read with the run
    records' own models: the harness does not use agent/'s reader), and every sm_90a reference answer."""
    items = []
    for config_path in sorted(p for d in run_dirs for p in d.rglob("config.json")):
        config = RunConfig.model_validate_json(config_path.read_text())
        trajectory = config_path.with_name("trajectory.jsonl")
        if str(config.arch) != "sm_90a" or config.task not in TASKS or not trajectory.is_file():
            continue
        turns = [Turn.model_validate_json(line) for line in trajectory.read_text().splitlines() if line.strip()]
        items += [{"task": config.task, "arch": "sm_90a", "answer": t.response} for t in turns]
    for name in TASKS:
        text = reference_answer(name, Arch.SM_90A)
        if text:
            items.append({"task": name, "arch": "sm_90a", "answer": text})
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.dev.bench_serve", description=__doc__)
    parser.add_argument("runs", nargs="*", type=Path, default=[FIXTURE_RUNS])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--answers", type=int, default=64)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    items = list(itertools.islice(itertools.cycle(recorded_items(args.runs)), args.answers))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "tools.serve", "--port", str(port)], cwd=REPO)
    result: dict = {"answers": len(items)}
    try:
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
        for _ in range(600):
            try:
                if http.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        start = time.monotonic()
        job = http.post("/v1/jobs", json={"items": items, "reward": {}}).json()
        while job["state"] != "done":
            time.sleep(1)
            job = http.get(f"/v1/jobs/{job['id']}").json()
        wall = time.monotonic() - start
        scores = [r["reward"]["score"] if r.get("reward") else None for r in job["results"]]
        result |= {
            "wall_s": round(wall, 1),
            "evaluations_per_minute": round(60 * len(items) / wall, 1),
            "statuses": Counter(r["evaluation"]["status"] if r.get("evaluation") else "error" for r in job["results"]),
            "scores": scores,
            "all_rewarded": all(s is not None for s in scores),
            "metrics": http.get("/metrics").text,
        }
    finally:
        server.terminate()
        server.wait(timeout=30)
    write_inside(args.out / "bench_serve.json", json.dumps(result, indent=2))
    print("| answers | wall s | evaluations/min | statuses | all rewarded |")
    print("| ---: | ---: | ---: | --- | --- |")
    print(f"| {result['answers']} | {result.get('wall_s')} | {result.get('evaluations_per_minute')} | "
          f"{dict(result.get('statuses', {}))} | {result.get('all_rewarded')} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
