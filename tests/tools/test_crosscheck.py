"""The static cross-checks: each catches its seeded mistake (in hand-written answers and in a reference answer),
says "could not check" where the values are not constants, and stays silent on every reference answer and every
correct fixture. The seeded answers also go through the real pipeline (ptxas), which refuses them before the
GPU with an abi_error naming the line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tasks import get_task
from tasks.schema import Arch
from tools.answer import extract_solution
from tools.assemble import compile_cuda
from tools.crosscheck import cross_check
from tools.evaluation import Stage, Status
from tools.pipeline import evaluate_answer
from tools.plan import plan_launches

ROOT = Path(__file__).parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
REFERENCES = sorted((ROOT / "tasks" / "solutions").glob("sm_*/*.md"))
CORRECT = [
    *(FIXTURES / "answers").glob("*.md"), *(FIXTURES / "gpu").glob("*.md"), FIXTURES / "agent" / "fill_ok.md",
]  # fmt: skip
GEMM = get_task("gemm")
HOPPER = (FIXTURES / "answers" / "hopper_gemm.md").read_text()
BLACKWELL = (FIXTURES / "answers" / "blackwell_gemm.md").read_text()


def checks(answer: str, task=GEMM, arch: Arch = Arch.SM_90A):
    solution = extract_solution(answer)
    # The checks read PTX: a CUDA answer's is what NVRTC makes of it, as the pipeline does.
    ptx = compile_cuda(solution.source, arch).ptx if solution.language == "cuda" else solution.source
    return cross_check(ptx, plan_launches(solution.launch, task, arch), task, arch, solution.language)


def verdicts(found) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for c in found:
        out.setdefault(c.check, []).append(c.verdict)
    return out


def with_swizzle(answer: str, swizzle: str) -> str:
    """The answer with every tensor map of its launch spec set to `swizzle`."""
    head, spec = answer.split("```json\n")
    body, tail = spec.split("```", 1)
    data = json.loads(body)
    for arg in data["launches"][0]["args"]:
        if "tensor_map" in arg:
            arg["swizzle"] = swizzle
    return f"{head}```json\n{json.dumps(data)}\n```{tail}"


def reference(task: str, arch: str) -> Path:
    return ROOT / "tasks" / "solutions" / arch / f"{task}.md"


@pytest.mark.parametrize("path", REFERENCES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_silent_on_every_reference_answer(path: Path) -> None:
    found = checks(path.read_text(), get_task(path.stem), Arch(path.parent.name))
    assert not [c.message for c in found if c.verdict == "mismatch"]
    assert any(c.verdict == "consistent" for c in found)  # the swizzle check, at least, applies to each


@pytest.mark.parametrize("path", CORRECT, ids=lambda p: p.name)
def test_silent_on_every_correct_fixture(path: Path) -> None:
    """Correct in its launches, that is: the attention fixtures (tests/fixtures/make_attention_fixtures.py) are wrong
    only in their arithmetic, and their first line names the task and arch they were written for."""
    text = path.read_text()
    named = re.match(r"# Broken fixture: (\S+) on (sm_\w+)", text)
    if named:
        task, arch = get_task(named[1]), Arch(named[2])
    else:
        task, arch = GEMM, Arch.SM_100A if "100" in path.name or "blackwell" in path.name else Arch.SM_90A
    assert not [c.message for c in checks(text, task, arch) if c.verdict == "mismatch"]


def test_hand_written_answers_are_checked_and_consistent() -> None:
    assert verdicts(checks(HOPPER)) == {"swizzle": ["consistent"], "expect_tx": ["consistent"]}
    assert verdicts(checks(BLACKWELL, arch=Arch.SM_100A)) == {"swizzle": ["consistent"], "expect_tx": ["consistent"]}


def test_an_expect_tx_that_is_not_the_sum_of_its_boxes() -> None:
    [swizzle, expect] = checks(HOPPER.replace("[%r7], 4096;", "[%r7], 2048;"))
    assert (swizzle.verdict, expect.verdict, expect.line) == ("consistent", "mismatch", 93)
    assert expect.message == (
        "launches[0] (gemm_wgmma_tma): the expect_tx at line 93 announces 2,048 bytes on [%r7], but the TMA copies "
        "that complete on it in the same code deliver 1,024 (A box [64, 8], line 97) + 1,024 (A box [64, 8], line 98) "
        "+ 1,024 (B box [64, 8], line 99) + 1,024 (B box [64, 8], line 100) = 4,096 bytes: the barrier lets waiters "
        "in before all bytes land. Announce exactly the sum of the boxes (elements × element size) that complete on it"
    )
    [_, more] = checks(BLACKWELL.replace("[%r7], 6144;", "[%r7], 8192;"), arch=Arch.SM_100A)
    assert more.verdict == "mismatch" and "the barrier hangs: the phase never completes" in more.message


def test_tensor_maps_whose_swizzle_no_descriptor_declares() -> None:
    [swizzle, _] = checks(with_swizzle(HOPPER, "128B"))
    assert swizzle.verdict == "mismatch"
    assert swizzle.message.startswith(
        "launches[0] (gemm_wgmma_tma): the shared-memory descriptors declare swizzle none (lines 107), but the "
        "tensor maps that fill shared memory use A 128B, B 128B"
    )
    [tcgen05, _] = checks(with_swizzle(BLACKWELL, "64B"), arch=Arch.SM_100A)
    assert tcgen05.verdict == "mismatch" and "use A 64B, B 64B" in tcgen05.message


def to_64b(m: re.Match) -> str:
    """A descriptor constant with the sm_90a swizzle field 1 (128B) rewritten to 2 (64B)."""
    n = int(m.group(0))
    return str(n - (1 << 62) + (1 << 63)) if n >> 62 == 1 else m.group(0)


def test_a_reference_answer_with_its_descriptors_seeded_to_another_swizzle() -> None:
    text = reference("gemm_n7168_k5120", "sm_90a").read_text()
    seeded, count = re.subn(r"\b\d{19}\b", to_64b, text)
    assert count >= 8 and seeded != text  # the descriptor and each k-step's
    [swizzle, *_] = checks(seeded)
    assert swizzle.verdict == "mismatch" and "declare swizzle 64B" in swizzle.message
    assert "use A 128B, B 128B" in swizzle.message


def test_could_not_check_says_why() -> None:
    loaded = HOPPER.replace("[%r7], 4096;", "[%r7], %r30;").replace(
        "mov.u32 \t%r0, %tid.x;", "mov.u32 \t%r0, %tid.x;\n\tld.param.u32 \t%r30, [M];"
    )
    assert "ld.param.u32 \t%r30, [M];" in loaded
    [_, expect] = checks(loaded)
    assert expect.verdict == "unchecked"
    assert expect.message.endswith("could not check the expect_tx at line 94: its byte count %r30 is not a constant")
    # Triton's elected producer: the expect_tx and the copies run under different predicates.
    found = checks(reference("gemm_n7168_k5120", "sm_90a").read_text())
    assert {c.verdict for c in found if c.check == "expect_tx"} == {"unchecked"}
    assert "run under different predicates" in found[-1].message


@pytest.mark.parametrize(
    ("answer", "arch", "expected"),
    [
        (HOPPER.replace("[%r7], 4096;", "[%r7], 2048;"), Arch.SM_90A, "announces 2,048 bytes"),
        (with_swizzle(BLACKWELL, "64B"), Arch.SM_100A, "declare swizzle none"),
    ],
)
def test_the_pipeline_refuses_a_seeded_mistake_before_the_gpu(answer: str, arch: Arch, expected: str) -> None:
    ev = evaluate_answer(answer, GEMM, arch)
    assert ev.status is Status.ABI_ERROR and expected in ev.stage(Stage.ABI).message
    assert ev.stage(Stage.RUN) is None  # nothing ran


def test_a_passing_module_says_what_was_and_was_not_checked() -> None:
    ev = evaluate_answer(reference("gemm_n7168_k5120", "sm_90a").read_text(), GEMM, Arch.SM_90A)
    message = ev.stage(Stage.ABI).message
    assert ev.status is Status.UNVERIFIED
    assert message.startswith("static cross-checks consistent: 1 (swizzle)\ncould not check 4: launches[0]")
    assert message.endswith("(and 2 more)")
