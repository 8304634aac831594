"""What every page shares: the workspace, the LLM settings, the open workflow and the status panels.

A plain module (not a page): app.py lists the pages explicitly, so nothing here is auto-discovered.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from typing import NoReturn

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from flowcore.execution import sandbox
from flowcore.llm.client import LLMSettings, public_url
from flowcore.mermaid import safe
from flowcore.ui import access, browser_cookie, endpoints, flash
from flowcore.workspace import drafts
from flowcore.workspace.store import Workspace, is_postgres

APP_PATH = Path(__file__).resolve().parent.parent / "app.py"

# A pages/ folder starts Streamlit in its old pages-directory mode (a visit to /editor runs pages/editor.py
# alone) until app.py leaves it. No Streamlit command runs at import time here: an import that raised half-way
# (a rerun) let another session's `from pages import common` fail with ImportError.


def app_shell() -> None:
    """Call first thing in every page: when Streamlit ran the page on its own, run app.py instead (its
    navigation then runs this page inside the app) and stop the lone run. No rerun, so clicks survive."""
    from streamlit.runtime.pages_manager import PagesManager

    flash.new_run(st.session_state)
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        runpy.run_path(str(APP_PATH), run_name="__main__")
        st.stop()


DB_ENV = "MERMAIDFLOW_DB"
KEY_STATE = endpoints.KEY  # the key typed on the Settings page: session memory only, never written anywhere
DEFAULT_EXAMPLE = drafts.DEFAULT_EXAMPLE


def db_target() -> str:
    """$MERMAIDFLOW_DB: a SQLite file (made absolute) or a postgresql:// URL (kept as it is)."""
    raw = os.environ.get(DB_ENV) or "workspace.db"
    return raw if is_postgres(raw) else str(Path(raw).resolve())


def db_path() -> Path | str:
    """The workspace file, or the PostgreSQL URL without its password (safe to show)."""
    return workspace().path


def db_label() -> str:
    """A short name for messages: the file's name, or the redacted URL."""
    p = db_path()
    return p.name if isinstance(p, Path) else p


@st.cache_resource(show_spinner=False)
def _workspace(path: str) -> Workspace:
    return Workspace(path)


def workspace() -> Workspace:
    return _workspace(db_target())


def team() -> bool:
    """Whether this session is served to a team (flowcore.ui.access.login_required: the bind address, the
    names served, a proxy's headers on this session's request)."""
    try:
        headers = dict(st.context.headers)
    except Exception:  # noqa: BLE001 - no request context (AppTest)
        headers = {}
    return access.login_required(st.get_option("server.address"), headers=headers)


def viewer() -> endpoints.Viewer:
    """Who this session is: in a team deployment or not, and the signed-in member's address."""
    return endpoints.Viewer(team(), st.session_state.get("mf_user"))


def llm_settings() -> LLMSettings:
    """The effective settings (flowcore.ui.endpoints decides which endpoint and key); what was ignored is shown."""
    settings, problems = endpoints.effective(workspace(), viewer(), st.session_state)
    for problem in problems:
        st.warning(md(problem))
    return settings


# -- the open workflow, shared by Editor, Run, Export and Evolve ------------------------------------------
# Session state holds it while the browser tab lives; flowcore.workspace.drafts keeps it in the URL and in this
# browser's draft row, so a reload, a copied link or the back button reopens it.

_SYNCED = "mf_synced"


def browser_id() -> str:
    """This browser's id: from its cookie (set by the server with the page: flowcore.ui.browser_cookie), else a
    new one for this session (a browser that refuses cookies, or no request: AppTest). A signed-in team member's
    is their own within it, so a planted cookie shares nothing with whoever planted it."""
    if "mf_browser" not in st.session_state:
        try:
            secure = browser_cookie.page_is_https(dict(st.context.headers), bool(st.get_option("server.sslCertFile")))
            cookie = browser_cookie.from_cookies(st.context.cookies, secure)
        except Exception:  # noqa: BLE001 - no request context (AppTest): one id per session
            cookie = None
        st.session_state["mf_browser"] = cookie or drafts.new_browser_id()
    browser = st.session_state["mf_browser"]
    member = st.session_state.get("mf_user")
    return drafts.member_browser_id(member, browser) if member else browser


def tab_id() -> str:
    """This tab's id (a browser session): its draft row is its own, so two tabs never overwrite each other's work."""
    return st.session_state.setdefault("mf_tab", drafts.new_tab_id())


def _open() -> drafts.OpenWorkflow:
    ss = st.session_state
    if "mf_text" not in ss:  # a new browser session: the link, else this browser's draft, else an example
        params = {k: st.query_params.get(k) for k in ("wf", "v", "task", "code")}
        wf, problem = drafts.resolve(workspace(), {k: v for k, v in params.items() if v}, browser_id())
        ss.update(mf_text=wf.text, mf_task=wf.task, mf_name=wf.name, mf_version=wf.version,
                  mf_rev=ss.get("mf_rev", 0) + 1)
        if problem:
            ss["mf_link_problem"] = problem
    return drafts.OpenWorkflow(ss.get("mf_name") or "untitled", ss.get("mf_task") or "math", ss["mf_text"],
                               ss.get("mf_version"))


def current_workflow() -> dict:
    """{"text", "task", "name", "version"} of the workflow open in the Editor."""
    wf = _open()
    return {"text": wf.text, "task": wf.task, "name": wf.name, "version": wf.version}


def set_current_workflow(text: str, task: str | None = None, name: str | None = None, *,
                         version: int | None | bool = False, from_editor: bool = False) -> None:
    """Open ``text`` as the current workflow. A new ``name`` forgets the library version unless ``version``
    is given; unless the change came from the editor itself, the editor widgets are rebuilt (``mf_rev``)."""
    wf = _open()
    if version is False:
        version = wf.version if name is None or name == wf.name else None
    st.session_state.update(mf_text=text, mf_task=task if task is not None else wf.task,
                            mf_name=name if name is not None else wf.name, mf_version=version)
    if not from_editor:
        st.session_state["mf_rev"] = st.session_state.get("mf_rev", 0) + 1


def editor_rev() -> int:
    _open()
    return int(st.session_state.get("mf_rev", 0))


def sync_open_workflow() -> None:
    """After each run: this browser's draft row and the URL follow the open workflow. A text that holds the
    API key in use is kept out of both."""
    wf = _open()
    key = st.session_state.get(KEY_STATE) or os.environ.get("OPENAI_API_KEY") or ""
    try:
        params = drafts.remember(workspace(), browser_id(), wf, st.session_state.get(_SYNCED), api_key=key,
                                 tab=tab_id())
    except Exception as e:  # noqa: BLE001 - a busy or read-only workspace must not break the page
        st.toast(f"The draft could not be stored: {md(e)}")
        return
    if params is None:  # the text holds the key: neither the draft row nor the URL gets it
        return
    st.session_state[_SYNCED] = wf
    if {k: st.query_params.get(k) for k in params} != params or set(st.query_params) - set(params):
        st.query_params.from_dict(params)


# -- status ---------------------------------------------------------------------------------------------

def llm_banner(settings: LLMSettings | None = None) -> bool:
    """Say plainly when no endpoint is configured; returns whether one is."""
    settings = settings or llm_settings()
    if not settings.configured:
        st.info("**No LLM endpoint is configured.** Set `OPENAI_BASE_URL` (any OpenAI-compatible server) "
                "and/or `OPENAI_API_KEY`, or enter them on the Settings page. Editing, checking, drawing, "
                "exporting and replaying cached runs work without one.", icon=":material/cloud_off:")
    return settings.configured


def open_label() -> str:
    """'**name** · version 3 · saved as version 3 · math' for the header of every page."""
    wf = _open()
    state = drafts.saved_state(workspace(), wf)
    return f"**{md(wf.name)}** · {wf.task} · {state}"


def header(title: str, caption: str | None = None, *, show_open: bool = True) -> None:
    """The page title, what the page is for, and which workflow is open (name, task, saved state)."""
    st.title(title)
    settings = llm_settings()
    llm = (f"LLM `{public_url(settings.base_url)}`" if settings.base_url else "LLM key set") \
        if settings.configured else "no LLM endpoint"
    status = f":material/cloud: {llm}"
    if show_open:
        status = f":material/description: Open workflow: {open_label()} · {status}"
    st.caption("  \n".join(([caption] if caption else []) + [status]))
    if "mf_link_problem" in st.session_state:
        st.warning(md(st.session_state.pop("mf_link_problem")), icon=":material/link_off:")  # quotes the link


def rerun(*flashes: str) -> NoReturn:
    """``st.rerun()``, the messages this full run took under ``flashes`` kept for the next (``flowcore.ui.flash``);
    a live view's own periodic run (a fragment) keeps none: those were read seconds ago."""
    ctx = get_script_run_ctx()
    if ctx is not None and not ctx.fragment_ids_this_run:
        flash.keep(st.session_state, flashes)
    st.rerun()


def md(value: object) -> str:
    """Plain text for st.markdown (no emphasis, links, images, LaTeX or HTML from user text)."""
    return safe.plain(value)


def sandbox_banner(*, show_ready: bool = False) -> bool:
    """Say plainly when generated code cannot run confined (no bubblewrap): it is then refused, never run
    unconfined. Returns whether the sandbox is ready."""
    ready, message = sandbox.sandbox_status()
    if not ready:
        st.error(f"**Generated code will not run here.** {message}. Workflows with Programmer or Test "
                 "nodes and HumanEval/MBPP scoring are refused until it is installed; everything else works.",
                 icon=":material/shield:")
    elif show_ready:
        st.success(f"Sandbox: {message}. Generated code runs with no network, no access to your files or "
                   "keys, and CPU/memory/process/file-size limits.", icon=":material/shield:")
    return ready


def sidebar_status() -> None:
    """Where this app keeps things and what it can do, one caption (each element costs every page's paint)."""
    settings = llm_settings()
    ready, _ = sandbox.sandbox_status()
    llm = f"`{public_url(settings.base_url)}` · executor `{settings.models['executor']}`" if settings.configured \
        else "not configured"
    st.sidebar.caption("  \n".join([
        f"Workspace: `{db_path()}`",
        "Sandbox: bubblewrap ready" if ready else ":red[Sandbox: bubblewrap missing — generated code is refused]",
        f"LLM endpoint: {llm}", f"Open workflow: {open_label()}"]))
