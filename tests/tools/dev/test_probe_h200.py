"""The H200 probe's CPU parts: its arguments, its kernels (assembled by the real ptxas, read by the real nvdisasm),
the ptxas codes each case is built to draw, the reference GEMM planned at a small M, the CUPTI structs' sizes,
the flashinfer-style reading of activity records, the table, and one whole run of the CPU-only probe."""

from __future__ import annotations

import ctypes
import json
from collections import Counter

import pytest

from tests.tools.gpu.cupti_headers import header_layout, mismatches
from tools.dev import probe_h200 as probe
from tools.toolchain import find_tool


def test_arguments_default_to_every_probe_in_order(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    args = probe.parse_args([])
    assert args.out == tmp_path and args.only == list(probe.PROBES) and args.budget_s == 300.0
    assert probe.parse_args(["--only", "hang_located, ptxas_codes"]).only == ["hang_located", "ptxas_codes"]


@pytest.mark.parametrize(
    "argv", [["--only", "ptxas_codes,nope"], ["--only", ","], ["--route", "sass_metrics"], ["--budget-s", "0"]]
)
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        probe.parse_args(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_hang_and_bank_kernels_assemble_with_line_info():
    hang = probe.sass_offsets(probe.assemble(probe.HANG_PTX, line_info=True))[probe.HANG_KERNEL]
    ops = Counter(op.split(".")[0] for op in hang.values())
    assert ops["UBLKCP"] == 1 and ops["SYNCS"] >= 2  # the 512-byte bulk copy, the mbarrier's arrive and wait
    bank = probe.sass_offsets(probe.assemble(probe.BANK_PTX, line_info=True))[probe.BANK_KERNEL]
    assert Counter(op.split(".")[0] for op in bank.values())["STS"] >= 2  # volatile: every store kept


@pytest.mark.parametrize("name", list(probe.PTXAS_CASES))
def test_each_ptxas_case_draws_its_codes(name, tmp_path):
    case = probe.ptxas_case(str(find_tool("ptxas").path), name, tmp_path)
    assert case["rc"] == 0, case["lines"]
    assert case["codes"] == sorted(case["expected"]), case["lines"]
    if name == "wgmma_register_cap":
        assert case["spills"][0][1] > 0  # the register cap spills


def test_reference_gemm_is_planned_at_the_m_asked(tmp_path):
    facts = probe.write_gemm_bundle(tmp_path, 256)
    assert facts["grid"] == [56, 1, 1]  # min(132, cdiv(256,128) * cdiv(7168,256))
    assert facts["static_HGMMA"] > 0 and facts["static_UTMALDG"] > 0
    offsets = json.loads((tmp_path / "sass_offsets.json").read_text())[probe.GEMM_KERNEL]
    assert sum(op.startswith("HGMMA") for op in offsets.values()) == facts["static_HGMMA"]
    assert (tmp_path / "kernel.cubin").is_file() and json.loads((tmp_path / "plan.json").read_text())["buffers"]


def test_cupti_struct_sizes_follow_the_headers_macros():
    assert probe.SassFlushData.STRUCT_SIZE == 40 < ctypes.sizeof(probe.SassFlushData)  # ends at numOfInstances
    assert probe.SassGetProperties.STRUCT_SIZE == 56  # the chip and metric names, then MetricDetails (24 bytes)


def test_the_sass_metrics_structs_follow_the_cuda_13_headers():
    structs = [probe.MetricDetails, probe.SassConfig, probe.InstanceValue, probe.SassData, probe.SassGetNumOfMetrics,
               probe.SassGetMetrics, probe.SassGetProperties, probe.SassSetConfig, probe.SassUnsetConfig,
               probe.SassEnable, probe.SassDisable, probe.SassGetDataProperties, probe.SassFlushData]  # fmt: skip
    layout = header_layout(structs)
    if layout is None:
        pytest.skip("CUPTI's headers or a C++ compiler are not here")
    assert mismatches(structs, layout) == []


def test_iteration_spans_read_kernels_by_the_launches_in_each_window():
    launch, kernel = 1, 2
    launches = [(launch, "", 100, 110, 7), (launch, "", 150, 160, 8), (launch, "", 300, 310, 9)]
    kernels = [(kernel, "k", 1000, 3000, 7), (kernel, "k", 3500, 4500, 8), (kernel, "flush", 5000, 9000, 9)]
    spans = probe.iteration_spans([(90, 200), (250, 260)], launches, kernels)
    assert spans[0] == {"kernels": 2, "sum_ms": 0.003, "span_ms": 0.0035}
    assert spans[1] == {"kernels": 0, "sum_ms": None, "span_ms": None}


def test_a_failing_step_is_recorded_and_the_next_runs(tmp_path):
    rec = probe.Record(tmp_path, "demo", "a question")
    with rec.step("first") as s:
        s["value"] = 1
        raise probe.ProbeError("no GPU here")
    with rec.step("second") as s:
        s["value"] = 2
    rec.finish("half")
    data = json.loads((tmp_path / "demo.json").read_text())
    assert data["status"] == "partial" and data["answer"] == "half"
    assert data["steps"]["first"] == {"ok": False, "value": 1, "error": "ProbeError: no GPU here",
                                      "seconds": data["steps"]["first"]["seconds"]}  # fmt: skip
    assert data["steps"]["second"]["ok"] and data["steps"]["second"]["value"] == 2


def test_later_probes_keep_their_share_of_the_budget():
    assert probe.probe_limit("ptxas_codes", 300, later=5) == 60
    assert probe.probe_limit("cupti_counts", 150, later=4) == 150 - probe.FINISH_S - 80
    assert probe.probe_limit("hang_located", 10, later=0) == 0


def test_summary_table_cuts_long_answers():
    results = {
        "ptxas_codes": {"status": "ok", "answer": "C7509 " * 60, "child": {"seconds": 4.2}},
        "hang_located": {"status": "timeout", "answer": "stopped in step 'attach'", "child": {"seconds": 100.0}},
        "fp8_baselines": {"status": "skipped", "answer": "no time left in the budget"},
    }
    lines = probe.summary_table(results, width=100).splitlines()
    assert lines[0].split() == ["probe", "status", "seconds", "answer"]
    assert lines[1].split()[:3] == ["ptxas_codes", "ok", "4.2"] and lines[1].endswith("…") and len(lines[1]) <= 100
    assert lines[2].split()[:3] == ["hang_located", "timeout", "100.0"]
    assert lines[3].split()[:3] == ["fp8_baselines", "skipped", "-"]


def test_a_whole_run_of_the_cpu_probe(tmp_path, capsys):
    assert probe.main(["--out", str(tmp_path), "--only", "ptxas_codes", "--budget-s", "120"]) == 0
    result = json.loads((tmp_path / "ptxas_codes.json").read_text())
    assert result["status"] == "ok", result
    assert result["child"]["rc"] == 0 and "C7514" in result["answer"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["probes"]["ptxas_codes"]["status"] == "ok" and "runtime" in summary["machine"]
    assert len(list(tmp_path.iterdir())) <= 8  # what comes back from the GPU machine
    assert "ptxas_codes" in capsys.readouterr().out.splitlines()[-3]
