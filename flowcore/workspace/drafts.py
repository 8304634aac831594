"""The open workflow of each browser, kept where a reload, a copied link and the back button find it.

Two places, as Mermaid Live Editor does it:

- the **URL**: the workflow's name, library version and task, plus its text compressed (``z:`` + URL-safe
  base64 of zlib) whenever the text differs from what the name and version already say. A saved or an
  untouched example workflow therefore has a short link; an edited one carries its own text.
- a **draft row** per browser tab in the workspace (``tab_drafts``), written on every change: opening the app
  without a link in the same browser reopens the latest of them, unsaved text included. Two tabs of one browser
  keep a row each, so neither overwrites the other's work (``other_drafts`` lists the rest, to reopen with a
  click); each row carries a revision that its writer names (``save_draft(rev=...)``): a write over a newer one
  is refused (``DraftConflict``), never overwritten.

The pages call :func:`resolve` once per browser session and :func:`remember` after every run; nothing here
imports Streamlit.

Beside the workflow, each page's own state (the Run page's mode, problem and answer, the AOV candidates, the
Compare form, the run History shows) is kept per browser and page (``page_state``): :func:`save_page_state`
after a run that changed it, :func:`load_page_state` when a browser session starts, so a reload finds every
page as it was left.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import re
import time
import uuid
import zlib
from dataclasses import dataclass

from flowcore import catalogue as cat
from flowcore.workspace import library
from flowcore.workspace.store import Workspace

__all__ = ["DraftConflict", "DraftError", "OpenWorkflow", "other_drafts", "new_tab_id", "MAX_TEXT_BYTES", "MAX_URL_CODE", "decode_text", "default_workflow",
           "encode_text", "forget_draft", "from_params", "load_draft", "load_page_state", "new_browser_id",
           "remember", "resolve", "save_draft", "save_page_state", "saved_state", "to_params", "valid_browser_id"]

PREFIX = "z:"
# A decoded link never expands past this. Links the app writes carry at most MAX_URL_CODE compressed characters
# (~100-250 KB of workflow text); 570 characters once expanded to 13,000 nested subgraphs (195 KB) that cost
# 80 s to check. Past it the link is refused, naming the limit; the checks of what it holds have their own
# budget (flowcore/checker/bounded.py).
MAX_TEXT_BYTES = 256 * 1024
MAX_URL_CODE = 24_000  # longer compressed texts stay out of the URL (the draft row still has them)
DEFAULT_EXAMPLE = "math_seed"
_B64_RE = re.compile(r"^[A-Za-z0-9_-]*={0,2}$")
_BROWSER_RE = re.compile(r"^[0-9a-f]{32}$")

MAX_TABS = 8  # draft rows kept per browser (the most recent; a reload is a new tab)
_DDL = """
CREATE TABLE IF NOT EXISTS drafts(
    browser TEXT PRIMARY KEY, name TEXT NOT NULL, version INTEGER, task TEXT NOT NULL, text TEXT NOT NULL,
    updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS tab_drafts(
    browser TEXT NOT NULL, tab TEXT NOT NULL, name TEXT NOT NULL, version INTEGER, task TEXT NOT NULL,
    text TEXT NOT NULL, updated REAL NOT NULL, rev INTEGER NOT NULL DEFAULT 1, PRIMARY KEY (browser, tab));
"""


class DraftError(ValueError):
    """A link or draft that cannot be opened; the message says which part is wrong."""


class DraftConflict(DraftError):
    """This tab's draft row was written by someone else since this tab last wrote it (``rev`` is the stored one)."""

    def __init__(self, rev: int, stored: OpenWorkflow) -> None:
        super().__init__(f"this tab's draft was changed elsewhere (now {stored.name!r}, revision {rev}); not "
                         "overwritten")
        self.rev, self.stored = rev, stored


@dataclass(frozen=True)
class OpenWorkflow:
    name: str
    task: str
    text: str
    version: int | None = None  # the library version it was opened from or last saved as


def _schema(ws: Workspace) -> None:
    ws.ensure_schema("drafts", _DDL)


# -- the compressed text -------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=16)  # every page run asks again for the same text
def encode_text(text: str) -> str:
    raw = zlib.compress(text.encode("utf-8"), 9)
    return PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_text(code: str) -> str:
    """The text of a ``z:`` code; DraftError naming what is wrong (prefix, base64, zlib, size, UTF-8)."""
    if not isinstance(code, str) or not code.startswith(PREFIX):
        cut = isinstance(code, str) and ("z%3a".startswith(code.lower()) or PREFIX.startswith(code))
        raise DraftError(f"the link's 'code' must start with {PREFIX!r}" + (" (was the link cut short?)" * cut))
    body = code[len(PREFIX):].strip()
    if not _B64_RE.match(body):
        raise DraftError("the link's 'code' is not URL-safe base64 (was the link cut short?)")
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        raise DraftError("the link's 'code' is not URL-safe base64 (was the link cut short?)") from None
    d = zlib.decompressobj()
    try:
        data = d.decompress(raw, MAX_TEXT_BYTES + 1)
    except zlib.error:
        raise DraftError("the link's 'code' does not decompress (was the link cut short?)") from None
    if len(data) > MAX_TEXT_BYTES or d.unconsumed_tail:
        raise DraftError(f"the link's text is larger than {MAX_TEXT_BYTES // 1024} KB once expanded (the limit "
                         "for a workflow in a link; open a larger one from a file or the workspace)")
    if not d.eof:
        raise DraftError("the link's 'code' is incomplete (was the link cut short?)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DraftError("the link's text is not UTF-8") from None


# -- what a name and version already say ---------------------------------------------------------------------------

def _example(name: str) -> tuple[str, str] | None:
    return next(((text, task) for n, task, text in library.examples() if n == name), None)


def baseline(ws: Workspace, wf: OpenWorkflow) -> str | None:
    """The text the name and version stand for (a stored version, or an untouched example), if any."""
    if wf.version is not None:
        try:
            return library.load_workflow(ws, wf.name, wf.version)[0]
        except library.LibraryError:
            return None
    ex = _example(wf.name)
    return ex[0] if ex else None


def saved_state(ws: Workspace, wf: OpenWorkflow) -> str:
    """One phrase for the page header: 'saved as version 3', 'unsaved changes to version 3',
    'example, unchanged', 'not saved yet'."""
    base = baseline(ws, wf)
    if wf.version is not None:
        if base is None:
            return f"version {wf.version} is no longer in the workspace; not saved"
        state = f"saved as version {wf.version}" if base == wf.text else f"unsaved changes to version {wf.version}"
        latest = library.versions(ws, wf.name)[:1]
        if latest and latest[0][0] > wf.version:  # someone saved the same workflow since it was opened here
            state += f" (version {latest[0][0]} is newer)"
        return state
    if base is not None:
        return "example, unchanged" if base == wf.text else "edited example, not saved yet"
    return "not saved yet"


def default_workflow() -> OpenWorkflow:
    ex = _example(DEFAULT_EXAMPLE)
    if ex:
        return OpenWorkflow(DEFAULT_EXAMPLE, ex[1], ex[0])
    return OpenWorkflow("untitled", "math", "flowchart TD\n")


# -- the URL ---------------------------------------------------------------------------------------------------------

def to_params(ws: Workspace, wf: OpenWorkflow) -> dict[str, str]:
    """Query parameters that reopen ``wf``: name, version, task, and the text when it differs from what they
    say and is small enough for a link (else the draft row keeps it)."""
    out = {"wf": wf.name, "task": wf.task}
    if wf.version is not None:
        out["v"] = str(wf.version)
    if baseline(ws, wf) != wf.text:
        code = encode_text(wf.text)
        if len(code) <= MAX_URL_CODE:
            out["code"] = code
    return out


def from_params(ws: Workspace, params: dict[str, str]) -> OpenWorkflow | None:
    """The workflow a link names, or None when the link names none. DraftError (naming the parameter) for a
    link that names one but cannot be opened."""
    name, code, version, task = (params.get(k) for k in ("wf", "code", "v", "task"))
    if not name and not code:
        return None
    name = (name or "untitled").strip()[:80] or "untitled"
    if task is not None and task not in cat.TASKS:
        raise DraftError(f"the link's task {task!r} is not one of {', '.join(cat.TASKS)}")
    ver: int | None = None
    if version:
        try:
            ver = int(version)
        except ValueError:
            raise DraftError(f"the link's version {version!r} is not a number") from None
    text = decode_text(code) if code else None
    if text is None:  # the name (and version) must say what the text is
        if ver is not None:
            try:
                text, stored_task = library.load_workflow(ws, name, ver)
            except library.LibraryError as e:
                raise DraftError(str(e)) from None
            task = task or stored_task
        elif (ex := _example(name)) is not None:
            text, task = ex[0], task or ex[1]
        else:
            try:
                text, stored_task = library.load_workflow(ws, name)
            except library.LibraryError:
                raise DraftError(f"the link names the workflow {name!r}, which is neither saved in this "
                                 "workspace nor an example, and carries no text") from None
            ver = library.versions(ws, name)[0][0]
            task = task or stored_task
    if task is None:
        ex = _example(name)
        task = ex[1] if ex else "math"
    return OpenWorkflow(name, task, text, ver)


# -- the draft row ---------------------------------------------------------------------------------------------------

def new_browser_id() -> str:
    return uuid.uuid4().hex


def member_browser_id(member: str, browser: str) -> str:
    """The id a signed-in team member's drafts and page state are kept under in this browser: its cookie id
    alone would let whoever planted the cookie (another site on the same host) read them under that id."""
    return hashlib.sha256(f"{member}\0{browser}".encode()).hexdigest()[:32]


def valid_browser_id(value: object) -> bool:
    return isinstance(value, str) and bool(_BROWSER_RE.match(value))


def new_tab_id() -> str:
    return uuid.uuid4().hex[:16]


def save_draft(ws: Workspace, browser: str, wf: OpenWorkflow, tab: str = "", rev: int | None = None) -> int:
    """Write this tab's draft row; its new revision. ``rev``: the revision this tab last wrote (None: do not
    check); a row written since by someone else is a DraftConflict, and nothing is written."""
    if not valid_browser_id(browser):
        raise DraftError("a browser id is 32 hexadecimal digits")
    _schema(ws)
    with ws.transaction() as conn:
        row = conn.execute("SELECT rev, name, version, task, text FROM tab_drafts WHERE browser=? AND tab=?",
                           (browser, tab)).fetchone()
        if row is not None and rev is not None and int(row["rev"]) != rev:
            raise DraftConflict(int(row["rev"]), _row_workflow(row))
        new = (int(row["rev"]) if row is not None else 0) + 1
        conn.execute("INSERT INTO tab_drafts(browser, tab, name, version, task, text, updated, rev) "
                     "VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(browser, tab) DO UPDATE SET name=excluded.name, "
                     "version=excluded.version, task=excluded.task, text=excluded.text, updated=excluded.updated, "
                     "rev=excluded.rev", (browser, tab, wf.name, wf.version, wf.task, wf.text, time.time(), new))
        tabs = conn.execute("SELECT tab FROM tab_drafts WHERE browser=? ORDER BY updated DESC", (browser,)).fetchall()
        for r in tabs[MAX_TABS:]:
            conn.execute("DELETE FROM tab_drafts WHERE browser=? AND tab=?", (browser, r["tab"]))
    return new


def _row_workflow(r: object) -> OpenWorkflow:
    task = r["task"] if r["task"] in cat.TASKS else "math"  # type: ignore[index]
    return OpenWorkflow(r["name"], task, r["text"], None if r["version"] is None else int(r["version"]))  # type: ignore[index]


def load_draft(ws: Workspace, browser: str, tab: str | None = None) -> OpenWorkflow | None:
    """This browser's latest draft (of any tab), or of ``tab``; the row of an older app version too."""
    if not valid_browser_id(browser):
        return None
    _schema(ws)
    if tab is None:
        rows = ws.query("SELECT name, version, task, text FROM tab_drafts WHERE browser=? ORDER BY updated DESC "
                        "LIMIT 1", (browser,))
        rows = rows or ws.query("SELECT name, version, task, text FROM drafts WHERE browser=?", (browser,))
    else:
        rows = ws.query("SELECT name, version, task, text FROM tab_drafts WHERE browser=? AND tab=?", (browser, tab))
    return _row_workflow(rows[0]) if rows else None


def other_drafts(ws: Workspace, browser: str, tab: str, current: OpenWorkflow | None = None
                 ) -> list[tuple[float, OpenWorkflow]]:
    """The drafts of this browser's other tabs (updated, workflow), newest first, without those that hold the
    workflow open here: what another tab was working on, to reopen with a click."""
    if not valid_browser_id(browser):
        return []
    _schema(ws)
    rows = ws.query("SELECT name, version, task, text, updated FROM tab_drafts WHERE browser=? AND tab != ? "
                    "ORDER BY updated DESC", (browser, tab))
    out, seen = [], {current.text} if current is not None else set()
    for r in rows:
        wf = _row_workflow(r)
        if wf.text not in seen:
            seen.add(wf.text)
            out.append((float(r["updated"]), wf))
    return out


def forget_draft(ws: Workspace, browser: str) -> None:
    _schema(ws)
    _page_schema(ws)
    with ws.transaction() as conn:
        conn.execute("DELETE FROM drafts WHERE browser=?", (browser,))
        conn.execute("DELETE FROM tab_drafts WHERE browser=?", (browser,))
        conn.execute("DELETE FROM page_state WHERE browser=?", (browser,))


# -- each page's own state -------------------------------------------------------------------------------------------

MAX_STATE_BYTES = 512 * 1024  # one page's state as JSON: a form, a few candidate graphs, one run's answer
_PAGE_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_PAGE_DDL = """
CREATE TABLE IF NOT EXISTS page_state(
    browser TEXT NOT NULL, page TEXT NOT NULL, state TEXT NOT NULL, updated REAL NOT NULL,
    PRIMARY KEY (browser, page));
"""


def _page_schema(ws: Workspace) -> None:
    ws.ensure_schema("page_state", _PAGE_DDL)


def save_page_state(ws: Workspace, browser: str, page: str, state: dict) -> None:
    """Keep ``state`` (JSON-able values by name) as this browser's state of ``page``; DraftError naming what is
    wrong (the browser id, the page name, a value JSON cannot hold, a state over MAX_STATE_BYTES)."""
    if not valid_browser_id(browser):
        raise DraftError("a browser id is 32 hexadecimal digits")
    if not _PAGE_RE.match(page or ""):
        raise DraftError(f"a page name is a short lower-case identifier, not {page!r}")
    try:
        text = json.dumps(state, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise DraftError(f"the {page} page's state cannot be stored: {e}") from None
    if len(text.encode("utf-8")) > MAX_STATE_BYTES:
        raise DraftError(f"the {page} page's state is larger than {MAX_STATE_BYTES // 1024} KB; not stored")
    _page_schema(ws)
    with ws.transaction() as conn:
        conn.execute("INSERT INTO page_state(browser, page, state, updated) VALUES (?,?,?,?) "
                     "ON CONFLICT(browser, page) DO UPDATE SET state=excluded.state, updated=excluded.updated",
                     (browser, page, text, time.time()))


def load_page_state(ws: Workspace, browser: str) -> dict[str, dict]:
    """Every page's stored state for this browser (page -> values); a row that does not read is left out."""
    if not valid_browser_id(browser):
        return {}
    _page_schema(ws)
    out: dict[str, dict] = {}
    for r in ws.query("SELECT page, state FROM page_state WHERE browser=?", (browser,)):
        try:
            value = json.loads(r["state"])
        except ValueError:
            continue
        if isinstance(value, dict):
            out[str(r["page"])] = value
    return out


# -- one call per page run -------------------------------------------------------------------------------------------

def resolve(ws: Workspace, params: dict[str, str], browser: str | None) -> tuple[OpenWorkflow, str | None]:
    """What a new browser session opens: the link's workflow, else this browser's draft, else the default
    example. Returns it with a message when the link could not be opened (the draft or default is used)."""
    problem = None
    try:
        wf = from_params(ws, params)
    except DraftError as e:
        wf, problem = None, f"The link could not be opened: {e}."
    if wf is None and browser:
        wf = load_draft(ws, browser)
    return wf or default_workflow(), problem


def remember(ws: Workspace, browser: str | None, wf: OpenWorkflow, last: OpenWorkflow | None,
             api_key: str | None = None, tab: str = "") -> dict[str, str] | None:
    """Store ``wf`` as this tab's draft when it changed since ``last``; returns its URL parameters. A text
    holding the API key in use is kept out of both (None): a draft never holds the key."""
    if api_key and api_key.strip() and api_key.strip() in wf.text:
        return None
    if browser and wf != last:
        save_draft(ws, browser, wf, tab)
    return to_params(ws, wf)
