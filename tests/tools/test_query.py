"""The response inside an OpenRLHF query, whole or with its prompt cut from the front."""

from __future__ import annotations

from tools.query import response_after

PROMPT = (
    "<|im_start|>system\n" + "Rules of the game. " * 40 + "```ptx\n// an example\n```<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_the_response_follows_the_whole_prompt() -> None:
    assert response_after(PROMPT + "my answer", PROMPT) == "my answer"


def test_a_prompt_cut_from_the_front_still_ends_where_the_response_starts() -> None:
    for cut in (1, 17, 100, len(PROMPT) - 30):
        assert response_after(PROMPT[cut:] + "my answer", PROMPT) == "my answer"


def test_a_stray_first_character_is_skipped() -> None:
    assert response_after("\ufffd" + PROMPT[200:] + "```ptx\nok\n```", PROMPT) == "```ptx\nok\n```"


def test_a_query_holding_none_of_the_prompts_end_has_no_response() -> None:
    assert response_after("something else entirely", PROMPT) is None
    assert response_after("", PROMPT) is None
