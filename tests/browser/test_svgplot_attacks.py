"""The charts drawn on the server (flowcore/ui/svgplot.py) as Chromium shows them, against a real
`streamlit run app.py`, from rows a team member could have stored: edit names with every kind of line break, a
NUL, markup, `-->`/CDATA, and the words Streamlit's frontend rewrites or scans before it parses markdown (raw HTML
included: `:material/`, `$…$`, `:smile:`); scores of 150%, -40% and inf, costs of inf and below zero.

History and Evolve must show each name exactly as stored (one line), load nothing from another host and nothing
the names asked for (no KaTeX, no emoji plugin), see no policy violation, draw every point inside its picture with
numbers for coordinates, and raise nothing."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from flowcore.evolution import History
from flowcore.ui.words import edit_name
from flowcore.workspace.store import Workspace

from .conftest import CSP_RECORD, _stop, csp_violations, new_context, no_exceptions, start_app, wait_for_app

pytestmark = pytest.mark.browser

EVIL = "img.evil.invalid"
SEED = "flowchart TD\n    P([PROBLEM]) --> R([RETURN])"
# round -> (operator, status, score, cost)
ROUNDS = {
    0: ("seed", "ok", 0.5, 0.01),
    1: ("prompt:the :material/star: kind, $x^2$ and $$y$$, :smile: :red[r] **b**", "ok", 0.6, 0.02),
    2: (f"x:a\nb\r\nc\u2028d\u2029e\x85f\x0cg\x00h <img src='http://{EVIL}/n.png'> --> <![CDATA[ i ]]> &amp;",
        "ok", 1.5, 0.03),
    3: ("insert:review_revise", "ok", float("inf"), 0.04),  # a score that is no number: not measured
    4: ("delete", "failed", None, 0.0),
    5: ("rewire", "ok", -0.4, -1.0),  # below the axis, a negative cost
    6: ("prompt", "ok", 0.7, float("inf")),  # a cost that is no number: off the cost chart only
}
SHOWN = [r for r, (_, status, score, _) in ROUNDS.items() if status == "ok" and abs(score) != float("inf")]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    served = start_app(tmp_path_factory.mktemp("svgplot_attacks"))
    h = History(Workspace(served.db_path))
    run = h.create_run({"mode": "llm", "candidates": 2}, "svgplot-attacks", SEED, "gsm8k", "math", offline=False)
    for rnd, (op, status, score, cost) in ROUNDS.items():
        h.add_round(run, {"round": rnd, "workflow_text": SEED, "parents": [0] if rnd else [], "status": status,
                          "operator": op, "score": score, "cost": cost})
    h.set_status(run, "finished")
    yield served
    _stop(served.process)


# every mark's geometry, and whether it lies inside its picture
GEOMETRY_JS = """(svg) => {
  const [, , w, h] = svg.getAttribute('viewBox').split(' ').map(Number);
  const bad = [];
  for (const e of svg.querySelectorAll('*'))
    for (const a of ['x', 'y', 'x1', 'x2', 'y1', 'y2', 'cx', 'cy', 'points', 'd', 'transform'])
      if (/nan|inf/i.test(e.getAttribute(a) || '')) bad.push(`${e.tagName} ${a}=${e.getAttribute(a)}`);
  for (const c of svg.querySelectorAll('g.mf-point circle')) {
    const x = +c.getAttribute('cx'), y = +c.getAttribute('cy');
    if (!(x >= 0 && x <= w && y >= 0 && y <= h)) bad.push(`outside: ${x},${y}`);
  }
  return bad;
}"""


def test_hostile_rows_are_drawn_as_stored_and_load_nothing(browser, app):
    context = new_context(browser)
    context.add_init_script(CSP_RECORD)
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    violations: list[str] = []
    try:
        for path in ("/history", "/evolve"):
            page.goto(app.url + path, wait_until="domcontentloaded")
            wait_for_app(page)
            curve = page.locator("svg.mf-plot").filter(has_text="Validation score per round")
            expect(curve).to_have_count(1)
            tips = curve.locator('g.mf-point[data-series="score per round"] title')
            expect(tips).to_have_count(len(SHOWN))
            for rnd, tip in zip(SHOWN, tips.all_text_contents(), strict=True):
                want = " ".join(edit_name(ROUNDS[rnd][0]).split()).replace("\x00", "\ufffd")
                assert tip == f"round {rnd} · score {100 * ROUNDS[rnd][2]:.1f}% · {want}"
            plots = page.locator("svg.mf-plot")
            expect(plots).to_have_count(2 if path == "/history" else 1)
            for svg in plots.all():
                assert svg.evaluate(GEOMETRY_JS) == []
                assert svg.locator("img, script, a, foreignObject, style").count() == 0
            if path == "/history":
                cost = plots.filter(has_text="Cost vs score")
                data = cost.locator("g.mf-point").evaluate_all(
                    "gs => gs.map((g) => [+g.dataset.x, +g.dataset.y])")
                assert data == [[ROUNDS[r][3], 100 * ROUNDS[r][2]] for r in SHOWN if r != 6]
            for svg in plots.all():  # one raw HTML block: nothing beside the drawing in its markdown
                assert svg.evaluate("s => [s.parentElement.dataset.testid, s.parentElement.children.length]") \
                    == ["stMarkdownContainer", 1]
            assert no_exceptions(page) == []
            violations += csp_violations(page)
    finally:
        context.close()
    off_host = [u for u in requests if urlsplit(u).hostname not in ("127.0.0.1", "localhost", None)
                and not u.startswith(("data:", "blob:", "about:"))]
    assert off_host == [] and violations == []
    scanned = [u for u in requests if re.search("katex|emoji", u, re.I)]
    assert scanned == [], f"the names' $…$ or :word: made Streamlit load {scanned}"
