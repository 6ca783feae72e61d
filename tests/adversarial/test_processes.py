"""Processes: a compile killed with -9 takes its ptxas with it, and what it left (its temp folder) is swept at
the next start; orphans of a dead process of ours are found by the owner they carry and killed; a child
forked for a short-lived thread (agent.bench runs in them) is not killed when that thread ends; a bench
never deletes a run folder another process holds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tasks.catalog import get_task
from tests.adversarial.helpers import REPO, fill_ok
from tests.waiting import wait_for
from tools import procs

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def children(pid: int, name: str, argument: str = "") -> list[int]:
    """The children of `pid` running `name` whose command line holds `argument`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            comm = stat.read_text().split("(", 1)[1].rsplit(")", 1)[0]
            args = (stat.parent / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if int(fields[1]) == pid and comm == name and any(argument in a for a in args):
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def compile_process(path: Path, own_temp_folder: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(own_temp_folder)}
    return subprocess.Popen([sys.executable, "-m", "tools.compile", str(path), "--arch", "sm_90a", "--timeout", "300"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def test_kill_9_during_compile_takes_ptxas_along_and_the_next_start_sweeps(tmp_path: Path, own_temp_folder: Path):
    slow = tmp_path / "slow.ptx"  # 10,000 entries: ptxas works on it for minutes
    slow.write_text(HEADER + "".join(f".visible .entry k{i}()\n{{\nret;\n}}\n" for i in range(10_000)))
    parent = compile_process(slow, own_temp_folder)
    # the assembling ptxas, not the `ptxas --version` the tool lookup runs first (it has no temp folder yet)
    assert wait_for(lambda: children(parent.pid, "ptxas", "-arch"), 60), "ptxas never started"
    (ptxas,) = children(parent.pid, "ptxas", "-arch")
    left = list(own_temp_folder.glob(f"ptxbench-{parent.pid}-ptxas-*"))
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    assert wait_for(lambda: not alive(ptxas), 5), "ptxas outlived its parent"
    assert left and all(p.exists() for p in left)  # a killed process cleans nothing up itself
    quick = tmp_path / "quick.ptx"
    quick.write_text(HEADER + ".visible .entry k()\n{\nret;\n}\n")
    assert compile_process(quick, own_temp_folder).wait(timeout=120) == 0
    assert not any(p.exists() for p in left)  # swept by the next process's first compile


def test_the_sweep_kills_orphans_and_removes_temp_files_of_dead_owners_only(own_temp_folder: Path) -> None:
    finished = subprocess.Popen(["true"])
    finished.wait()
    dead = finished.pid  # a pid whose process has exited
    orphan = subprocess.Popen(["sleep", "60"], env={**os.environ, procs.OWNER_ENV: str(dead)})
    bystander = subprocess.Popen(["sleep", "60"], env={**os.environ, procs.OWNER_ENV: str(os.getpid())})
    stale = Path(tempfile.gettempdir()) / f"ptxbench-{dead}-ptxas-x"
    stale.mkdir()
    ours = Path(tempfile.mkdtemp(prefix=procs.temp_prefix("ptxas")))
    try:
        swept = procs.sweep_stale()
        assert f"process {orphan.pid}" in swept and str(stale) in swept
        assert orphan.wait(timeout=5) == -signal.SIGKILL
        assert bystander.poll() is None and ours.exists() and not stale.exists()
    finally:
        for proc in (orphan, bystander):
            proc.kill()
            proc.wait()
        ours.rmdir()


def test_a_child_outlives_the_short_lived_thread_that_asked_for_it() -> None:
    started: list[subprocess.Popen] = []
    thread = threading.Thread(target=lambda: started.append(procs.spawn(["sleep", "30"])))
    thread.start()
    thread.join()
    (child,) = started
    try:
        time.sleep(0.3)  # the parent-death signal would have fired when the thread ended
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_a_time_out_kills_the_child() -> None:
    start = time.perf_counter()
    try:
        procs.run(["sleep", "30"], 0.5)
    except subprocess.TimeoutExpired:
        pass
    else:
        raise AssertionError("no time-out")
    assert time.perf_counter() - start < 5
    assert not children(os.getpid(), "sleep")


HOLD_A_NEW_RUN = (  # a run prepared and not yet at its first checkpoint, as agent.solve and agent.bench hold one
    "import sys, time\nfrom agent.loop.command_line import from_command_line\n"
    "run = from_command_line(sys.argv[1:])\nprint('holding', flush=True)\ntime.sleep(120)\n"
)


def test_a_bench_does_not_delete_a_run_another_process_is_starting(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([fill_ok()]))
    runs_dir, gemm = tmp_path / "runs", get_task("gemm").name
    live = runs_dir / "b" / f"{gemm}-sm_90a-single-s00"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD_A_NEW_RUN, "task=gemm", "arch=sm_90a", "llm=scripted",
                               f"llm.path={script}", f"runs_dir={live.parent}", f"run_id={live.name}"],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline() == "holding\n"
        assert not (live / "checkpoints.sqlite").exists() and (live / "config.json").is_file()
        inode = live.stat().st_ino
        bench = subprocess.run([sys.executable, "-m", "agent.bench", "tasks=gemm_n7168_k5120", "archs=sm_90a",
                                "modes=single", "samples=1", "llm=scripted", f"llm.path={script}", "eval.gpu=false",
                                f"runs_dir={runs_dir}", "bench_id=b"],
                               cwd=REPO, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert holder.poll() is None
        assert live.stat().st_ino == inode and (live / "config.json").is_file()  # the live run's folder is kept
        assert bench.returncode == 1 and "Traceback" not in bench.stderr
        assert f"{live} is in use: another process is running or resuming this run" in bench.stderr
        assert "move it away" not in bench.stderr
    finally:
        holder.kill()
        holder.wait()
