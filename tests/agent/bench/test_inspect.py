"""`python -m agent.inspect` on fixture runs (wave 1's folders and today's, a real three-turn scripted run with
real ptxas), hostile model output, broken run folders, a 20,000-line answer, a bench of 1,000 runs, and the
server; pages are read back with the standard library's HTML parser. tests/agent/bench/test_inspect_browser.py
opens them in a real browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agent.bench.inspect import highlight
from agent.bench.inspect.diff import line_diff
from agent.bench.inspect.site import build_site
from agent.inspect import main
from agent.loop.store import RunFolder
from tests.agent.helpers import FIXTURES, solve
from tests.fixtures.runs import make_runs
from tools.gpu.perf import comparison_rows
from tools.solution import LaunchSpec, Solution

RUNS = Path(make_runs.__file__).parent
REPO = RUNS.parents[2]
HOSTILE = "<script>alert(1)</script> & `rm -rf` </template></pre> ]]> <!-- x"


class Page(HTMLParser):
    """A page as the browser's parser sees it: elements with their attributes, the live text (outside
    <template>, i.e. what is in the DOM before anything is opened) and every text."""

    def __init__(self, path: Path):
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.live: list[str] = []
        self.all: list[str] = []
        self.scripts = 0
        self._templates = 0
        self.feed(path.read_text())

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))
        self.scripts += tag == "script"
        self._templates += tag == "template"

    def handle_endtag(self, tag: str) -> None:
        self._templates -= tag == "template"

    def handle_data(self, data: str) -> None:
        self.all.append(data)
        if not self._templates:
            self.live.append(data)

    def text(self, live: bool = False) -> str:
        return "".join(self.live if live else self.all)

    def having(self, **attrs: str) -> list[dict[str, str]]:
        return [a for _, a in self.elements if all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def classes(self, cls: str) -> list[dict[str, str]]:
        return [a for _, a in self.elements if cls in a.get("class", "").split()]


def table(path: Path, table_id: str) -> list[list[str]]:
    """The rows of a table of the page, each cell's text."""
    found = re.search(rf'<table id="{table_id}">(.*?)</table>', path.read_text(), re.S)
    assert found, table_id
    rows = re.findall(r"<tr\b[^>]*>(.*?)</tr>", found.group(1), re.S)
    cells = [re.findall(r"<t[dh]\b[^>]*>(.*?)</t[dh]>", row, re.S) for row in rows]
    return [[unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in row] for row in cells]


def site(path: Path, out: Path, *args: str) -> Path:
    assert main([str(path), f"out={out}", *args]) == 0
    return out


@pytest.fixture(scope="module")
def bench_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return site(RUNS / "bench", tmp_path_factory.mktemp("bench-site"))


@pytest.fixture(scope="module")
def three_turns(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of today's loop, three scripted answers through the real static stages (no GPU here)."""
    runs = tmp_path_factory.mktemp("three")
    code, folder = solve(["task=gemm", "arch=sm_90a", "llm=scripted", f"llm.path={FIXTURES / 'three_turns.json'}",
                          "max_turns=3", "unverified_turns=2", "eval.gpu=false", f"runs_dir={runs}",
                          "run_id=three"])  # fmt: skip
    assert code == 0
    return folder.path


# ------------------------------------------------------------------------------------------ bench page


def test_the_bench_page_has_the_grid_scores_and_plots(bench_site: Path) -> None:
    page = Page(bench_site / "index.html")
    chips = page.classes("chip")
    assert len(chips) == 12
    for chip in chips:
        assert (bench_site / chip["href"]).is_file()
    solved = {c["href"] for c in chips if "solved" in c["class"].split()}
    assert solved == {f"runs/bench/{make_runs.GEMM}-sm_90a-{m}.html" for m in ("multi-s00", "single-s00")}
    text = page.text()
    # gemm multi s00: CE RE P0.5T P1.5T, solved at turn 4 of 8; attn multi s01 was killed after turn 3
    m00 = next(c for c in chips if c["href"].endswith(f"{make_runs.GEMM}-sm_90a-multi-s00.html"))
    assert m00["data-f-model"] == "fixture-model" and m00["data-f-mode"] == "multi" and "st-passed" in m00["class"]
    assert re.search(r"1\.500×\s*4/8", text) and re.search(r"2\.000×\s*3/8", text)
    # the headline row at 8 turns of the repair runs, as test_report.py reads it from the report
    headline = table(bench_site / "index.html", "headline")
    assert headline[0][:5] == ["model", "arch", "mode", "turns ≤", "runs"] and len(headline) == 1 + 4
    assert ["fixture-model", "sm_90a", "multi", "8", "4", "75%", "50%", "75%", "75%", "75%", "50%", "12%", "1.016×",
            "1.392×", "2.000×", "1"] in headline  # fmt: skip
    assert {a.get("id") for _, a in page.elements} >= {"grid", "headline", "per-task", "budget", "runs", "plots"}
    filters = {a["data-filter"] for a in page.having() if "data-filter" in a}
    assert filters == {"model", "task", "arch", "mode"}  # no run records a prompt variant


def test_the_plots_are_inline_svg_without_links(bench_site: Path) -> None:
    pytest.importorskip("matplotlib")
    html = (bench_site / "index.html").read_text()
    figures = re.findall(r'<figure id="plot-(\w+)"><svg\b(.*?)</svg>', html, re.S)
    assert [name for name, _ in figures] == ["success_vs_budget", "speedup_by_task", "status_per_turn"]
    ids = [set(re.findall(r'<clipPath id="([^"]+)"', svg)) for _, svg in figures]
    assert all(ids) and len(set().union(*ids)) == sum(map(len, ids))  # one salt per plot: no id shared
    assert "http" not in "".join(svg for _, svg in figures)


def test_without_matplotlib_the_page_says_plots_were_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    page = Page(site(RUNS / "bench", tmp_path) / "index.html")
    assert "Plots skipped: matplotlib is not installed (pip install 'ptxbench[report]')." in page.text()
    assert not [tag for tag, _ in page.elements if tag == "svg"] and len(page.classes("chip")) == 12


def test_a_folder_of_benches_and_runs_lists_each_and_wave_1_folders_render(tmp_path: Path) -> None:
    out = site(RUNS, tmp_path)
    index = Page(out / "index.html")
    links = [a["href"] for tag, a in index.elements if tag == "a"]
    assert links == ["benches/bench.html", "benches/replay.html", "benches/wave1.html"]
    wave1 = Page(out / "benches" / "wave1.html")
    hrefs = sorted(c["href"] for c in wave1.classes("chip"))
    assert hrefs == ["../runs/wave1/gemm-replay.html", f"../runs/wave1/{make_runs.GEMM}-sm_90a-multi-s00.html",
                     "../runs/wave1/mha_fwd_d128-sm_90a-multi-s00.html"]  # fmt: skip
    run = Page(out / "runs" / "wave1" / "gemm-replay.html")
    assert [a["id"] for a in run.classes("turn")] == [f"turn-{i}" for i in range(1, 6)]
    assert "fixture feedback on turn 2: passed" in run.text() and "mad.lo.s32" in run.text()
    assert next(a["href"] for tag, a in run.elements if tag == "a") == "../../benches/wave1.html"


# -------------------------------------------------------------------------------------------- run page


def test_a_run_folder_is_its_own_site_with_diffs_between_turns(tmp_path: Path) -> None:
    page = Page(site(RUNS / "replay" / "gemm-replay", tmp_path) / "index.html")
    text = page.text()
    # turn 1: the typo; turn 2 fixes it (one line each way); turn 4's source is turn 2's; turn 3 had none
    diffs = {a["data-against"]: a for tag, a in page.elements if tag == "template" and "data-against" in a}
    assert set(diffs) == {"1", "2", "4"}
    assert "-    mda.lo.s32 %r4, %r2, 256, %r3;" in text and "+    mad.lo.s32 %r4, %r2, 256, %r3;" in text
    assert "Same source as turn 2." in text and "No source was extracted from this answer." in text
    assert re.search(r"turn 1 \(previous\): \+1 −1 lines", text)
    bars = re.findall(r'<a href="#turn-(\d)"><g class="st-(\w+)">', (tmp_path / "index.html").read_text())
    assert bars == [("1", "compile"), ("2", "passed"), ("3", "format"), ("4", "passed"), ("5", "mismatch")]
    assert "1.070×" in text and "0.500×" in text  # turn speedups, three decimals


def test_a_three_turn_run_of_todays_loop(three_turns: Path, tmp_path: Path) -> None:
    page = Page(site(three_turns, tmp_path) / "index.html")
    text = page.text()
    sections = page.classes("turn")
    assert [a["id"] for a in sections] == ["turn-1", "turn-2", "turn-3"]
    turns = RunFolder(three_turns).turns()
    for turn in turns:  # the feedback exactly as the model saw it: the next turn's last message
        assert turn.feedback is not None and turn.feedback in text
    assert turns[1].messages[-1].content == turns[0].feedback
    assert "Not a name of any known instruction: &#39;mda&#39;" in (tmp_path / "index.html").read_text()
    # registers from ptxas, the static opcode mix from nvdisasm, the launch spec, the reasoning (folded)
    row = re.search(r"<td>fill_kernel</td>\s*<td class=\"num\">(\d+)</td>", (tmp_path / "index.html").read_text())
    assert row and int(row.group(1)) > 0
    assert "static, from the SASS (the profile did not run)" in text and "cdiv(M*N,512)" in text
    assert "halve the thread count" in text and "+    st.global.b32 [%rd3], %r6;" in text
    for stage in ("extract", "compile", "sass", "abi", "run", "check", "time", "profile"):
        assert re.search(rf"{stage} \d+\.\d\d s", text)


def hostile_run(runs_dir: Path, run_id: str = "hostile") -> Path:
    source = f".version 8.0\n// {HOSTILE}\n.target sm_90a\n"
    solution = Solution(language="ptx", source=source, launch=LaunchSpec.model_validate(
        {"launches": [{"kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1]}]}))  # fmt: skip
    response = f"{HOSTILE}\n```ptx\n{source}```\n```json\n{{}}\n```"
    turn = make_runs.turn(1, make_runs.evaluation(make_runs.GEMM, "CE", solution), response, solution)
    turn = turn.model_copy(update={"feedback": f"feedback {HOSTILE}", "reasoning": f"thinking {HOSTILE}"})
    make_runs.write_run(runs_dir, run_id, make_runs.GEMM, 8, [turn], None, model='"><script>alert(2)</script>')
    return runs_dir / run_id


def test_hostile_model_output_is_shown_as_text(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    folder = hostile_run(runs)
    weird = folder.rename(runs / 'a<b>&c"d')  # a folder name no run id allows, as someone may copy one
    out = site(runs, tmp_path / "site")
    for path in (out / "index.html", out / "runs" / "runs" / f"{weird.name}.html"):
        page = Page(path)
        assert page.scripts == 1  # ours
        assert HOSTILE in page.text() or '"><script>alert(2)</script>' in page.text()
    html = (out / "runs" / "runs" / f"{weird.name}.html").read_text()
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    chip = Page(out / "index.html").classes("chip")[0]
    assert chip["href"] == "runs/runs/a%3Cb%3E%26c%22d.html" and chip["data-f-model"] == '"><script>alert(2)</script>'


def test_no_page_refers_to_anything_outside_the_site(tmp_path: Path, three_turns: Path) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(RUNS, runs)
    shutil.copytree(three_turns, runs / "three" / three_turns.name)
    hostile_run(runs / "hostile")
    out = site(runs, tmp_path / "site")
    pages = sorted(out.rglob("*.html"))
    assert len(pages) == 1 + 5 + 18  # index, five folders, eighteen runs
    for path in pages:
        html = path.read_text()
        page = Page(path)
        refs = [v for _, a in page.elements for k, v in a.items() if k in ("href", "src", "xlink:href", "action")]
        assert all(not re.match(r"^([a-z][\w+.-]*:|//)", ref, re.I) for ref in refs), (path, refs)
        for ref in (r for r in refs if not r.startswith("#")):
            assert (path.parent / ref.split("#")[0]).resolve().is_file(), (path, ref)
        assert not re.search(r"<link\b|<script\s+src|@import|@font-face|url\((?!#)", html), path
        assert page.scripts == 1


# ----------------------------------------------------------------------------------- awkward run folders


def test_unreadable_parts_are_shown_and_nothing_else_is_lost(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(RUNS / "bench", runs)
    broken_config = runs / f"{make_runs.ATTN}-sm_90a-single-s00" / "config.json"
    broken_config.write_text('{"task": "x"}')  # no arch
    lines_run = runs / f"{make_runs.GEMM}-sm_90a-multi-s00"
    lines = (lines_run / "trajectory.jsonl").read_text().splitlines()
    (lines_run / "trajectory.jsonl").write_text("\n".join([lines[0], '{"index": "two"}', *lines[2:]]) + "\n")
    (runs / f"{make_runs.GEMM}-sm_90a-single-s01" / "summary.json").write_text("{not json")
    out = site(runs, tmp_path / "site")
    err = capsys.readouterr().err
    assert f"warning: not shown: {broken_config.parent}: config.json does not hold a RunConfig (arch: required" in err
    index = Page(out / "index.html")
    assert len(index.classes("chip")) == 11 and "arch: required field is missing" in index.text()
    run = Page(out / "runs" / "runs" / f"{lines_run.name}.html")
    assert [a["id"] for a in run.classes("turn")] == ["turn-1", "turn-3", "turn-4"]
    assert re.search(r"trajectory\.jsonl, line 2: not a turn \(index: Input should be a valid integer", run.text())
    derived = Page(out / "runs" / "runs" / f"{make_runs.GEMM}-sm_90a-single-s01.html").text()
    assert "summary.json does not hold a RunSummary ((top level): Invalid JSON" in derived
    assert "(the summary shown is derived from the turns)" in derived


def test_stage_details_of_another_shape_and_later_profile_fields_are_shown(tmp_path: Path) -> None:
    ev = make_runs.evaluation(make_runs.GEMM, "P1.2T")
    stages = [
        s.model_copy(update={"detail": {"kernels": "not a list"}}) if s.name == "compile" else s for s in ev.stages
    ]
    profile = {"opcode_mix": [["HGMMA", 10, 50.0], ["IMAD", 10, 50.0]], "stall_reasons": {"long_scoreboard": 0.31}}
    stages = [s.model_copy(update={"detail": profile}) if s.name == "profile" else s for s in stages]
    turn = make_runs.turn(1, ev.model_copy(update={"stages": stages}), "answer")
    make_runs.write_run(tmp_path / "runs", "odd", make_runs.GEMM, 1, [turn], "solved")
    page = Page(site(tmp_path / "runs" / "odd", tmp_path / "site") / "index.html")
    text = page.text()
    assert "more from the profile" in text and "long_scoreboard" in text  # shown though this page does not know it
    assert "executed, warp-level (Nsight Compute)" in text and "HGMMA" in text
    assert '"not a list"' in text  # the compile detail, as recorded


def test_a_perf_report_is_laid_out_as_the_model_read_it(tmp_path: Path) -> None:
    ev = make_runs.profiled(make_runs.GEMM, 0.04)
    make_runs.write_run(tmp_path / "runs", "slow", make_runs.GEMM, 1, [make_runs.turn(1, ev, "answer")], "max_turns")
    page = Page(site(tmp_path / "runs" / "slow", tmp_path / "site") / "index.html")
    text = page.text()
    ours, library = ev.perf.launches[0], ev.perf.baseline[0]
    assert "Where the time goes" in text and "yours: `gemm_pointers`" in text and library.kernel in text
    tensor = next(r for r in comparison_rows(ev.perf)[1] if r[0].startswith("tensor pipe"))
    expected = [f"{k.tensor_pipe_pct:.0f}" for k in (ours, library)]
    assert tensor[1:] == expected and all(cell in page.all for cell in expected)  # cells of their own
    assert f"likely limiter (memory_stalled): {ev.perf.limiter_says}" in text
    assert len(page.classes("perf-note")) == 1


def test_prompt_variants_filter_and_score_apart(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(RUNS / "bench", runs)
    for i, folder in enumerate(sorted(runs.iterdir())):
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(config | {"prompt": ("base", "patterns")[i % 2]}))
    page = Page(site(runs, tmp_path / "site") / "index.html")
    prompt = [a for a in page.having() if a.get("data-filter") == "prompt"]
    assert len(prompt) == 1
    headline = [a for tag, a in page.elements if tag == "tr" and "data-f-prompt" in a and "data-f-task" in a]
    assert {a["data-f-prompt"] for a in headline} == {"all", "base", "patterns"}
    assert {c["data-f-prompt"] for c in page.classes("chip")} == {"base", "patterns"}


def test_a_20000_line_answer_is_folded_and_parsed_only_when_opened(tmp_path: Path) -> None:
    body = "\n".join(f"    add.u32 %r{i % 7}, %r{i % 5}, {i};" for i in range(20_000))
    source = f".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{{\n{body}\n    ret;\n}}\n"
    solution = Solution(language="ptx", source=source, launch=LaunchSpec.model_validate(
        {"launches": [{"kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1]}]}))  # fmt: skip
    turns = [make_runs.turn(i, make_runs.evaluation(make_runs.GEMM, "UV", solution), f"```ptx\n{source}```", solution)
             for i in (1, 2)]  # fmt: skip
    make_runs.write_run(tmp_path / "runs", "big", make_runs.GEMM, 8, turns, None)
    start = time.perf_counter()
    page = Page(site(tmp_path / "runs" / "big", tmp_path / "site") / "index.html")
    assert time.perf_counter() - start < 30
    assert "20,008 lines · folded, shown when opened" in page.text()
    assert (
        "add.u32" not in page.text(live=True) and page.text().count("add.u32 %r0, %r4, 19999;") == 4
    )  # two sources, two answers
    assert len(page.text(live=True).splitlines()) < 500


@pytest.mark.slow
def test_a_bench_of_1000_runs_renders_in_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # writing the fixture: durability is not under test
    make_runs.write_many(tmp_path / "runs", 1000)
    built = build_site(tmp_path / "runs", tmp_path / "site")
    assert built.runs == 1000 and built.pages == 1001 and not built.unreadable
    # about 4 s to the index and 8 s in all on our 2-core machine; a bound far above that still catches a
    # page whose cost grows with the square of the runs
    assert built.index_seconds < 30 and built.seconds < 60, (built.index_seconds, built.seconds)
    index = (tmp_path / "site" / "index.html").read_text()
    assert index.count('<a class="chip') == 1000 and len(list((tmp_path / "site" / "runs").rglob("*.html"))) == 1000


# ------------------------------------------------------------------------------------------- the command


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "name one PATH"),
        (["a", "b"], "name one PATH"),
        (["/nonexistent"], "not a folder: /nonexistent"),
        ([str(RUNS / "bench"), "outt=x"], "unknown setting outt; did you mean out?"),
        ([str(RUNS / "bench"), "port=70000"], "port: Input should be less than or equal to 65535"),
    ],
)
def test_usage_errors(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_no_runs_and_an_out_that_cannot_be_written_are_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(tmp_path)]) == 2
    assert f"no run folders under {tmp_path}" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    for out in (tmp_path / "file", tmp_path / "file" / "site"):
        assert main([str(RUNS / "bench"), f"out={out}"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: cannot write the site to out={out}: ") and "Traceback" not in err


def test_a_port_in_use_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main([str(RUNS / "replay"), f"out={tmp_path}", "serve=true", f"port={port}"]) == 2
    assert f"error: cannot listen on 127.0.0.1:{port} (Address already in use); choose another port=N" in (
        capsys.readouterr().err
    )


def test_help_and_the_out_alias(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert all(key in text for key in ("out", "serve", "port", "usage: python -m agent.inspect PATH"))
    assert main([str(RUNS / "replay"), "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'index.html'}  (2 pages, 1 runs")


def test_serve_answers_on_localhost_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.inspect", str(RUNS / "replay"), f"out={tmp_path}", "serve=true", "port=0"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # where the site is
        served = re.search(r"at (http://127\.0\.0\.1:\d+/)", proc.stdout.readline())
        assert served, proc.stderr.read() if proc.poll() is not None else "no address printed"
        with urllib.request.urlopen(served.group(1) + "index.html", timeout=10) as reply:
            assert reply.read() == (tmp_path / "index.html").read_bytes()
        with urllib.request.urlopen(served.group(1) + "runs/replay/gemm-replay.html", timeout=10) as reply:
            assert b"Turn 5" in reply.read()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0


# ------------------------------------------------------------------------------------- colouring, diffs


def test_ptx_colouring_marks_opcodes_registers_directives_and_labels() -> None:
    html = highlight.highlight("@%p bra DONE;\nDONE:\n  .reg .b32 %r<4>; // done\n  mov.u32 %r1, 0f3F800000;", "ptx")
    spans = re.findall(r'<span class="tok-(\w)">([^<]*)</span>', html)
    assert spans == [("r", "@%p"), ("o", "bra"), ("l", "DONE:"), ("d", ".reg"), ("t", ".b32"), ("r", "%r"),
                     ("n", "4"), ("c", "// done"), ("o", "mov.u32"), ("r", "%r1"), ("n", "0f3F800000")]  # fmt: skip


def test_cuda_and_json_colouring() -> None:
    cuda = highlight.highlight(
        '#include <cuda_bf16.h>\n__global__ void k() { asm volatile("mov.u32 %0, 1;"); }', "cuda"
    )
    assert re.findall(r'<span class="tok-(\w)">', cuda) == ["p", "k", "t", "k", "k", "s"]
    js = highlight.highlight('{"box": [128, 64], "swizzle": "128B", "ok": true}', "json")
    assert re.findall(r'<span class="tok-(\w)">([^<]*)</span>', js) == [
        ("y", "&quot;box&quot;"), ("n", "128"), ("n", "64"), ("y", "&quot;swizzle&quot;"), ("s", "&quot;128B&quot;"),
        ("y", "&quot;ok&quot;"), ("b", "true")]  # fmt: skip


@pytest.mark.parametrize("language", ["ptx", "cuda", "json", "markdown"])
def test_colouring_keeps_every_character(language: str) -> None:
    sources = [p.read_text() for p in (REPO / "tests" / "fixtures" / "answers").glob("*.md")]
    for text in [*sources, HOSTILE, '"unterminated\n/* open comment', "%%%@@@..."]:
        shown = re.sub(r"</?span[^>]*>", "", highlight.highlight(text, language))
        assert "<" not in shown and unescape(shown) == text


def test_line_diff_counts_the_changed_lines() -> None:
    d = line_diff("a\nb\nc\n", "a\nB\nc\nd\n", against=1, turn=2)
    assert (d.against, d.added, d.removed, d.same) == (1, 2, 1, False)
    assert re.findall(r'<span class="d-(\w+)">', d.text.html) == ["hunk", "same", "del", "add", "same", "add"]
    assert line_diff("x\n", "x", 1, 2).same


def tools_run(runs_dir: Path, run_id: str = "tools") -> Path:
    """A tools-mode run of today's loop: a malformed call, an unknown tool, then compile, evaluate and submit."""
    script = runs_dir.parent / f"{run_id}.json"
    ok = (FIXTURES / "fill_ok.md").read_text()
    script.write_text(json.dumps([
        {"text": "Let me try.", "tool_calls": [{"name": "evaluate", "arguments": "{oops"}, {"name": "shell"}]},
        {"tool_calls": [{"name": "compile", "arguments": {"answer": ok}}]},
        {"text": "Done.", "tool_calls": [{"name": "submit", "arguments": {"answer": ok}}]},
    ]))  # fmt: skip
    code, folder = solve(["task=gemm", "arch=sm_90a", "mode=tools", "eval.gpu=false", "llm=scripted",
                          f"llm.path={script}", f"runs_dir={runs_dir}", f"run_id={run_id}"])  # fmt: skip
    assert code == 0
    return folder.path


def test_a_tools_run_shows_its_steps(tmp_path: Path) -> None:
    folder = tools_run(tmp_path / "runs")
    page = Page(site(folder, tmp_path / "site") / "index.html")
    text = page.text()
    assert [a["id"] for a in page.classes("step")] == ["step-1", "step-2", "step-3"]
    assert [a["id"] for a in page.classes("refused")] == ["step-1-call-0", "step-1-call-1"]
    assert (
        "error: the arguments of evaluate are not JSON" in text
        and "error: there is no tool &#39;shell&#39;" in (tmp_path / "site" / "index.html").read_text()
    )
    assert "submitted at step 3" in text and "4 tool calls (2 refused)" in text
    assert "Submitted: the run ends with this answer." in text and "Let me try." in text
