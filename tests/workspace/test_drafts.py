"""The open workflow's link and draft row (flowcore.workspace.drafts): round trips, what a link may hold, bad links."""

from __future__ import annotations

import base64
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowcore.workspace import drafts, library
from flowcore.workspace.drafts import DraftError, OpenWorkflow

SEED = dict((n, (t, x)) for n, t, x in library.examples())["math_seed"]


@given(st.text(max_size=2000))
@settings(max_examples=60, deadline=None)
def test_any_text_survives_the_link(text):
    code = drafts.encode_text(text)
    assert code.startswith("z:") and all(c.isalnum() or c in "-_:" for c in code)
    assert drafts.decode_text(code) == text


@pytest.mark.parametrize("code, words", [
    ("nope", "must start with 'z:'"),
    ("z:!!!!", "not URL-safe base64"),
    ("z:" + base64.urlsafe_b64encode(b"plain bytes").decode(), "does not decompress"),
    ("z:" + base64.urlsafe_b64encode(zlib.compress(b"x" * 1000)[:-6]).decode(), "incomplete"),
    ("z:" + base64.urlsafe_b64encode(zlib.compress("é".encode("latin-1"))).decode(), "not UTF-8"),
])
def test_bad_codes_say_what_is_wrong(code, words):
    with pytest.raises(DraftError, match=words):
        drafts.decode_text(code)


def test_a_zip_bomb_stops_at_the_size_cap():
    bomb = "z:" + base64.urlsafe_b64encode(zlib.compress(b"\0" * (drafts.MAX_TEXT_BYTES + 10), 9)).decode()
    assert len(bomb) < 30_000
    with pytest.raises(DraftError, match="larger than"):
        drafts.decode_text(bomb)


def test_links_are_short_for_what_the_name_says_and_carry_edits(ws):
    untouched = OpenWorkflow("math_seed", "math", SEED[1])
    assert drafts.to_params(ws, untouched) == {"wf": "math_seed", "task": "math"}
    assert drafts.saved_state(ws, untouched) == "example, unchanged"
    edited = OpenWorkflow("math_seed", "math", SEED[1] + "%% mine\n")
    params = drafts.to_params(ws, edited)
    assert drafts.from_params(ws, params) == edited
    assert drafts.saved_state(ws, edited) == "edited example, not saved yet"

    v = library.save_workflow(ws, "mine", SEED[1], "math")
    saved = OpenWorkflow("mine", "math", SEED[1], v)
    assert drafts.to_params(ws, saved) == {"wf": "mine", "task": "math", "v": "1"}
    assert drafts.from_params(ws, drafts.to_params(ws, saved)) == saved
    assert drafts.saved_state(ws, saved) == "saved as version 1"
    changed = OpenWorkflow("mine", "math", SEED[1] + "%% more\n", v)
    assert drafts.saved_state(ws, changed) == "unsaved changes to version 1"
    assert drafts.from_params(ws, drafts.to_params(ws, changed)) == changed
    assert drafts.from_params(ws, {"wf": "mine"}) == saved  # the latest version


def test_a_huge_text_stays_out_of_the_url_but_in_the_draft(ws):
    import random

    rnd = random.Random(1)
    text = "flowchart TD\n" + "".join(f"    N{i}[\"{rnd.random()}\"]\n" for i in range(4000))
    wf = OpenWorkflow("big", "math", text)
    assert "code" not in drafts.to_params(ws, wf)
    browser = drafts.new_browser_id()
    drafts.remember(ws, browser, wf, None)
    assert drafts.load_draft(ws, browser) == wf


@pytest.mark.parametrize("params, words", [
    ({"wf": "ghost"}, "neither saved in this workspace nor an example"),
    ({"wf": "mine", "v": "7"}, "version 7 is not in the workspace"),
    ({"wf": "mine", "v": "seven"}, "version 'seven' is not a number"),
    ({"wf": "math_seed", "task": "poetry"}, "task 'poetry' is not one of"),
    ({"code": "z:@@"}, "not URL-safe base64"),
])
def test_bad_links_name_the_parameter(ws, params, words):
    library.save_workflow(ws, "mine", SEED[1], "math")
    with pytest.raises(DraftError, match=words):
        drafts.from_params(ws, params)


def test_resolve_prefers_the_link_then_the_draft_then_the_default(ws):
    browser = drafts.new_browser_id()
    assert drafts.resolve(ws, {}, browser) == (drafts.default_workflow(), None)
    mine = OpenWorkflow("scratch", "code", "flowchart LR\n", None)
    drafts.save_draft(ws, browser, mine)
    assert drafts.resolve(ws, {}, browser) == (mine, None)
    linked = OpenWorkflow("math_seed", "math", SEED[1] + "%% x\n")
    assert drafts.resolve(ws, drafts.to_params(ws, linked), browser) == (linked, None)
    wf, problem = drafts.resolve(ws, {"wf": "ghost"}, browser)
    assert wf == mine and "could not be opened" in problem and "ghost" in problem
    assert drafts.resolve(ws, {}, drafts.new_browser_id())[0] == drafts.default_workflow()  # another browser


def test_browser_ids_are_checked(ws):
    with pytest.raises(DraftError, match="32 hexadecimal"):
        drafts.save_draft(ws, "../../etc", OpenWorkflow("a", "math", "x"))
    assert drafts.load_draft(ws, "' OR 1=1 --") is None
    browser = drafts.new_browser_id()
    drafts.save_draft(ws, browser, OpenWorkflow("a", "math", "x"))
    drafts.forget_draft(ws, browser)
    assert drafts.load_draft(ws, browser) is None


def test_a_text_holding_the_api_key_is_kept_out_of_the_draft_and_the_link(ws):
    key = "sk-test-0123456789abcdef"
    leaky = OpenWorkflow("leaky", "math", f"flowchart TD\n  %% {key}\n  PROBLEM --> RETURN")
    assert drafts.remember(ws, "b" * 32, leaky, None, api_key=key) is None
    assert drafts.load_draft(ws, "b" * 32) is None
    clean = OpenWorkflow("clean", "math", "flowchart TD\n  PROBLEM --> RETURN")
    assert drafts.remember(ws, "b" * 32, clean, None, api_key=key) is not None
    assert drafts.load_draft(ws, "b" * 32) == clean


# -- each page's own state ----------------------------------------------------------------------------------------

def test_page_state_round_trips_per_browser_and_page(any_ws):
    ws = any_ws  # SQLite and PostgreSQL
    me, other = drafts.new_browser_id(), drafts.new_browser_id()
    drafts.save_page_state(ws, me, "run", {"run_mode": "Benchmark", "run_limit": 20, "run_pick": {"__tuple__": ["current", ""]}})
    drafts.save_page_state(ws, me, "history", {"hist_run": 3})
    drafts.save_page_state(ws, me, "run", {"run_mode": "One problem"})  # the latest state of a page wins
    drafts.save_page_state(ws, other, "run", {"run_mode": "Benchmark"})
    assert drafts.load_page_state(ws, me) == {"run": {"run_mode": "One problem"}, "history": {"hist_run": 3}}
    assert drafts.load_page_state(ws, "not-a-browser") == {}
    drafts.forget_draft(ws, me)
    assert drafts.load_page_state(ws, me) == {} and drafts.load_page_state(ws, other) != {}


@pytest.mark.parametrize("browser, page, state, words", [
    ("nope", "run", {}, "32 hexadecimal digits"),
    (None, "Run Page", {}, "short lower-case identifier"),
    (None, "run", {"x": object()}, "run page's state cannot be stored"),
    (None, "run", {"x": float("nan")}, "cannot be stored"),
    (None, "aov", {"x": "y" * (drafts.MAX_STATE_BYTES + 1)}, "larger than 512 KB"),
])
def test_page_state_refuses_what_it_cannot_keep(tmp_path, browser, page, state, words):
    from flowcore.workspace.store import Workspace

    ws = Workspace(tmp_path / "ws.db")
    b = browser or drafts.new_browser_id()
    with pytest.raises(DraftError, match=words):
        drafts.save_page_state(ws, b, page, state)
    assert drafts.load_page_state(ws, b) == {}  # nothing half-written
