"""A model's Markdown answer → Solution, and the precise message for each way an answer can be malformed."""

from __future__ import annotations

import json

import pytest

from tests.tools.files import read_answer
from tools.answer import MAX_ANSWER_BYTES, AnswerError, extract_solution, parse_launch_spec
from tools.solution import ScalarArg, TensorArg, TensorMapArg

PTX = ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n\tret;\n}"
SPEC = {"launches": [{"kernel": "k", "grid": ["cdiv(M,128)", 1, 1], "block": [128, 1, 1], "args": [{"tensor": "C"}]}]}


def answer(*blocks: tuple[str, str], prose: str = "Here is the kernel.") -> str:
    parts = [prose]
    for tag, body in blocks:
        parts.append(f"```{tag}\n{body}\n```")
    return "\n\n".join(parts) + "\n"


def spec_with(**changes) -> str:
    launch = {**SPEC["launches"][0], **changes}
    return json.dumps({"launches": [launch]}, indent=2)


def refusal(markdown: str) -> str:
    with pytest.raises(AnswerError) as refused:
        extract_solution(markdown)
    return str(refused.value)


def test_fixture_answer_becomes_a_solution():
    solution = extract_solution(read_answer("hopper_gemm.md"))
    assert solution.language == "ptx"
    assert solution.source.startswith("//\n// A 64x64-tile bf16 GEMM for sm_90a")
    launch = solution.launch.launches[0]
    assert launch.kernel == "gemm_wgmma_tma"
    assert launch.grid == ["cdiv(N,64)", "cdiv(M,64)", 1]
    assert launch.cluster == [1, 1, 1] and launch.shared_bytes == 0  # the defaults
    assert [type(a) for a in launch.args] == [TensorMapArg, TensorMapArg, TensorArg, ScalarArg, ScalarArg]
    assert launch.args[0].box == [64, 8] and launch.args[0].swizzle == "none"


@pytest.mark.parametrize(("tag", "language"), [("ptx", "ptx"), ("cuda", "cuda"), ("cu", "cuda"), ("c++", "cuda"),
                                               ("cpp", "cuda"), ("PTX", "ptx"), ("CUDA", "cuda")])  # fmt: skip
def test_source_block_tags(tag, language):
    solution = extract_solution(answer((tag, PTX), ("json", json.dumps(SPEC))))
    assert solution.language == language
    assert solution.source == PTX + "\n"


def test_tilde_and_longer_fences():
    markdown = f"~~~ptx\n{PTX}\n~~~\n\n````json\n{json.dumps(SPEC)}\n```\n````\n"
    with pytest.raises(AnswerError, match="not valid JSON"):  # the inner ``` belongs to the json block
        extract_solution(markdown)
    markdown = f"~~~ptx\n{PTX}\n~~~\n\n````json\n{json.dumps(SPEC)}\n````\n"
    assert extract_solution(markdown).launch.launches[0].kernel == "k"


def test_content_hash_follows_the_content():
    one = extract_solution(answer(("ptx", PTX), ("json", json.dumps(SPEC))))
    same = extract_solution(answer(("ptx", PTX), ("json", json.dumps(SPEC)), prose="Other words."))
    other = extract_solution(answer(("ptx", PTX + "\n// changed"), ("json", json.dumps(SPEC))))
    assert one.content_hash == same.content_hash != other.content_hash


def test_no_source_block():
    message = refusal(answer(("python", "print(1)"), ("json", json.dumps(SPEC))))
    assert "no ```ptx or ```cuda source block found (found blocks tagged: json, python)" in message
    assert refusal("Just prose.\n") == (
        "no ```ptx or ```cuda source block found; put the whole kernel in one ```ptx "
        "(or ```cuda) block and the launch spec in one ```json block after it"
    )


def test_two_source_blocks():
    markdown = answer(("ptx", PTX), ("cuda", "__global__ void k() {}"), ("json", json.dumps(SPEC)))
    assert "2 source blocks found (opening at lines 3, 13); give exactly one" in refusal(markdown)


def test_no_launch_spec():
    assert "no ```json launch spec block found" in refusal(answer(("ptx", PTX)))


def test_two_launch_specs():
    markdown = answer(("ptx", PTX), ("json", json.dumps(SPEC)), ("json", json.dumps(SPEC)))
    assert "2 ```json blocks found (opening at lines 13, 17); give exactly one" in refusal(markdown)


def test_empty_source_block():
    assert "the ```ptx block is empty" in refusal(answer(("ptx", "   "), ("json", json.dumps(SPEC))))


def test_unclosed_block():
    message = refusal(f"Intro\n\n```ptx\n{PTX}\n\n```json\n{json.dumps(SPEC)}\n")
    assert "is never closed (was the answer cut off?)" in message
    assert "block opened at line" in message


def test_bad_json_says_where():
    spec = '{"launches": [\n  {"kernel": "k",\n   "grid": [1, 1, 1],,\n}]}'
    message = refusal(answer(("ptx", PTX), ("json", spec)))
    # The json block opens at line 13 of the answer; its third line holds the stray comma.
    assert "the launch spec is not valid JSON: Expecting property name enclosed in double quotes" in message
    assert "at line 3 column 22 of the json block (line 16 of the answer)" in message


def test_json_that_is_not_an_object():
    assert "must be a JSON object with 'launches', got a list" in refusal(answer(("ptx", PTX), ("json", "[1, 2]")))


def test_answer_size_cap():
    assert "larger than 8 MB" in refusal("x" * (MAX_ANSWER_BYTES + 1))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"args": [{"pointer": "C"}]}, "launches[0].args[0]: an argument is an object with exactly one of the keys "
                                       "'tensor', 'scalar' or 'tensor_map'"),
        ({"args": [{"tensor": "C", "scalar": "M"}]}, "launches[0].args[0]: an argument is an object with exactly one"),
        ({"args": ["C"]}, "launches[0].args[0]: an argument is an object with exactly one"),
        ({"args": [{"scalar": "M", "type": "i32"}]},
         "launches[0].args[0].type: Input should be 'u32', 's32', 'u64', 's64' or 'f32', got 'i32'"),
        ({"args": [{"tensor_map": "A", "box": [64, 64], "swizzle": "256B"}]},
         "launches[0].args[0].swizzle: Input should be 'none', '32B', '64B' or '128B', got '256B'"),
        ({"args": [{"tensor_map": "A"}]}, "launches[0].args[0].box: required field is missing"),
        ({"args": [{"tensor": "C", "dtype": "bf16"}]}, "launches[0].args[0].dtype: unknown field"),
        ({"grid": [1, 1]}, "launches[0].grid: List should have at least 3 items"),
        ({"shared_bytes": -1}, "launches[0].shared_bytes: Input should be greater than or equal to 0"),
        ({"threads": 128}, "launches[0].threads: unknown field"),
        ({"kernel": None}, "launches[0].kernel: Input should be a valid string"),
    ],
)  # fmt: skip
def test_schema_errors_name_the_field(changes, message):
    text = refusal(answer(("ptx", PTX), ("json", spec_with(**changes))))
    assert text.startswith("the launch spec does not match the schema:\n- ")
    assert message in text


def test_spec_without_launches():
    assert "- launches: required field is missing" in str(_spec_error("{}"))
    assert "- launches: List should have at least 1 item" in str(_spec_error('{"launches": []}'))
    assert "- scratch[0].init: Input should be 'zero' or 'poison', got 'ones'" in str(
        _spec_error(json.dumps({**SPEC, "scratch": [{"name": "s", "dtype": "float32", "shape": [1], "init": "ones"}]}))
    )


def _spec_error(text: str) -> AnswerError:
    with pytest.raises(AnswerError) as refused:
        parse_launch_spec(text)
    return refused.value


DRAFT = PTX.replace("ret;", "// a first try\n\tret;")
FINAL = answer(("ptx", PTX), ("json", json.dumps(SPEC)), prose="The kernel:")


def reasoning(*blocks: tuple[str, str]) -> str:
    """A reasoning model's thoughts: prose, and drafts of the answer's blocks."""
    return "Let me think about the tiling.\n\n" + "".join(f"```{tag}\n{body}\n```\n" for tag, body in blocks)


@pytest.mark.parametrize(
    "reply",
    [
        # Qwen3 / QwQ: the reply opens and closes its reasoning
        f"<think>\n{reasoning(('ptx', DRAFT), ('json', json.dumps(SPEC)))}</think>\n\n{FINAL}",
        # DeepSeek-R1: the chat template opened <think> in the prompt, the completion only closes it
        f"{reasoning(('ptx', DRAFT), ('cuda', '__global__ void k() {}'))}\n</think>\n\n{FINAL}",
        # reasoning that is not at the start, and more than one
        f"Plan first.\n<think>{reasoning(('ptx', DRAFT))}</think>\n{FINAL}<think>\n```ptx\n{DRAFT}\n```\n</think>\n",
        # an empty think block (Qwen3 with thinking off)
        f"<think>\n\n</think>\n\n{FINAL}",
    ],
    ids=["qwen3", "r1_no_opening", "several", "empty"],
)
def test_the_answer_is_read_outside_the_reasoning(reply: str) -> None:
    solution = extract_solution(reply)
    assert solution.source == PTX + "\n" and "a first try" not in solution.source
    assert solution.launch.launches[0].kernel == "k"


def test_drafts_in_the_reasoning_only_are_not_an_answer() -> None:
    reply = f"<think>\n{reasoning(('ptx', DRAFT), ('ptx', DRAFT), ('json', json.dumps(SPEC)))}</think>\n\nDone.\n"
    message = refusal(reply)
    assert message.startswith("no ```ptx or ```cuda source block found outside the reasoning (2 inside "
                              "<think>…</think>, not read); put the whole kernel in one")  # fmt: skip


def test_a_reply_that_ends_inside_its_reasoning_says_so() -> None:
    cut_off = f"Sure.\n<think>\n{reasoning(('ptx', DRAFT), ('json', json.dumps(SPEC)))}and then"
    assert refusal(cut_off) == (
        "the reply ends inside its reasoning (<think> at line 2 is never closed), so it holds no answer: close "
        "the reasoning with </think> and put the ```ptx (or ```cuda) block and the ```json launch spec after it"
    )


def test_line_numbers_stay_the_replys() -> None:
    """Reasoning is blanked, not removed, so a refusal's line numbers point into the whole reply."""
    final = answer(("ptx", PTX), ("cuda", "__global__ void k() {}"), ("json", json.dumps(SPEC)))
    reply = f"<think>\n{reasoning(('ptx', DRAFT))}</think>\n{final}"
    opening = [i for i, line in enumerate(reply.splitlines(), 1) if line in ("```ptx", "```cuda")][1:]
    assert f"2 source blocks found (opening at lines {opening[0]}, {opening[1]})" in refusal(reply)
