"""MermaidFlow Studio: the Streamlit entry point (home page and navigation).

Pages are listed explicitly; Streamlit's own list of the files in pages/ is never shown
(`client.showSidebarNavigation = false` in .streamlit/config.toml), so the first paint already has the
real menu. A page whose file is missing is left out of the navigation. Pages only lay out widgets and call
the `flowcore` engine.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

# A pages/ folder starts Streamlit in its old pages-directory mode until st.navigation runs. Leave it before
# anything else, in this script and not in an import, so no half-run import can race another session.
PagesManager.uses_pages_directory = False

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # `flowcore` and `pages.common` import from the repository root
    sys.path.insert(0, str(ROOT))

from flowcore.ui import access, webguard

if __name__ == "__main__":  # a page view. Not when `streamlit run` imports this module to serve it (below): a
    # component declared then, before the app runs, is never registered and its files are not served (404)
    from flowcore import check, is_valid, parse_lenient
    from flowcore.mermaid import safe
    from flowcore.ui import warm
    from flowcore.workspace import health, library
    from flowcore.workspace.health import WorkspaceDamaged
    from pages import common, keep, widgets

# (file, title, url path, icon): the order of the navigation
PAGES = [
    ("pages/editor.py", "Editor", "editor", ":material/edit_note:"),
    ("pages/run.py", "Run", "run", ":material/play_arrow:"),
    ("pages/export.py", "Export", "export", ":material/download:"),
    ("pages/evolve.py", "Evolve", "evolve", ":material/auto_awesome:"),
    ("pages/history.py", "History", "history", ":material/history:"),
    ("pages/compare.py", "Compare", "compare", ":material/compare_arrows:"),
    ("pages/tasks.py", "Tasks", "tasks", ":material/dataset:"),
    ("pages/traces.py", "Traces", "traces", ":material/timeline:"),
    ("pages/aov.py", "AOV Execution", "aov", ":material/account_tree:"),
    ("pages/settings.py", "Settings", "settings", ":material/settings:"),
]

# Other parts of the engine create these tables; the home page counts whichever exist.
WORKSPACE_TABLES = [("evo_runs", "Evolution runs"), ("evaluations", "Evaluations"),
                    ("aov_executions", "AOV executions")]


def home() -> None:
    common.header("MermaidFlow Studio")
    st.markdown(
        "**MermaidFlow** writes an LLM agent workflow as a Mermaid flowchart whose nodes are typed operators "
        "(LLM calls, programs run in a sandbox, ensembles, tests) and whose edges name the inputs they feed. "
        "Because the workflow is a declarative graph, a checker rejects a broken one before anything runs, "
        "and evolution can mutate and recombine workflows while keeping them valid, scoring each on a "
        "benchmark.\n\n"
        "**Flow** splits a task into subtasks arranged as a dependency graph (Activity-on-Vertex), picks the "
        "candidate graph with the most parallelism, runs every ready subtask at once, and repairs the graph "
        "locally when an inspector finds a failed result.")
    common.llm_banner()
    common.sandbox_banner()

    st.subheader("Example workflows")
    rows = []
    for name, task, text in library.examples():
        w, _ = parse_lenient(text)
        rows.append({"name": name, "task": task, "nodes": len(w.nodes), "edges": len(w.edges),
                     "prompts": len(w.prompts), "valid": "yes" if is_valid(check(text, task)) else "no"})
    if not rows:
        st.warning(f"No examples found in {library.EXAMPLES_DIR}.")
    else:
        st.markdown(safe.table(rows))  # a few static rows: markdown draws at once; a table or grid loads Arrow
        names = [r["name"] for r in rows]
        pick = st.selectbox("Preview", names, index=names.index(common.DEFAULT_EXAMPLE)
                            if common.DEFAULT_EXAMPLE in names else 0, key="home_example")
        name, task, text = next(e for e in library.examples() if e[0] == pick)
        if st.button("Open in Editor", icon=":material/edit_note:", type="primary", key="home_open"):
            common.set_current_workflow(text, task, name, version=None)
            st.session_state["mf_scroll_top"] = True
            st.switch_page("pages/editor.py")
        w, _ = parse_lenient(text)
        widgets.diagram(w, "home_mermaid")

    if st.session_state.get("mf_user"):
        c = st.columns([4, 1], vertical_alignment="center")
        c[0].caption(f"Signed in as {common.md(st.session_state['mf_user'])}")
        c[1].button("Log out", icon=":material/logout:", on_click=st.logout, key="logout")
    st.subheader("Workspace")
    ws = common.workspace()
    saved = library.list_workflows(ws)
    counts = library.table_counts(ws)
    metrics = [("Saved workflows", len(saved)), ("Workflow versions", counts.get("workflows", 0))]
    metrics += [(label, counts[table]) for table, label in WORKSPACE_TABLES if table in counts]
    for col, (label, value) in zip(st.columns(len(metrics)), metrics):
        col.metric(label, value)
    st.caption(f"Database: `{common.db_path()}`")


def locked():  # noqa: ANN201 - a page function, or None
    """Served to a team: the screen a visitor sees instead of the app (no provider configured, log in, not a
    member), or None when a member is signed in."""
    try:
        configured = "auth" in st.secrets
    except Exception:  # noqa: BLE001 - no secrets file at all
        configured = False
    if not configured:
        def unconfigured() -> None:
            st.error("This app is served beyond 127.0.0.1 (bound beyond it, answering to a name in "
                     "MERMAIDFLOW_HOSTS, or reached through a reverse proxy), so it requires a login, and no "
                     "OpenID Connect provider "
                     "is configured: add an [auth] section to .streamlit/secrets.toml (see README, Run on a "
                     "cluster), or serve it on 127.0.0.1 for yourself.", icon=":material/lock:")
        return unconfigured
    if not st.user.is_logged_in:
        def log_in() -> None:
            st.title("MermaidFlow Studio")
            st.write("This workspace is for the members of its team: log in to continue.")
            st.button("Log in", icon=":material/login:", type="primary", on_click=st.login, key="login")
        return log_in
    claims = st.user.to_dict() if hasattr(st.user, "to_dict") else {k: st.user.get(k) for k in st.user}
    who, why = access.member_address(claims)  # the verified email claim, read strictly; never `sub`
    if who is None or not access.is_member(who):
        shown = common.md(claims.get("email") or "this account")
        def stranger() -> None:
            st.title("MermaidFlow Studio")
            st.error(f"{shown} is not a member of this workspace's team; ask its owner to add you."
                     if who else f"Not signed in: {why}.", icon=":material/block:")
            st.button("Log out", icon=":material/logout:", on_click=st.logout, key="logout")
        return stranger
    st.session_state["mf_user"] = who
    return None


def main() -> None:
    st.set_page_config(page_title="MermaidFlow Studio", page_icon=str(ROOT / "assets" / "favicon.png"), layout="wide",
                       initial_sidebar_state="collapsed")
    pages = [st.Page(home, title="Home", icon=":material/home:", default=True)]
    pages += [st.Page(str(ROOT / f), title=t, url_path=u, icon=i)
              for f, t, u, i in PAGES if (ROOT / f).exists()]
    if common.team() and (screen := locked()) is not None:
        st.navigation([st.Page(screen, title="MermaidFlow Studio", default=True)], position="hidden").run()
        return  # no page, no workspace, nothing else is reached
    nav = st.navigation(pages, position="top")
    try:  # a workspace that is not a database, a folder or read-only: say so once, instead of a traceback
        common.workspace().check_usable()
    except WorkspaceDamaged as e:
        st.error(f"{str(e)[0].upper()}{str(e)[1:]}. Then point `{common.DB_ENV}` at the recovered file (or use "
                 "`--replace`) and restart the app.", icon=":material/database:")
        st.stop()
    except OSError as e:
        st.error(f"The workspace `{getattr(e, 'path', common.db_target())}` cannot be used: {e}. Nothing in it "
                 f"was changed. Point `{common.DB_ENV}` at another file (a new name starts an empty workspace) "
                 "and restart the app.", icon=":material/database:")
        st.stop()
    if common.workspace().read_only:
        st.warning(f"Read-only: {common.workspace().read_only}.", icon=":material/database:")
    keep.restore_page_state()  # a reload: each page as this browser left it
    keep.keep_form_values()
    keep.dropped_note()
    try:
        nav.run()
    except Exception as e:
        if keep.forget_restored(e):  # it may have failed on a value kept from an earlier visit: again without them
            st.rerun()
        if not isinstance(e, sqlite3.DatabaseError):
            raise
        # the workspace failed mid-page (damaged, full, away): a panel, no traceback
        st.error(f"{health.describe(e, common.db_path()).capitalize()}.", icon=":material/database:")
        return
    common.sidebar_status()
    common.sync_open_workflow()
    keep.sync_page_state()


if __name__ == "__main__":  # Streamlit runs this script for every page view
    with warm.page_view():  # the server's warm-up waits meanwhile
        main()
else:  # `streamlit run app.py` finds `app` below and serves it: every request passes the web guard first
    from starlette.middleware import Middleware
    from streamlit import file_util
    from streamlit.starlette import App

    from flowcore.serve import nodelay, slow
    from flowcore.ui import warm
    from flowcore.ui.browser_cookie import BrowserCookie
    from flowcore.ui.deeplinks import PageBase
    from flowcore.ui.plain_files import PlainComponentFiles
    from flowcore.ui.static_files import StaticBundles

    try:  # the names this server answers to (DNS rebinding: a foreign Host is refused), read once at start
        _hosts = webguard.Hosts.served(st.get_option("server.address"))
    except ValueError as _e:
        sys.exit(f"MermaidFlow Studio cannot start: {_e}")
    # the guard first; then a page opened by its address (/editor) learns where the app's root is (no 404s),
    # and a new browser gets its id cookie with the page; component files go as they are on disk, not gzipped per
    # request (flowcore/ui/plain_files.py). Every request first holds off the warm-up.
    _base = st.get_option("server.baseUrlPath") or ""
    app = App(Path(__file__).name, middleware=[Middleware(warm.Activity), Middleware(webguard.WebGuard, hosts=_hosts),
                                               Middleware(StaticBundles, static_dir=file_util.get_static_dir(),
                                                          base_url=_base),
                                               Middleware(PageBase, pages=[u for _, _, u, _ in PAGES]),
                                               Middleware(BrowserCookie),
                                               Middleware(PlainComponentFiles, base_url=_base)])
    slow.install()  # a request head that never ends closes its connection (slowloris), as `flowcore serve` does
    nodelay.install()  # small answers without a 40 ms wait for the browser's ACK (Streamlit's socket kept Nagle on)
    warm.start(ROOT / "pages")  # the first view of each page as quick as the second
