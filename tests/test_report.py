"""fakplan report (issue 19), loaded in a real Chromium through Playwright.

The page is built from the bundled shapes and from records with held and killed
verdicts (a vLLM shape sizing its own pool, verified against llm-d-planner's real
0.19.0 boots). The browser must show every shape, gate and verdict, draw each bar
segment in proportion to its bytes, fit a phone's width, log no console error and make
no request but the page itself. Screenshots at both widths go to $FAKPLAN_ARTIFACTS
(.ci/run keeps them), else the test's folder. Chromium comes from Debian's package.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from tests.support.paths import IN_CI, PUBLIC, ROOT

PROFILER = PUBLIC / "profiler"
WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}

SIZED = """name: {name}
engine: vllm
engine_version: "0.19.0"
model: {model}
card: {{total: 79.19 GiB, sms: 132}}
serving:
  max_num_seqs: 1024
  max_model_len: 8192
  max_num_batched_tokens: 8192
  prefix_caching: false
  gpu_memory_utilization: {fraction}
"""
# markup that must stay text, then a path with no break opportunity a phone must still fit
HOSTILE_MODEL = (
    '<img src="http://127.0.0.1:9/x.png" onerror="document.title=1">'
    + "/deep" * 8
    + "/"
    + "w" * 60
    + "/config.json"
)


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if IN_CI:
            pytest.fail("CI renders the report in the real Chromium: apt-get install chromium")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The report of the bundled shapes, two engine-sized shapes with verdicts (held at
    the fraction the boots ran, killed at another) and a custom shape with a hostile model."""
    folder = tmp_path_factory.mktemp("report")
    shapes = folder / "shapes"
    shutil.copytree(ROOT / "shapes", shapes)
    model = json.dumps(
        str(PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json")
    )
    (shapes / "llama-held.yaml").write_text(
        SIZED.format(name="llama-held", model=model, fraction=0.95)
    )
    (shapes / "llama-killed.yaml").write_text(
        SIZED.format(name="llama-killed", model=model, fraction=0.9)
    )
    hostile = (ROOT / "shapes" / "frank-archon.yaml").read_text()
    hostile = hostile.replace("name: frank-archon\n", "name: hostile-model\n")
    hostile = hostile.replace("model: Qwen3.8-Flash-Next w4", f"model: '{HOSTILE_MODEL}'")
    assert HOSTILE_MODEL in hostile
    (shapes / "hostile-model.yaml").write_text(hostile)
    out = folder / "out"
    assert _cli("compile", str(shapes), "-o", str(out)).exit_code in (0, 1)
    for shape, log in (
        ("llama-held", "prof-001"),
        ("llama-held", "prof-005"),
        ("llama-killed", "prof-001"),
    ):
        result = _cli(
            "verify",
            str(shapes / f"{shape}.yaml"),
            "--ledger",
            str(PROFILER / f"{log}.log"),
            "-o",
            str(out),
        )
        assert result.exit_code in (0, 1), result.output
    page = folder / "report.html"
    result = _cli("report", str(shapes), "--records", str(out), "-o", str(page))
    assert result.exit_code == 0, result.output
    plans = {p["name"]: p for p in (json.loads(f.read_text()) for f in out.glob("*/plan.json"))}
    statuses = {
        v["status"] for p in plans.values() for pr in p["predictions"] for v in pr["verdicts"]
    }
    assert {"held", "killed"} <= statuses  # the page has both to show
    return {"page": page, "plans": plans}


def _artifacts(fallback: Path) -> Path:
    folder = Path(os.environ.get("FAKPLAN_ARTIFACTS") or fallback)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def browser(chromium: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def _open(
    browser: Any, page_path: Path, width: int, height: int
) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport={"width": width, "height": height})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r: Any) -> None:
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            requests.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(page_path.as_uri())
    return page, errors, requests


@pytest.mark.parametrize("form", list(WIDTHS))
def test_the_report_in_a_real_browser(
    form: str, built: dict[str, Any], browser: Any, tmp_path: Path
) -> None:
    width, height = WIDTHS[form]
    page, errors, requests = _open(browser, built["page"], width, height)
    for name, plan in built["plans"].items():
        section = page.locator(f'section.shape[data-shape="{name}"]')
        assert section.count() == 1, name
        for gate in plan["gates"]:
            row = section.locator(f'tr[data-gate="{gate["id"]}"]')
            assert row.get_attribute("data-status") == gate["status"], (name, gate["id"])
            assert gate["status"] in row.inner_text()
        for prediction in plan["predictions"]:
            shown = section.locator(f'tr[data-prediction="{prediction["id"]}"] li.verdict')
            expected = [v["status"] for v in reversed(prediction["verdicts"])]  # most recent first
            assert [
                shown.nth(i).get_attribute("data-status") for i in range(shown.count())
            ] == expected
        # every segment, the card and the weights needed are drawn to one scale: the card,
        # or more where the plan runs past it (issue 26: a pair over the card was clipped)
        whole = section.locator("svg.bar").bounding_box()
        scale = int(section.get_attribute("data-scale"))
        total = plan["card_total_bytes"]
        assert scale >= max(total, plan["pair_bytes"])
        card = float(section.locator('rect[data-key="card"]').get_attribute("width") or "0")
        assert abs(card - total / scale * 1000) <= 0.01, name  # in the bar's 1,000 units
        for i in range(section.locator("rect.segment").count()):
            rect = section.locator("rect.segment").nth(i)
            box = rect.bounding_box()
            share = int(rect.get_attribute("data-bytes")) / scale
            assert abs(box["width"] - share * whole["width"]) <= 1.0, (
                name,
                rect.get_attribute("data-key"),
            )
            assert box["x"] + box["width"] <= whole["x"] + whole["width"] + 1.0
        # a contract past the bar is pinned to its end and said to be not to scale
        contract_end = plan["weights_budget_bytes"] + plan["contract_bytes"]
        marked = section.locator('li[data-key="contract"]').get_attribute("data-scale")
        assert (marked == "not to scale") is (contract_end > scale), name
        needed = section.locator("line.weights-needed")
        if needed.count():
            x = float(needed.get_attribute("x1") or "0") / 1000 * whole["width"]
            weights = int(needed.get_attribute("data-bytes") or "0")
            assert abs(x - weights / scale * whole["width"]) <= 1.0, name
    # the hostile model is text on the page, never an element (and so never fetched)
    assert HOSTILE_MODEL in page.locator('section[data-shape="hostile-model"]').inner_text()
    assert page.title() == "fakplan capacity report"
    # readable at this width: nothing wider than the viewport, the bar inside it
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    for box in (
        page.locator("svg.bar").nth(i).bounding_box()
        for i in range(page.locator("svg.bar").count())
    ):
        assert box["x"] >= 0 and box["x"] + box["width"] <= width
    shot = _artifacts(tmp_path) / f"report-{form}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert errors == [] and requests == []


def test_the_fleet_table_sorts(built: dict[str, Any], browser: Any) -> None:
    page, errors, _ = _open(browser, built["page"], 1280, 900)
    page.locator('#fleet button[data-sort="unclaimed"]').click()
    values = page.eval_on_selector_all(
        "#fleet tbody tr",
        "rows => rows.map(r => r.dataset.unclaimed === '' ? -Infinity : Number(r.dataset.unclaimed))",
    )
    assert values == sorted(values, reverse=True)
    page.locator('#fleet button[data-sort="failing"]').click()
    failing = page.eval_on_selector_all(
        "#fleet tbody tr", "rows => rows.map(r => Number(r.dataset.failing))"
    )
    assert failing == sorted(failing, reverse=True) and failing[0] >= 1
    assert errors == []


def test_a_shape_that_does_not_load_is_marked_and_the_rest_render(
    tmp_path: Path, browser: Any
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nengine: vllm\n")
    page_path = tmp_path / "r.html"
    result = CliRunner().invoke(
        main, ["report", str(bad), str(ROOT / "shapes" / "example.yaml"), "-o", str(page_path)]
    )
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"{bad}:")
    page, errors, requests = _open(browser, page_path, 1280, 900)
    assert page.locator("section.shape.error").count() == 1
    assert str(bad) in page.locator("section.shape.error").inner_text()
    assert page.locator('section.shape[data-shape="example"]').count() == 1
    assert errors == [] and requests == []


def test_an_unreadable_record_is_one_line_and_a_marked_section(
    tmp_path: Path, browser: Any
) -> None:
    out = tmp_path / "out"
    assert _cli("compile", str(ROOT / "shapes"), "-o", str(out)).exit_code in (0, 1)
    broken = out / "example" / "plan.json"
    broken.write_text("{not json")
    page_path = tmp_path / "r.html"
    result = CliRunner().invoke(
        main, ["report", str(ROOT / "shapes"), "--records", str(out), "-o", str(page_path)]
    )
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert str(broken) in line
    page, errors, _ = _open(browser, page_path, 1280, 900)
    assert page.locator("section.shape.error").count() == 1
    others = len(list((ROOT / "shapes").glob("*.yaml"))) - 1
    assert page.locator("section.shape[data-shape]").count() == others  # the other bundled
    assert errors == []


def test_the_last_change_in_words_where_git_has_it(tmp_path: Path) -> None:
    """A shape committed twice: the page says what the second commit moved."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    shape = repo / "example.yaml"
    text = (ROOT / "shapes" / "example.yaml").read_text()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    shape.write_text(text)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=repo, check=True)
    assert "max_num_seqs: 2" in text
    shape.write_text(text.replace("max_num_seqs: 2", "max_num_seqs: 1"))
    subprocess.run([*git, "commit", "-qam", "two"], cwd=repo, check=True)
    page_path = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", str(shape), "-o", str(page_path)])
    assert result.exit_code == 0, result.output
    html = page_path.read_text()
    assert "last change" in html and "serving.max_num_seqs: 2 -&gt; 1" in html


# ------------------------------------------- shapes over the card (issue 26)

OVER_CARD = """name: {name}
engine: vllm
engine_version: 0.19.0
model: {model}
card: {{total: {card}}}
budget: {{weights: {weights}, kv: {kv}}}
serving: {{max_num_seqs: 4, max_model_len: {window}, kv_cache_dtype: auto}}
"""


def test_a_plan_over_its_card_is_drawn_to_scale_and_failed(
    chromium: str, browser: Any, tmp_path: Path
) -> None:
    """Issue 26: the report showed "failing gates 0" for a pair larger than the card,
    clipped the KV bar to the card without saying so, and drew a 70B model's 16 GiB
    weights budget as if it fitted. Now the pair gate fails, the bar widens to hold the
    pair (the card's end marked, "past the card" said), and the weights the model needs
    are a marker beside the budget."""
    shapes = tmp_path / "shapes"
    shapes.mkdir()
    (shapes / "nosms.yaml").write_text(
        OVER_CARD.format(
            name="nosms",
            model="meta-llama/Llama-3.1-8B-Instruct",
            card="24 GiB",
            weights="15.5 GiB",
            kv="16 GiB",
            window=32768,
        )
    )
    (shapes / "big.yaml").write_text(
        OVER_CARD.format(
            name="big",
            model="meta-llama/Llama-3.1-70B-Instruct",
            card="22 GiB",
            weights="16 GiB",
            kv="1 GiB",
            window=1024,
        )
    )
    page_path = tmp_path / "report.html"
    result = _cli("report", str(shapes), "-o", str(page_path))
    assert result.exit_code == 0, result.output
    page, errors, requests = _open(browser, page_path, *WIDTHS["phone"])
    nosms = page.locator('#fleet tr[data-shape="nosms"]')
    assert nosms.get_attribute("data-failing") == "1"  # pair ≤ ceiling fails on the card
    assert nosms.get_attribute("data-slots") == "4"
    assert nosms.get_attribute("data-sessions") == "4"  # 4 x 32,768 tokens fit in 16 GiB
    section = page.locator('section[data-shape="nosms"]')
    # 15.5 + 16 = 31.5 GiB of pair on a 24 GiB card: the bar is 31.5 GiB wide
    assert int(section.get_attribute("data-scale") or "0") == int(31.5 * (1 << 30))
    card = float(section.locator('rect[data-key="card"]').get_attribute("width") or "0")
    assert abs(card - 24 / 31.5 * 1000) <= 0.01
    kv = section.locator('rect[data-key="kv"]')
    end = float(kv.get_attribute("x") or "0") + float(kv.get_attribute("width") or "0")
    assert abs(end - 1000) <= 0.01  # the pool drawn whole, past the card's end
    assert "7.50 GiB past the card" in section.inner_text()
    big = page.locator('section[data-shape="big"]')
    needed = int(big.locator("line.weights-needed").get_attribute("data-bytes") or "0")
    assert needed > 16 * (1 << 30)  # 70B parameters in bf16: far past the budget
    assert "past the weights budget" in big.locator('li[data-key="weights-needed"]').inner_text()
    assert int(big.get_attribute("data-scale") or "0") == needed
    # cells break between words at a phone's width: no word's letters on two lines
    broken = page.evaluate(
        """() => {
          const out = [];
          for (const cell of document.querySelectorAll('table td, table th')) {
            const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
              if (node.parentElement.closest('.path')) continue;
              const re = /[^\\s/-]+/g; let m;  // a hyphen or slash is a break too
              while ((m = re.exec(node.data))) {
                const range = document.createRange();
                range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
                const tops = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top)));
                if (tops.size > 1) out.push(m[0]);
              }
            }
          }
          return out;
        }"""
    )
    assert broken == []
    assert errors == [] and requests == []
