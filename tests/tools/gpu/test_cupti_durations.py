"""CUPTI kernel durations without a GPU (tools/gpu/cupti_durations.py): which records belong to which run, on synthetic
activity records laid out as CUPTI delivers them; the session's life (kinds enabled, records flushed, CUPTI disabled
however the runs end, never finalized; never beside the range profiler) through a stand-in for the `cupti` module; and
the fallback where cupti-python is absent, or present without a driver (this CPU machine, when the dev extra
installed it). The same timer on the H200: tests/gpu/test_cupti_durations_gpu.py."""

from __future__ import annotations

import importlib.util
import sys
from enum import IntEnum
from types import SimpleNamespace

import pytest

from tools.gpu import cupti_counts, cupti_durations, cupti_user
from tools.gpu.cupti_durations import ApiCall, DurationsUnavailable, GpuWork, KernelTimer, attribute, traced

# Two runs, host windows [100, 200] and [1000, 1100] (ns). Run 1: a runtime call launches the scratch reset, a driver
# call the candidate's kernel — which runs on the GPU after run 2's window opened (the GPU lags the host): it is
# still run 1's, by its launching call. Run 2: one kernel and a memset. The L2 flush before each window is launched
# by a call outside it, so it is nobody's.
CALLS = [ApiCall(90, 1), ApiCall(120, 2), ApiCall(150, 3), ApiCall(990, 4), ApiCall(1010, 5), ApiCall(1020, 6)]
WORK = [
    GpuWork("flush", 95, 180, 1),
    GpuWork("reset", 300, 310, 2),
    GpuWork("gemm", 312, 1012, 3),
    GpuWork("flush", 995, 1005, 4),
    GpuWork("gemm", 1030, 1730, 5),
    GpuWork("memset", 1735, 1745, 6),
]
WINDOWS = [(100, 200), (1000, 1100)]


def test_each_runs_work_is_what_the_calls_in_its_window_launched() -> None:
    first, second = attribute(WINDOWS, CALLS, WORK)
    assert first.names == ("reset", "gemm") and second.names == ("gemm", "memset")
    assert (first.total_ns, first.span_ns) == (10 + 700, 1012 - 300)  # the sum leaves out the 2 ns gap; the span not
    assert (second.total_ns, second.span_ns) == (700 + 10, 1745 - 1030)


def test_records_arrive_in_any_order() -> None:
    assert attribute(WINDOWS, CALLS[::-1], WORK[::-1]) == attribute(WINDOWS, CALLS, WORK)


def test_a_run_with_no_records_is_refused() -> None:
    with pytest.raises(DurationsUnavailable, match="no GPU work for run 2 of 2"):
        attribute(WINDOWS, CALLS[:3], WORK)


def test_a_record_without_a_duration_is_refused() -> None:
    broken = [*WORK[:4], GpuWork("gemm", 0, 0, 5), WORK[5]]
    with pytest.raises(DurationsUnavailable, match="gemm of run 2 without a duration"):
        attribute(WINDOWS, CALLS, broken)


def test_runs_become_trials_in_milliseconds_and_varying_work_is_noted() -> None:
    one = cupti_durations.RunWork(total_ns=2_000_000, span_ns=2_500_000, names=("a", "b"))
    other = cupti_durations.RunWork(total_ns=3_000_000, span_ns=3_000_000, names=("a",))
    same = traced([one] * 4, trials=2, reps=2)
    assert same.per_trial == [[2.0, 2.0], [2.0, 2.0]] and same.span_per_trial == [[2.5, 2.5], [2.5, 2.5]]
    assert (same.kernels, same.kernels_vary) == (["a", "b"], False)
    mixed = traced([one, one, one, other], trials=2, reps=2)
    assert mixed.per_trial == [[2.0, 2.0], [2.0, 3.0]] and mixed.kernels_vary is True


# ----------------------------------------------------------------------------------- the session, a stand-in


class Kind(IntEnum):
    RUNTIME = 1
    DRIVER = 2
    CONCURRENT_KERNEL = 3
    MEMSET = 4
    MEMCPY = 5


class StandInCupti:
    """What KernelTimer asks of `cupti`: each call logged; a timestamp per call; each function run 'launches' one
    kernel of its own name (`launch`), whose record the flush delivers to the registered callback."""

    ActivityKind = Kind
    ActivityFlag = SimpleNamespace(FLUSH_FORCED=1)

    def __init__(self, enable_fails: Exception | None = None):
        self.log: list[str] = []
        self.clock = 0
        self.enabled: set[int] = set()
        self.completed = None
        self.pending: list[SimpleNamespace] = []
        self.enable_fails = enable_fails

    def get_timestamp(self) -> int:
        self.clock += 10
        return self.clock

    def launch(self, name: str) -> None:
        self.clock += 1
        correlation = len(self.pending) + 1
        start = self.clock + 2
        self.pending.append(SimpleNamespace(kind=Kind.DRIVER, start=self.clock, end=self.clock + 1,
                                            correlation_id=correlation))  # fmt: skip
        self.pending.append(SimpleNamespace(kind=Kind.CONCURRENT_KERNEL, name=name, start=start,
                                            end=start + 1000 * len(name), correlation_id=correlation))  # fmt: skip

    def activity_enable(self, kind: int) -> None:
        if self.enable_fails is not None:
            self.log.append(f"enable {Kind(kind).name} refused")
            raise self.enable_fails
        self.log.append(f"enable {Kind(kind).name}")
        self.enabled.add(kind)

    def activity_disable(self, kind: int) -> None:
        self.log.append(f"disable {Kind(kind).name}")
        self.enabled.discard(kind)

    def activity_register_callbacks(self, requested, completed) -> None:
        assert requested() == (cupti_durations.BUFFER_BYTES, 0)
        self.log.append("register")
        self.completed = completed

    def activity_flush_all(self, flag: int) -> None:
        self.log.append(f"flush {flag}")
        self.completed(self.pending)

    # No `finalize`: the timer must never detach CUPTI (the range profiler could not start after it on the H200).


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch):
    """A KernelTimer on the stand-in, with the GPU's synchronize a no-op and one libcupti 'loaded'."""

    def make(**kw) -> tuple[KernelTimer, StandInCupti]:
        fake = StandInCupti(**kw)
        timer = KernelTimer()
        timer._cupti = fake
        return timer, fake

    monkeypatch.setattr(cupti_durations.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(cupti_durations, "loaded_libraries", lambda name: ["/opt/site/nvidia/cu13/lib/libcupti.so.13"])
    return make


ENABLED = ["enable RUNTIME", "enable DRIVER", "enable CONCURRENT_KERNEL", "enable MEMSET", "enable MEMCPY"]
DISABLED = [line.replace("enable", "disable") for line in ENABLED]


def test_a_session_times_each_function_then_flushes_and_disables(stand_in) -> None:
    timer, fake = stand_in()
    flushes = []
    candidate, library = traced_functions(fake)
    got = timer.time([candidate, library], lambda: flushes.append(1), trials=2, reps=3)
    assert fake.log == [*ENABLED, "register", "flush 1", *DISABLED]
    assert len(flushes) == 2 * 2 * 3  # an L2 flush before every run
    assert [t.kernels for t in got] == [["cand"], ["cublas_gemm"]]
    assert got[0].per_trial == [[4000 / 1e6] * 3] * 2 and got[1].per_trial == [[11000 / 1e6] * 3] * 2
    assert timer.library == "/opt/site/nvidia/cu13/lib/libcupti.so.13" and cupti_user.holder() is None


def traced_functions(fake: StandInCupti):
    return (lambda: fake.launch("cand")), (lambda: fake.launch("cublas_gemm"))


def test_a_fault_in_a_run_passes_through_with_cupti_disabled(stand_in) -> None:
    timer, fake = stand_in()

    def faulting() -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(RuntimeError, match="illegal memory access"):
        timer.time([faulting], lambda: None, trials=1, reps=2)
    assert fake.log == [*ENABLED, "register", *DISABLED]  # no flush: the records are of no use
    assert cupti_user.holder() is None


def test_the_activity_api_and_the_range_profiler_never_run_at_once(stand_in) -> None:
    timer, fake = stand_in()
    seen = {}

    def candidate() -> None:  # while the activity API is on, the worker's counter refuses
        fake.launch("cand")
        with pytest.raises(cupti_counts.CountUnavailable, match="activity API is enabled") as e:
            counter = cupti_counts.Counter()
            counter._cupti, counter._chip = object(), b"GH100"
            counter.count(0, {}, 1, lambda: None, lambda: None)
        seen["count"] = e.value.lasting

    timer.time([candidate], lambda: None, trials=1, reps=1)
    assert seen == {"count": False}  # not for good: it counts again once the timing is over
    with cupti_user.holding("range profiler"), pytest.raises(DurationsUnavailable, match="range profiler"):
        timer.time([candidate], lambda: None, trials=1, reps=1)


def test_a_cupti_without_its_driver_is_off_for_good(stand_in) -> None:
    class NotSupportedError(RuntimeError):  # cupti._internal.utils's, as a CPU machine raises it
        pass

    timer, fake = stand_in(enable_fails=NotSupportedError("CUDA driver is not found"))
    with pytest.raises(DurationsUnavailable, match="NotSupportedError: CUDA driver is not found") as first:
        timer.time([lambda: None], lambda: None, trials=1, reps=1)
    assert first.value.lasting and fake.log == ["enable RUNTIME refused"]
    with pytest.raises(DurationsUnavailable, match="CUDA driver is not found") as again:
        timer.time([lambda: None], lambda: None, trials=1, reps=1)
    assert again.value.lasting and fake.log == ["enable RUNTIME refused"]  # said at once, CUPTI not touched again


def test_two_copies_of_libcupti_turn_the_timer_off_after_this_figure(stand_in, monkeypatch) -> None:
    timer, fake = stand_in()
    copies = ["/site/nvidia/cu13/lib/libcupti.so.13", "/usr/local/cuda/lib64/libcupti.so.13"]
    monkeypatch.setattr(cupti_durations, "loaded_libraries", lambda name: copies)
    got = timer.time([traced_functions(fake)[0]], lambda: None, trials=1, reps=1)
    assert got[0].kernels == ["cand"]  # measured: it stands
    with pytest.raises(DurationsUnavailable, match="two copies of libcupti") as e:
        timer.time([lambda: None], lambda: None, trials=1, reps=1)
    assert e.value.lasting


def test_without_cupti_python_the_timer_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupti", None)  # as where it is not installed: the import fails
    timer = KernelTimer()
    with pytest.raises(DurationsUnavailable, match=r"cupti-python is not installed.*pip install 'ptxbench\[cupti\]'"):
        timer.time([lambda: None], lambda: None, trials=1, reps=1)


@pytest.mark.skipif(importlib.util.find_spec("cupti") is None, reason="cupti-python is not installed (dev extra)")
def test_the_real_cupti_python_without_a_driver_is_off_for_good() -> None:
    """On a CPU machine with cupti-python installed: it imports, and its first call refuses for want of a driver."""
    pytest.importorskip("cupti")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: tests/gpu/test_cupti_durations_gpu.py times with it")
    timer = KernelTimer()
    with pytest.raises(DurationsUnavailable, match="NotSupportedError") as e:
        timer.time([lambda: None], lambda: None, trials=1, reps=1)
    assert e.value.lasting and cupti_user.holder() is None
