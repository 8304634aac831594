"""Each page's state kept for a reload (pages/keep.py) is read back from the workspace: a kept value that no
longer fits its page (an older app's, a run since deleted, a hand-edited row) opens the page without it, with a
note, never a traceback; the row is cleaned so the next reload opens at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from flowcore.workspace import drafts
from flowcore.workspace.store import Workspace

APP = str(Path(__file__).resolve().parents[2] / "app.py")
pytestmark = pytest.mark.usefixtures("app_env")

# page (as kept), its file, what a page of this app once failed on: a widget's value or a kept result of a wrong type
UNFIT = [("run", "run", {"run_one_result": "zzz", "run_mode": "One problem"}),
         ("editor", "editor", {"ed_text_width": -7}),
         ("evolve", "evolve", dict.fromkeys(("evo_pick_seed", "evo_bench_math", "evo_ops", "evo_mode", "evo_more",
                                             "evo_rounds", "evo_k", "evo_limit", "evo_search", "evo_review"), -7)),
         ("compare", "compare", {"cmp_pick_math": -7})]


def _open(browser: str, page_file: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90)
    at.session_state["mf_browser"] = browser  # what this browser's cookie says
    at.run()
    at.switch_page(f"pages/{page_file}.py").run()
    return at


@pytest.mark.parametrize(("page", "page_file", "state"), UNFIT, ids=[u[0] for u in UNFIT])
def test_a_kept_value_that_no_longer_fits_opens_the_page_without_it(tmp_path, page, page_file, state):
    ws = Workspace(tmp_path / "ws.db")
    browser = drafts.new_browser_id()
    drafts.save_page_state(ws, browser, page, state)
    at = _open(browser, page_file)
    assert not at.exception, [e.value for e in at.exception]
    assert any("could not be used" in w.value for w in at.warning), [w.value for w in at.warning]
    kept = drafts.load_page_state(ws, browser).get(page, {})
    # the unfit value is no longer kept (the page may keep its own fresh value under the same key)
    assert all(kept.get(k) != v for k, v in state.items() if k != "run_mode"), kept
    again = _open(browser, page_file)  # a reload: no note, nothing to forget
    assert not again.exception and not any("could not be used" in w.value for w in again.warning)


def test_a_kept_value_that_fits_is_still_restored(tmp_path):
    ws = Workspace(tmp_path / "ws.db")
    browser = drafts.new_browser_id()
    drafts.save_page_state(ws, browser, "run", {"run_mode": "Benchmark", "run_limit": 7})
    at = _open(browser, "run")
    assert not at.exception and not at.warning
    assert at.radio(key="run_mode").value == "Benchmark" and at.number_input(key="run_limit").value == 7
