"""The throughput benchmark's CPU part: its mix (the core five's reference answers and every recorded attempt of the
fixture runs), its arguments, and one whole static-only run through the service's queue with the real ptxas and
nvdisasm, writing its table and JSON."""

from __future__ import annotations

import json

import pytest

from tasks.catalog import CORE
from tools.dev import bench_throughput as bench


def test_the_mix_holds_the_references_and_every_recorded_attempt() -> None:
    items, left_out = bench.mix()
    sources = [source for source, _, _ in items]
    assert sources[:5] == [f"reference {name}" for name in CORE]
    recorded = sum(1 for p in bench.FIXTURE_RUNS.glob("**/trajectory.jsonl") for _ in p.read_text().splitlines())
    assert len(items) - 5 + len(left_out) == recorded  # every turn of the fixtures is sm_90a with a response
    assert all(text for _, _, text in items)


@pytest.mark.parametrize("argv", [["--modes", "fast"], ["--backends", "cloud"], ["--repeat", "0"], ["--modes", ","]])
def test_bad_arguments_are_refused(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(argv)
    assert exit_.value.code == 2 and "error:" in capsys.readouterr().err


def test_a_static_only_run_writes_its_table(tmp_path, capsys) -> None:
    assert bench.main(["--modes", "static", "--repeat", "1", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "bench_throughput.json").read_text())
    (r,) = results["rows"]
    assert (r["backend"], r["mode"], r["rounds"]) == ("static", "static", 1)
    assert r["evaluations"] == len(results["mix"]) and r["gpu_evaluations"] == 0 and r["per_hour"] > 0
    assert {"extract_error", "compile_error", "unverified"} <= set(r["statuses"])  # failing attempts included
    assert {"extract", "compile", "sass", "abi"} <= set(r["stages"]) and "run" not in r["stages"]
    table = (tmp_path / "bench_throughput.md").read_text()
    assert f"| static | static | {r['evaluations']} |" in table and table.strip() in capsys.readouterr().out
