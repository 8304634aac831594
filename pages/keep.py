"""What a page switch and a reload keep (a plain module, not a page): each form's values, and each page's own
state per browser through the workspace (flowcore.workspace.drafts.save_page_state).

Streamlit forgets a widget's value when its page is not shown, and a reload is a new session: app.py calls
:func:`restore_page_state` and :func:`keep_form_values` before the page runs, :func:`sync_page_state` after."""

from __future__ import annotations

import re

import streamlit as st

from flowcore.workspace import drafts
from pages.common import browser_id, md, workspace


def keep_form_values() -> None:
    """Streamlit forgets a widget's value when its page is not shown; writing it back keeps each form as the
    user left it. Only value widgets: a button's or an uploader's state cannot be written."""
    for k in list(st.session_state):
        if isinstance(k, str) and FORM_KEYS.match(k):
            st.session_state[k] = st.session_state[k]


FORM_KEYS = re.compile(r"^(run_(mode|source|limit|conc|bench_\w+|problem_text|entry|reference|pick)|evo_(pick_seed|"
                       r"bench_\w+|limit|rounds|k|alpha|lam|topk|budget|seed|ops|mode|review|val_rounds|test_top|test_limit|"
                       r"search|remeasure|more)|"
                       r"hist_(status|ops|min|pinned|tab)|ex_pick|ed_(text_width|live_hard|canvas)|"
                       r"cmp_(task|split|limit|repeats|conc|bench_\w+|pick_\w+|view|new_open)|"
                       r"aov_(source|example_set|paste|task|taskset|gen_k|agents|inspector|repairs|mode|refine))$")


# -- each page's state, kept per browser (flowcore.workspace.drafts.save_page_state) ---------------------------
# What a page switch keeps (keep_form_values) a reload keeps too: the form values above, the Run page's result,
# the evaluation, comparison and run shown, the AOV candidates. Stored after a run that changed them, restored
# once when a browser session starts (before any widget is drawn); a page may then overrule them (a running job).

KEPT_KEYS = re.compile(r"^(run_(one_result|show_eval)|hist_(run|round_\d+)|cmp_show|evo_last_run|aov_cands)$")
PAGE_OF = {"run": "run", "evo": "evolve", "hist": "history", "cmp": "compare", "aov": "aov", "ed": "editor",
           "ex": "export"}
_STATE_SYNCED = "mf_page_synced"
_RESTORED = "mf_page_restored"  # the values restore_page_state set, by key, until a page fails on one
_DROPPED = "mf_page_dropped"  # why they were dropped, for the note on the next run


def _encode(value: object) -> object:
    """A session value as JSON (a tuple marked, to come back as one); TypeError for anything else."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value) and "__tuple__" not in value:
        return {k: _encode(v) for k, v in value.items()}
    raise TypeError(type(value).__name__)


def _decode(value: object) -> object:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"__tuple__"} and isinstance(value["__tuple__"], list):
            return tuple(_decode(v) for v in value["__tuple__"])
        return {k: _decode(v) for k, v in value.items()}
    return value


def page_states() -> dict[str, dict]:
    """This session's state of each page, as JSON values (what :func:`sync_page_state` stores)."""
    out: dict[str, dict] = {}
    for k in list(st.session_state):
        if not isinstance(k, str) or not (FORM_KEYS.match(k) or KEPT_KEYS.match(k)):
            continue
        value = st.session_state[k]
        if k == "aov_cands":
            from flowcore.aov.session import candidates_state

            value = candidates_state(value or [])
        try:
            out.setdefault(PAGE_OF[k.split("_", 1)[0]], {})[k] = _encode(value)
        except (TypeError, KeyError):  # an uploaded file, a date: not kept
            continue
    return out


def restore_page_state() -> None:
    """Once per browser session, before any page is drawn: each page as this browser left it (a reload)."""
    ss = st.session_state
    if ss.get("mf_state_restored"):
        return
    ss["mf_state_restored"] = True
    try:
        stored = drafts.load_page_state(workspace(), browser_id())
    except Exception:  # noqa: BLE001 - a busy or damaged workspace: the pages open as new
        return
    restored: dict[str, object] = {}
    for page in stored.values():
        for k, v in page.items():
            if not isinstance(k, str) or k in ss or not (FORM_KEYS.match(k) or KEPT_KEYS.match(k)):
                continue
            value = _decode(v)
            if k == "aov_cands":
                from flowcore.aov.session import candidates_from_state

                value = candidates_from_state(value)
                ss["aov_gen"] = ss.get("aov_gen", 0) + 1
            ss[k] = restored[k] = value
    ss[_STATE_SYNCED] = stored
    ss[_RESTORED] = restored


def forget_restored(error: Exception) -> bool:
    """A page failed with ``error``: whether a value :func:`restore_page_state` set is still unchanged (the page
    may have failed on it: an older app's value, a run since deleted, a hand-edited row). Those values are then
    dropped, from this session and from what is kept for this browser, for the page to rerun without them. The
    workspace is a store like any other: what comes back from it is not trusted to fit a widget or a page."""
    ss = st.session_state
    restored = ss.pop(_RESTORED, None) or {}
    unfit = {k for k, v in restored.items() if k in ss and _same(ss[k], v)}
    if not unfit:
        return False
    for k in unfit:
        del ss[k]
    stored = ss.get(_STATE_SYNCED) or {}
    for page, state in stored.items():
        if unfit & set(state):
            stored[page] = {k: v for k, v in state.items() if k not in unfit}
            try:
                drafts.save_page_state(workspace(), browser_id(), page, stored[page])
            except Exception:  # noqa: BLE001 - a busy workspace: the next reload drops them again
                pass
    ss[_DROPPED] = f"{type(error).__name__}: {error}"
    return True


def _same(current: object, restored: object) -> bool:
    try:
        return bool(current is restored or current == restored)
    except Exception:  # noqa: BLE001 - a value whose comparison fails is not known to be unchanged
        return False


def dropped_note() -> None:
    """Say once that the state kept of the pages was set aside (after :func:`forget_restored`)."""
    why = st.session_state.pop(_DROPPED, None)
    if why:
        st.warning(f"The state this browser kept of its pages (from an earlier visit) could not be used, so they "
                   f"open as new: {md(why)}", icon=":material/restart_alt:")


def sync_page_state() -> None:
    """After each run: store the pages whose state changed since they were last stored."""
    ss = st.session_state
    synced = ss.setdefault(_STATE_SYNCED, {})
    for page, state in page_states().items():
        if synced.get(page) == state:
            continue
        try:
            drafts.save_page_state(workspace(), browser_id(), page, state)
        except Exception as e:  # noqa: BLE001 - a read-only or busy workspace must not break the page
            if not ss.get("mf_state_warned"):
                ss["mf_state_warned"] = True
                st.toast(f"This page's state could not be kept for a reload: {md(e)}")
            continue
        synced[page] = state
