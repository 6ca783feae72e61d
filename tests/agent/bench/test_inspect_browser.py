"""The inspector's pages in a real browser: headless Chromium (Debian's chromium-headless-shell, or chromium)
driven by Playwright through its executable_path, so no browser is downloaded, with the network left alone
(the pages must not need it: every request a page makes is recorded and must be a file). Skips without
Chromium or Playwright; .ci/run installs both."""

from __future__ import annotations

import colorsys
import io
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from agent.bench.inspect.site import build_site
from agent.bench.plots import COLORS
from tests.agent.bench.test_inspect import HOSTILE, hostile_run, tools_run
from tests.fixtures.runs import make_runs
from tools.solution import LaunchSpec, Solution

RUNS = Path(make_runs.__file__).parent
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
BIG_LINES = 20_000
# One feedback line far wider than the page, with a token no space breaks.
LONG_FEEDBACK = "mismatch at out[3, 7]: " + "expected 1.0 got 0.0; " * 120 + "x" * 400


def chromium() -> str | None:
    return next((path for name in ("chromium-headless-shell", "chromium") if (path := shutil.which(name))), None)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One bench page over the fixture bench, the replay run (real sources, five turns), a hostile run and a run
    whose answer has 20,000 lines."""
    runs = tmp_path_factory.mktemp("runs") / "bench"
    shutil.copytree(RUNS / "bench", runs)
    shutil.copytree(RUNS / "replay" / "gemm-replay", runs / "gemm-replay")
    hostile_run(runs)
    body = "\n".join(f"    add.u32 %r1, %r1, {i};" for i in range(BIG_LINES))
    source = f".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{{\n{body}\n}}\n"
    solution = Solution(language="ptx", source=source, launch=LaunchSpec.model_validate(
        {"launches": [{"kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1]}]}))  # fmt: skip
    turn = make_runs.turn(1, make_runs.evaluation(make_runs.GEMM, "UV", solution), f"```ptx\n{source}```", solution)
    turn = turn.model_copy(update={"feedback": LONG_FEEDBACK})
    make_runs.write_run(runs, "big", make_runs.GEMM, 8, [turn], None)
    out = tmp_path_factory.mktemp("site")
    build_site(runs, out)
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator:
    path = chromium()
    if path is None:
        pytest.skip("no Chromium (apt-get install chromium-headless-shell)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="no Playwright (pip install playwright)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser) -> Iterator:
    """A page that records every request it makes that is not a file, every script error and every dialog."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.outside, page.errors, page.dialogs = [], [], []

    def request(route) -> None:
        if not route.request.url.startswith("file://"):
            page.outside.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", request)
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    yield page
    assert not page.outside and not page.errors and not page.dialogs, (page.outside, page.errors, page.dialogs)
    context.close()


def coloured(png: bytes, colour: str) -> tuple[float, int]:
    """(share of pixels that are not white, pixels within a small distance of `colour`) of a screenshot."""
    image = pytest.importorskip("PIL.Image").open(io.BytesIO(png)).convert("RGB")
    pixels = np.asarray(image, dtype=np.int16).reshape(-1, 3)
    target = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    inked = float((pixels.min(axis=1) < 235).mean())
    near = int((np.abs(pixels - target).max(axis=1) <= 12).sum())
    return inked, near


def test_the_grid_renders_and_a_cell_opens_its_run(site: Path, page) -> None:
    page.goto((site / "index.html").as_uri())
    chips = page.locator("#grid a.chip")
    assert chips.count() == 15
    assert page.locator("#shown").inner_text() == "15 of 15 runs shown"
    inked, green = coloured(page.locator("#grid").screenshot(), COLORS["passed"])
    assert inked > 0.1 and green > 200  # the table drawn, passed chips in their colour
    assert (
        page.locator("#plots svg").count() == 3 and page.locator("#headline tbody tr").count() == 7
    )  # 4 of fixture-model, 3 of the hostile one
    page.locator('#grid a.chip[href$="gemm-replay.html"]').click()
    page.wait_for_load_state()
    assert page.url.endswith("/runs/bench/gemm-replay.html")
    assert page.locator("h1").inner_text().startswith("gemm-replay")


def test_filters_hide_the_runs_they_exclude(site: Path, page) -> None:
    page.goto((site / "index.html").as_uri())
    page.select_option('select[data-filter="task"]', make_runs.ATTN)
    assert page.locator("#shown").inner_text() == "6 of 15 runs shown"
    assert page.locator("#grid a.chip:visible").count() == 6
    assert page.locator("#runs tbody tr:visible").count() == 6
    assert page.locator("#headline tbody tr:visible").count() == 0  # rows over all tasks are not this task's
    page.select_option('select[data-filter="mode"]', "multi")
    assert page.locator("#shown").inner_text() == "2 of 15 runs shown"
    page.select_option('select[data-filter="task"]', "")
    assert page.locator("#shown").inner_text() == "7 of 15 runs shown"  # 4 + replay, hostile, big


def test_the_diff_and_the_chart_render(site: Path, page) -> None:
    page.goto((site / "runs" / "bench" / "gemm-replay.html").as_uri())
    bars = page.locator("#speedup-chart rect")
    assert bars.count() == 5
    heights = [float(bars.nth(i).get_attribute("height")) for i in range(5)]
    assert heights[1] > heights[3] > heights[0] == heights[2] == heights[4]  # 1.07× and 0.5×, stubs elsewhere
    inked, green = coloured(page.locator("#speedup-chart").screenshot(), COLORS["passed"])
    assert inked > 0.05 and green > 300
    turn2 = page.locator("#turn-2 .diff-view")
    assert turn2.locator(".d-del").inner_text().strip() == "-    mda.lo.s32 %r4, %r2, 256, %r3;"
    assert turn2.locator(".d-add").inner_text().strip() == "+    mad.lo.s32 %r4, %r2, 256, %r3;"
    turn5 = page.locator("#turn-5 .diffs")
    assert turn5.locator(".diff-view").inner_text().strip() == "Same source as turn 4."
    turn5.locator("select").select_option("1")  # an earlier turn, on request
    assert turn5.locator(".diff-view .d-add").count() == 1


def test_a_folded_answer_is_parsed_only_when_opened(site: Path, page) -> None:
    page.goto((site / "runs" / "bench" / "big.html").as_uri())
    count = "() => document.querySelectorAll('*').length"
    before = page.evaluate(count)
    assert before < 2000
    source = page.locator("#turn-1 details.lazy", has_text="PTX source")
    assert "20,007 lines · folded" in source.locator("summary").inner_text()
    source.locator("summary").click()
    lines = source.locator("pre.gutter").inner_text().split()
    assert len(lines) == 20_007 and lines[-1] == "20007"
    assert page.evaluate(count) > before + BIG_LINES  # the tokens' spans exist now


def test_hostile_output_stays_text(site: Path, page) -> None:
    page.goto((site / "runs" / "bench" / "hostile.html").as_uri())
    assert page.evaluate("document.scripts.length") == 1
    assert HOSTILE in page.locator("#turn-1").inner_text()
    page.locator("#turn-1 summary", has_text="the whole answer").click()
    assert page.locator("#turn-1").inner_text().count("<script>alert(1)</script>") >= 3


def hue(css: str) -> float:
    """The hue in degrees of a computed 'rgb(r, g, b)' colour."""
    r, g, b = (int(v) / 255 for v in css[css.index("(") + 1 : css.index(")")].split(",")[:3])
    return colorsys.rgb_to_hsv(r, g, b)[0] * 360


def test_status_colours_say_what_they_mean(site: Path, page) -> None:
    """Green passed; unverified its own colour (neither green nor red); every failure a red, never blue."""
    page.goto((site / "index.html").as_uri())
    background = "(e) => getComputedStyle(e).backgroundColor"
    legend = {
        b.get_attribute("class").split("st-")[1]: (b.inner_text(), b.evaluate(background))
        for b in page.locator("#legend .badge").all()
    }
    assert set(legend) == set(COLORS)
    assert 90 <= hue(legend["passed"][1]) <= 150
    assert 35 <= hue(legend["unverified"][1]) <= 60  # amber: not known
    for cls in ("mismatch", "timeout", "runtime", "abi", "compile", "format"):
        assert hue(legend[cls][1]) <= 20 or hue(legend[cls][1]) >= 340, (cls, legend[cls])
    assert legend["compile"][0] == "compile error"
    chip = page.locator("#grid a.chip.st-compile").first  # a run whose every turn failed to compile
    assert chip.locator("b").inner_text() == "compile error"
    assert chip.evaluate(background) == legend["compile"][1]


def test_long_feedback_lines_wrap(site: Path, page) -> None:
    page.goto((site / "runs" / "bench" / "big.html").as_uri())
    feedback = page.locator("#turn-1 details.fold", has_text="feedback").locator("pre.src")
    assert feedback.evaluate("(e) => getComputedStyle(e).whiteSpace") == "pre-wrap"
    width, scroll, height = feedback.evaluate("(e) => [e.clientWidth, e.scrollWidth, e.clientHeight]")
    assert scroll <= width <= 1280 and height > 5 * 16  # wrapped onto many lines, nothing hidden to the right
    assert feedback.inner_text().replace("\n", "") == LONG_FEEDBACK
    source = page.locator("#turn-1 details.lazy", has_text="PTX source")
    source.locator("summary").click()
    assert source.locator("pre.src").evaluate("(e) => getComputedStyle(e).whiteSpace") == "pre"  # one line, one number


@pytest.fixture(scope="module")
def tools_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page of a tools-mode run of today's loop (test_inspect.py's tools_run)."""
    folder = tools_run(tmp_path_factory.mktemp("tools") / "runs")
    out = tmp_path_factory.mktemp("tools-site")
    build_site(folder, out)
    return out


def test_a_tools_runs_steps_render_and_open(tools_site: Path, page) -> None:
    page.goto((tools_site / "index.html").as_uri())
    assert page.locator("section.steps div.step").count() == 3
    assert "submitted at step 3" in page.locator("#tools-outcome").inner_text()
    refused = page.locator("#step-1-call-0")
    assert refused.locator("span.verdict").inner_text() == "bad_arguments"
    assert "are not JSON" in refused.inner_text()  # a refused call's one line is shown open
    submit = page.locator("#step-3-call-0")
    assert "Submitted: the run ends with this answer." not in submit.inner_text()  # folded until opened
    submit.locator("summary", has_text="result").click()
    assert "Submitted: the run ends with this answer." in submit.inner_text()
    assert page.locator("#turn-1").count() == 1 and not page.errors and not page.outside
