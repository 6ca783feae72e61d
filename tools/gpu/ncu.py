"""Nsight Compute for the profile passes: find the CLI, profile one command into a report, read the report
back as ncu's raw CSV page. The counts pass (profile.py) and the perf pass (perf.py) differ only in what
they ask ncu to collect."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tools import procs

EXPORT_S = 120.0  # reading a report back: seconds, however long the profile took


class NcuFailed(Exception):
    """ncu is missing, refused the target, ran out of time, or produced nothing: the pass is skipped."""


def find_ncu() -> Path | None:
    """Nsight Compute's CLI: PTXBENCH_NCU, PATH, the usual install folder, then CUDA_HOME."""
    candidates = [os.environ.get("PTXBENCH_NCU"), shutil.which("ncu")]
    candidates += sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "ncu"))
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def profile_raw(
    target: list[str], collect: list[str], *, env: dict[str, str], timeout_s: float, instances: bool = False
) -> str:
    """ncu's raw CSV page for the launches `target` makes. `collect`: ncu's own options choosing kernels and
    what to measure (`-k`, `-c`, `--metrics`, `--section`, `--profile-from-start off`); `instances`: print
    per-opcode metric instances (the counts pass needs them). Clocks are left as the GPU runs them."""
    return profile_pages(target, collect, env=env, timeout_s=timeout_s, instances=instances).raw


@dataclass
class Pages:
    """What one profile's report is read back as: the raw page, and the SASS source page when it was asked for
    (or why it could not be read: the raw page's figures stand without it)."""

    raw: str
    source: str = ""
    source_error: str = ""


def profile_pages(
    target: list[str], collect: list[str], *, env: dict[str, str], timeout_s: float, instances: bool = False,
    source: bool = False,
) -> Pages:  # fmt: skip
    """profile_raw's profile, read back as its raw page and, with `source`, its source page with each kernel's SASS
    instructions and their per-instruction counters (`--page source --print-source sass`; collect the
    SourceCounters section for them)."""
    ncu = find_ncu()
    if ncu is None:
        raise NcuFailed("Nsight Compute (ncu) is not installed here")
    with tempfile.TemporaryDirectory(prefix=procs.temp_prefix("ncu")) as tmp:
        report = Path(tmp) / "profile"
        cmd = [str(ncu), "--clock-control", "none", "--target-processes", "all", *collect, "-f", "-o", str(report)]
        imported = [str(ncu), "-i", str(report.with_suffix(".ncu-rep"))]
        export = [*imported, "--page", "raw", "--csv"]
        if instances:
            export += ["--print-metric-instances", "details"]
        try:
            done = procs.run([*cmd, *target], timeout_s, env=env)
            if done.returncode != 0 or not report.with_suffix(".ncu-rep").is_file():
                raise NcuFailed(f"ncu did not produce a report: {tail(done.stdout + done.stderr)}")
            pages = Pages(raw=procs.run(export, EXPORT_S).stdout)
        except subprocess.TimeoutExpired:
            raise NcuFailed(f"ncu did not finish within {timeout_s:.0f} s") from None
        if source:
            try:
                read = procs.run([*imported, "--page", "source", "--csv", "--print-source", "sass"], EXPORT_S)
                pages.source = read.stdout if read.returncode == 0 else ""
                pages.source_error = "" if read.returncode == 0 else f"ncu's source page: {tail(read.stderr, 300)}"
            except subprocess.TimeoutExpired:
                pages.source_error = f"ncu's source page was not read within {EXPORT_S:.0f} s"
        return pages


def tail(text: str, chars: int = 600) -> str:
    return " ".join(text.strip().split())[-chars:] or "(no output)"
