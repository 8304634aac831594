"""When two people (or two tabs) edit the same thing: the panels that say what changed and offer one click to merge
or reload. A plain module the Editor calls (not a page); the storage layer decides (flowcore.workspace.library's
LibraryConflict, drafts.other_drafts)."""

from __future__ import annotations

import time
from collections.abc import Callable

import streamlit as st

from flowcore.workspace import drafts, library
from pages import common
from pages.common import md

ss = st.session_state
CONFLICT = "ed_conflict"


def refused(e: library.LibraryConflict) -> None:
    """Remember a save refused for a newer version, for the panel below (the page reruns after the callback)."""
    ss[CONFLICT] = e


def library_panel(live_text: Callable[[], str], flash: Callable[[str, str], None]) -> None:
    """Merge both changes (three-way from the version both started from), open theirs, or save mine on top."""
    e: library.LibraryConflict | None = ss.get(CONFLICT)
    if e is None:
        return
    ws = common.workspace()

    def merge() -> None:
        merged, clashes = e.merge(ws, live_text())
        if clashes:
            where = ", ".join(f"{a}–{b}" for a, b in clashes[:5])
            return flash("error", f"Both changed the same lines (lines {where} of version {e.base}): open version "
                                  f"{e.latest} or save yours on top of it.")
        ss.pop(CONFLICT, None)
        common.set_current_workflow(merged, name=e.name, version=e.latest)
        flash("info", f"Merged your changes with version {e.latest}: check the result, then save it.")

    def theirs() -> None:
        ss.pop(CONFLICT, None)
        text, task = library.load_workflow(ws, e.name, e.latest)
        common.set_current_workflow(text, task, e.name, version=e.latest)
        flash("info", f"Opened {e.name} version {e.latest}; your text was not saved.")

    def mine() -> None:
        ss.pop(CONFLICT, None)
        try:
            v = library.save_workflow(ws, e.name, live_text(), common.current_workflow()["task"], base_version=e.latest)
        except library.LibraryError as err:
            return flash("error", f"Not saved: {md(str(err))}")
        common.set_current_workflow(live_text(), name=e.name, version=v, from_editor=True)
        flash("success", f"Saved {e.name} as version {v} (version {e.latest} stays in its history).")

    st.warning(md(str(e)), icon=":material/group:")
    c = st.columns(3)
    c[0].button("Merge both changes", on_click=merge, key="ed_merge", type="primary")
    c[1].button(f"Open version {e.latest}", on_click=theirs, key="ed_theirs")
    c[2].button(f"Save mine as version {e.latest + 1}", on_click=mine, key="ed_mine")


def other_tabs_panel() -> None:
    """What this browser's other tabs are working on (each keeps its own draft): reopen one with a click."""
    wf = common.current_workflow()
    others = drafts.other_drafts(common.workspace(), common.browser_id(), common.tab_id(),
                                 drafts.OpenWorkflow(wf["name"], wf["task"], wf["text"], wf["version"]))
    if not others:
        return
    with st.expander(f"Unsaved work in other tabs of this browser ({len(others)})", icon=":material/tab:"):
        for i, (when, other) in enumerate(others[:drafts.MAX_TABS]):
            ago = max(0, int((time.time() - when) / 60))
            c = st.columns([4, 1], vertical_alignment="center")
            c[0].caption(f"**{md(other.name)}** · {md(other.task)} · {len(other.text.splitlines())} lines · {ago} min ago")
            c[1].button("Open", key=f"ed_other_{i}", on_click=common.set_current_workflow,
                        args=(other.text, other.task, other.name), kwargs={"version": other.version})
