"""`python -m tools.compile`: exit 0 compiled, 1 did not compile (or the input is unusable), 2 bad usage;
--json is one object; bad input is one line on stderr, never a traceback.

The target reports and one case of each exit code run as a user runs them, in a subprocess (all at once:
they are independent). The other cases call the same `main` in-process, which saves an interpreter start
each."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.tools.files import ANSWERS, PTX, read_ptx
from tools.compile import main, render

ROOT = Path(__file__).parents[2]
BROKEN = read_ptx("wgmma").replace("wgmma.commit_group", "wgmma.comit_group")
BROKEN_LINE = next(i for i, text in enumerate(BROKEN.splitlines(), 1) if "wgmma.comit_group" in text)


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tools.compile", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("cli")
    hopper_answer = (ANSWERS / "hopper_gemm.md").read_text()
    files = {
        "garbage.ptx": b"\x00\xff\xfe\x81" * 256,
        "empty.ptx": b"",
        "zeros.ptx": b".version 8.0\n.target sm_90a\n\0\0\0\n",
        "unknown.txt": b"hello, world\n",
        "broken.ptx": BROKEN.encode(),
        "kernel.cu": (ANSWERS / "cuda_gemm_naive.md").read_text().split("```cuda\n")[1].split("```")[0].encode(),
        "no_block.md": b"I could not write the kernel.\n",
        "bad_grid.md": hopper_answer.replace('"cdiv(N,64)"', '"N-N"').encode(),
        "mismatch.md": hopper_answer.replace('"block": [\n        128,', '"block": [\n        256,').encode(),
    }
    paths = {"folder": tmp}
    for name, data in files.items():
        paths[Path(name).stem] = tmp / name
        paths[Path(name).stem].write_bytes(data)
    paths["huge"] = tmp / "huge.ptx"
    with paths["huge"].open("wb") as f:  # 50 MB, sparse
        f.truncate(50 << 20)
    return paths


@pytest.fixture(scope="module")
def runs(inputs) -> dict[str, subprocess.CompletedProcess]:
    commands = {
        "wgmma": (PTX / "hopper_wgmma_tma.ptx", "--arch", "sm_90a", "--json"),
        "tcgen05": (PTX / "blackwell_tcgen05.ptx", "--arch", "b200", "--json"),
        "triton_sm_90a": (PTX / "triton_gemm_sm_90a.ptx", "--arch", "h100", "--json"),
        "triton_sm_100a": (PTX / "triton_gemm_sm_100a.ptx", "--arch", "sm_100", "--json"),
        "broken": (inputs["broken"], "--arch", "sm_90a", "--json"),
        "garbage": (inputs["garbage"], "--arch", "sm_90a"),
        "unknown_arch": (PTX / "hopper_wgmma_tma.ptx", "--arch", "sm_80"),
        "no_arch": (PTX / "hopper_wgmma_tma.ptx",),
    }
    with ThreadPoolExecutor(4) as pool:
        futures = {name: pool.submit(cli, *args) for name, args in commands.items()}
    return {name: future.result() for name, future in futures.items()}


def in_process(capsys, *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def no_traceback(run: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert "Traceback" not in run.stderr, run.stderr
    return run


@pytest.mark.parametrize(
    ("run", "arch", "groups"),
    [
        ("wgmma", "sm_90a", {"wgmma", "tma"}),
        ("tcgen05", "sm_100a", {"tcgen05", "tmem", "tma"}),
        ("triton_sm_90a", "sm_90a", {"wgmma", "tma"}),
        ("triton_sm_100a", "sm_100a", {"tcgen05", "tmem", "tma"}),
    ],
)
def test_json_report_finds_the_targets(runs, run, arch, groups):
    result = no_traceback(runs[run])
    assert result.returncode == 0 and result.stderr == ""
    data = json.loads(result.stdout)
    assert data["ok"] is True and data["arch"] == arch and data["language"] == "ptx"
    assert data["diagnostics"] == []
    assert data["kernels"] and all(k["registers"] > 0 and k["sass"]["instructions"] > 0 for k in data["kernels"])
    assert set(data["targets"]) == groups
    for group in groups:
        assert data["targets"][group]["ptx"] is True and data["targets"][group]["sass"] is True, group


def test_compile_error_lands_on_its_line(runs):
    result = no_traceback(runs["broken"])
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["ok"] is False and data["kernels"] == []
    assert data["diagnostics"] and {d["line"] for d in data["diagnostics"]} == {BROKEN_LINE}
    assert data["diagnostics"][0]["source_line"] == "wgmma.comit_group.sync.aligned;"
    assert data["diagnostics"][0]["severity"] == "error"


def test_bad_input_and_bad_usage_exit_codes(runs):
    garbage, arch, usage = (no_traceback(runs[name]) for name in ("garbage", "unknown_arch", "no_arch"))
    assert (garbage.returncode, garbage.stdout) == (1, "")
    assert garbage.stderr.endswith("garbage.ptx is not UTF-8 text (byte 0xff at offset 1)\n")
    assert len(garbage.stderr.splitlines()) == 1
    assert (arch.returncode, arch.stdout) == (2, "")
    assert arch.stderr.startswith("error: unknown arch 'sm_80'; known: b200, blackwell, h100, h200, hopper, sm100")
    assert (usage.returncode, usage.stdout) == (2, "")
    assert "the following arguments are required: --arch" in usage.stderr


def test_text_report(runs):
    # The text form renders the same report the --json run printed.
    out = render(json.loads(runs["wgmma"].stdout))
    lines = out.splitlines()
    assert lines[0].startswith(f"{PTX / 'hopper_wgmma_tma.ptx'} (ptx) → sm_90a: compiled in ")
    assert "  gemm_wgmma_tma: " in out and " registers, 4104 B static shared" in out
    assert "  wgmma    PTX yes  SASS yes  (HGMMA.64x64x16.F32.BF16 ×1)" in lines
    assert "  tma      PTX yes  SASS yes  (UTMALDG.2D ×4)" in lines


def test_text_report_of_an_error(capsys, inputs):
    code, out, _ = in_process(capsys, inputs["broken"], "--arch", "sm_90a")
    assert code == 1
    assert "did NOT compile" in out.splitlines()[0]
    assert f"  line {BROKEN_LINE}: error: Unknown modifier '.comit_group'\n      wgmma.comit_group.sync.aligned;" in out


def test_answer_with_task_checks_the_abi(capsys, inputs):
    code, out, _ = in_process(capsys, inputs["mismatch"], "--arch", "sm_90a", "--task", "gemm", "--json")
    assert code == 1  # it compiled, but the spec does not match: exit 1 as for any spec error; the report says why
    assert json.loads(out)["abi"] == [
        "launches[0].block: [256, 1, 1], but entry 'gemm_wgmma_tma' declares .reqntid [128]"
    ]
    assert "ABI: MISMATCH\n  - launches[0].block: [256, 1, 1]" in render(json.loads(out))


def test_cuda_file(capsys, inputs):
    code, out, _ = in_process(capsys, inputs["kernel"], "--arch", "sm_90a", "--json")
    data = json.loads(out)
    assert code == 0 and data["language"] == "cuda" and data["ok"] is True
    assert "nvrtc" in data["toolchain"]
    assert [k["name"] for k in data["kernels"]] == ["gemm_naive"]
    assert data["targets"]["wgmma"] == {"ptx": False, "sass": False, "ptx_matches": [], "sass_matches": {}}


def test_ptx_for_another_target(capsys):
    code, out, err = in_process(capsys, PTX / "blackwell_tcgen05.ptx", "--arch", "sm_90a", "--json")
    assert code == 1 and err == ""
    [diagnostic] = json.loads(out)["diagnostics"]
    assert diagnostic["message"].startswith("the module is written for .target sm_100a, but this task is for sm_90a")


@pytest.mark.parametrize(
    ("name", "args", "code", "message"),
    [
        ("empty", (), 1, "error: {path} is empty"),
        ("zeros", (), 1, "error: {path} holds NUL bytes: it is not source text"),
        ("huge", (), 1, "error: {path} is 50.0 MB; the cap is 16 MB"),
        ("unknown", (), 1, "error: cannot tell what {path} holds: name it .ptx, .cu or .md"),
        ("no_block", (), 1, "error: {path}: no ```ptx or ```cuda source block found; put the whole kernel in one"),
        ("bad_grid", ("--task", "gemm"), 1, "error: {path}: the launch spec cannot run:\n"
                                            "- launches[0].grid[0]: evaluates to 0; it must be in 1..2147483647"),
        ("folder", (), 2, "error: {path} is a folder, not a file"),
        ("empty", ("--task", "softmax"), 2,
         "error: unknown task 'softmax'; closest: none near it (`python -m tasks` lists every name)"),
    ],
)  # fmt: skip
def test_bad_input_is_one_clear_line(capsys, inputs, name, args, code, message):
    path = inputs[name]
    returned, out, err = in_process(capsys, path, "--arch", "sm_90a", *args)
    assert (returned, out) == (code, "")
    assert err.startswith(message.format(path=path)), err
    assert err.count("\n") == (2 if name == "bad_grid" else 1), err  # a bad spec lists its problems
