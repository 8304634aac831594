"""The Editor's Prompts section (a plain module, not a page): a text box per prompt the workflow names, in a box
built only when opened (it opens by itself while a prompt is missing). An edit here rewrites the text."""

from __future__ import annotations

import hashlib

import streamlit as st

from flowcore.mermaid import safe
from flowcore.model import Workflow
from flowcore.ui import canvas as cv
from flowcore.ui.words import count
from pages import common


def prompt_key(name: str, text: str) -> str:
    return f"ed_prompt_{name}_{hashlib.sha1(text.encode()).hexdigest()[:10]}"


def prompt_forms(w: Workflow, text: str, names: list[str]) -> None:
    """A text box per prompt (the text's ``%% @prompt`` lines): an edit here rewrites the text."""
    if len(names) > 12:  # one text box per prompt would be thousands of widgets
        names = [st.selectbox(f"Prompt to edit ({len(names):,})", names, key="ed_prompt_pick")]
    for name in names:
        users = cv.prompt_users(w, name)
        label = f"`{name}` — used by {', '.join(users[:8])}{' …' if len(users) > 8 else ''}" if users \
            else f"`{name}` — not used by any node"
        current = w.prompts.get(name, "")  # keyed by the prompt's text: an edit in the editor above refreshes it
        value = st.text_area(label, value=current, key=prompt_key(name, current), height=80,
                             placeholder="Missing (M013): write the prompt here and press Ctrl+Enter to add it.")
        if name not in w.prompts:
            st.caption(f":orange[**M013**] prompt {safe.code(name)} is not defined yet; type it above to add it.")
        if value.strip() and value.strip() != w.prompts.get(name, "").strip():
            common.set_current_workflow(cv.set_prompt_text(text, name, value))
            st.rerun()


def prompts_section(w: Workflow, text: str, readable: bool) -> None:
    st.subheader("Prompts")
    names = cv.prompt_names(w)
    if not readable:
        st.caption("Fix the syntax error above to edit prompts here.")
    elif not names:
        st.caption("No node names a prompt. A Custom or CustomCodeGenerate node names one in its label, "
                   "e.g. `Custom<br/>(role: solver)`.")
    else:
        # the forms are built when the box is open (below the first screen, they cost its first paint a tenth of
        # a second); it opens by itself while a prompt is missing
        missing = sum(name not in w.prompts for name in names)
        box = st.expander(f"Edit the prompts here: {count(len(names), 'prompt')}"
                          + (f", :orange[{missing} missing]" if missing else ""), expanded=bool(missing),
                          key="ed_prompts", on_change="rerun", icon=":material/edit:")
        if box.open:
            with box:
                prompt_forms(w, text, names)
