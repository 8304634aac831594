"""What every page shares: the workspace, the LLM settings, the open workflow and the status panels.

A plain module (not a page): app.py lists the pages explicitly, so nothing here is auto-discovered.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import streamlit as st

from flowcore import library, settings_store
from flowcore.llm import LLMSettings, public_url
from flowcore.storage import Workspace

APP_PATH = Path(__file__).resolve().parent.parent / "app.py"

# Streamlit starts in its old "pages/ directory" mode because a pages/ folder exists, and stays in it until
# app.py calls st.navigation. In that mode a visit straight to /editor runs pages/editor.py alone: no
# navigation, no page config, an auto-discovered sidebar. (AppTest re-enters that mode on every run.)


def _in_pages_directory_mode() -> bool:
    from streamlit.runtime.pages_manager import PagesManager

    return bool(PagesManager.uses_pages_directory)


def app_shell() -> None:
    """Call first thing in every page: when Streamlit ran the page on its own, run app.py instead (its
    navigation then runs this page inside the app) and stop the lone run. No rerun, so clicks survive."""
    if _in_pages_directory_mode():
        from streamlit.runtime.pages_manager import PagesManager

        PagesManager.uses_pages_directory = False
        runpy.run_path(str(APP_PATH), run_name="__main__")
        st.stop()


if _in_pages_directory_mode():  # first import in this process: leave the mode, start again from app.py
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False
    st.rerun()

DB_ENV = "MERMAIDFLOW_DB"
KEY_STATE = "llm_api_key"  # the key typed on the Settings page: session memory only, never written anywhere
DEFAULT_EXAMPLE = "math_seed"


def db_path() -> Path:
    return Path(os.environ.get(DB_ENV) or "workspace.db").resolve()


@st.cache_resource(show_spinner=False)
def _workspace(path: str) -> Workspace:
    return Workspace(path)


def workspace() -> Workspace:
    return _workspace(str(db_path()))


def llm_settings() -> LLMSettings:
    """Environment, overlaid by the saved public settings, overlaid by the key typed this session.
    Problems (a bad environment variable, unreadable saved settings) are shown, never raised."""
    try:
        env = LLMSettings.from_env()
    except ValueError as e:
        st.warning(f"Ignoring the LLM environment settings: {e}")
        env = LLMSettings()
    merged = env.to_public_dict()
    try:
        saved = settings_store.load_llm_settings(workspace()) or {}
    except settings_store.SettingsError as e:
        st.warning(str(e))
        saved = {}
    merged.update({k: v for k, v in saved.items() if v not in (None, "") or k == "budget_usd"})
    key = st.session_state.get(KEY_STATE) or env.api_key
    try:
        return LLMSettings.from_public_dict(merged, api_key=key)
    except ValueError as e:
        st.warning(f"Ignoring the saved LLM settings: {e}")
        return LLMSettings.from_public_dict(env.to_public_dict(), api_key=key)


# -- the open workflow, shared by Editor, Run, Export and Evolve ------------------------------------------

def _default_workflow() -> dict:
    for name, task, text in library.examples():
        if name == DEFAULT_EXAMPLE:
            return {"text": text, "task": task, "name": name}
    return {"text": "flowchart TD\n", "task": "math", "name": "untitled"}


def current_workflow() -> dict:
    """{"text", "task", "name"} of the workflow open in the Editor (an example until one is chosen)."""
    if "mf_text" not in st.session_state:
        d = _default_workflow()
        st.session_state.update(mf_text=d["text"], mf_task=d["task"], mf_name=d["name"], mf_rev=0)
    return {"text": st.session_state["mf_text"], "task": st.session_state["mf_task"],
            "name": st.session_state.get("mf_name") or "untitled"}


def set_current_workflow(text: str, task: str | None = None, name: str | None = None, *,
                         from_editor: bool = False) -> None:
    """Open ``text`` as the current workflow. Unless the change came from the editor itself, the editor
    widgets are rebuilt (``mf_rev``) so they show it."""
    current_workflow()
    st.session_state["mf_text"] = text
    if task is not None:
        st.session_state["mf_task"] = task
    if name is not None:
        st.session_state["mf_name"] = name
    if not from_editor:
        st.session_state["mf_rev"] = st.session_state.get("mf_rev", 0) + 1


def editor_rev() -> int:
    current_workflow()
    return int(st.session_state.get("mf_rev", 0))


# -- status ---------------------------------------------------------------------------------------------

def llm_banner(settings: LLMSettings | None = None) -> bool:
    """Say plainly when no endpoint is configured; returns whether one is."""
    settings = settings or llm_settings()
    if not settings.configured:
        st.info("**No LLM endpoint is configured.** Set `OPENAI_BASE_URL` (any OpenAI-compatible server) "
                "and/or `OPENAI_API_KEY`, or enter them on the Settings page. Editing, checking, drawing, "
                "exporting and replaying cached runs work without one.", icon=":material/cloud_off:")
    return settings.configured


def sidebar_status() -> None:
    settings = llm_settings()
    with st.sidebar:
        st.caption(f"Workspace: `{db_path()}`")
        if settings.configured:
            st.caption(f"LLM endpoint: `{public_url(settings.base_url)}` · "
                       f"executor `{settings.models['executor']}`")
        else:
            st.caption("LLM endpoint: not configured")
