"""Fixtures for one real-browser test per page: the app served by Streamlit, driven by Debian's Chromium.

Use in a test module under tests/browser/:

    import pytest
    from .conftest import APP_ENV, goto_page, wait_for_app

    pytestmark = pytest.mark.browser

    def test_editor(page, streamlit_app):
        goto_page(page, streamlit_app, "/editor")       # the page's url path
        page.get_by_role("button", name="Check").click()
        wait_for_app(page)                              # the rerun the click started has finished
        assert page.get_by_text("valid").is_visible()

- `streamlit_app` (session): one server for the whole run, `.url` and `.db_path` (a fresh SQLite workspace
  in a temp dir, passed as MERMAIDFLOW_DB). Extra environment for the server goes into `APP_ENV` before the
  first test that uses the fixture runs, e.g. at import time of a test module:
  `APP_ENV["MERMAIDFLOW_LLM_URL"] = ...` (the server starts once: every browser module sees the same env).
- `browser` (session): Chromium via Playwright; skips every browser test with the reason if
  /usr/bin/chromium (or the playwright package) is missing. `playwright install` is never used.
- `page` (function): a fresh context and page, 20 s default timeout; when the test fails a screenshot is
  saved to tests/browser/artifacts/<test>.png.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from flowcore.workspace.files import write_file

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("MERMAIDFLOW_CHROMIUM", "/usr/bin/chromium")  # env: only to test the skip
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
SCREENSHOTS = REPO / "assets" / "screenshots"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
STARTUP_TIMEOUT_S = 60.0
DEFAULT_TIMEOUT_MS = 20_000
# the Editor's text box (pages/ace.py), the one on screen
ACE = 'iframe[title="pages.ace.ace_editor"] >> visible=true'
# `expect(...)` has its own 5 s default; on a shared 2-core host at load 10+ an iframe's first paint takes longer.
# The tests wait for states, so a longer ceiling only lets a slow machine arrive; it never passes a wrong state.
try:
    from playwright.sync_api import expect
    expect.set_options(timeout=DEFAULT_TIMEOUT_MS)
except ImportError:  # the `browser` fixture skips with the reason
    pass

# Extra environment for the Streamlit server; extend it before the server starts (see the module docstring).
APP_ENV: dict[str, str] = {}


@dataclass
class StreamlitApp:
    url: str  # http://127.0.0.1:<port>, no trailing slash
    db_path: Path
    log_path: Path
    process: subprocess.Popen

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
            return r.read().decode().strip() == "ok"
    except OSError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def start_app(workdir: Path, env: dict[str, str] | None = None, args: list[str] | None = None) -> StreamlitApp:
    """Another server of its own (`streamlit run app.py` on a free 127.0.0.1 port, a fresh workspace in
    ``workdir``), for a test that needs its own environment or data; stop it with ``_stop(app.process)``."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    db_path, log_path = workdir / "workspace.db", workdir / "streamlit.log"
    env = {**os.environ, "MERMAIDFLOW_DB": str(db_path), "PYTHONUNBUFFERED": "1", **(env or {})}
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
           "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", *(args or [])]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    app = StreamlitApp(url, db_path, log_path, proc)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not _healthy(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"streamlit not healthy at {url}; log tail:\n{app.log_tail()}", pytrace=False)
        time.sleep(0.2)
    return app


@pytest.fixture(scope="session")
def streamlit_app(tmp_path_factory) -> StreamlitApp:
    """The app (app.py at the repo root) served on a free 127.0.0.1 port with a fresh workspace DB."""
    workdir = tmp_path_factory.mktemp("streamlit_app")
    db_path = workdir / "workspace.db"
    log_path = workdir / "streamlit.log"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MERMAIDFLOW_DB": str(db_path), "PYTHONUNBUFFERED": "1", **APP_ENV}
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
           "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    app = StreamlitApp(url, db_path, log_path, proc)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not _healthy(url):
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited with code {proc.returncode} before it was healthy; log tail:\n"
                            f"{app.log_tail()}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit not healthy at {url} after {STARTUP_TIMEOUT_S:.0f} s; log tail:\n"
                            f"{app.log_tail()}", pytrace=False)
            time.sleep(0.2)
        yield app
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium through Playwright (skips, with the reason, when either is missing)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"browser tests need {CHROMIUM}: install it with `apt-get install -y chromium` "
                    "(make test does this when run as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser tests need the playwright package (pip install -r requirements-dev.txt)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)  # lets `page` see whether the test failed
    return rep


@pytest.fixture
def page(browser, request):
    """A fresh browser context and page; on failure a screenshot goes to tests/browser/artifacts/."""
    context = new_context(browser)
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    pg = context.new_page()
    try:
        yield pg
    finally:
        reports = (getattr(request.node, f"rep_{w}", None) for w in ("setup", "call"))
        failed = any(getattr(r, "failed", False) for r in reports)
        if failed:
            ARTIFACTS.mkdir(exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
            try:
                pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
            except Exception as exc:  # a crashed page must not hide the test's own failure
                print(f"screenshot failed: {exc}")
        context.close()


# ---------------------------------------------------------------------------------------------- helpers

_APP_IDLE = ('[data-testid="stApp"][data-test-script-state="notRunning"]'
             '[data-test-connection-state="CONNECTED"]')

# The run counter: every page of a test counts, on its websocket, the script runs it asked for (BackMsg
# field 11, rerun_script: a click, a widget change, a page switch, a fragment's timer) and the runs the server
# reported finished (ForwardMsg field 6, script_finished), each stamped with one sequence number. The app is
# settled once a run has finished after the last one asked for: no fixed pause lets a rerun "start".
RUN_COUNTER_JS = """(() => {
  const Orig = window.WebSocket;
  if (!Orig || Orig.__mfCounted) return;
  const runs = window.__mfRuns = {sent: 0, finished: 0, lastSent: 0, lastFinished: 0, seq: 0};
  const bytes = (d) => d instanceof ArrayBuffer ? new Uint8Array(d)
    : ArrayBuffer.isView(d) ? new Uint8Array(d.buffer, d.byteOffset, d.byteLength) : null;
  const fields = (b) => {  // the top-level protobuf field numbers of one message
    const out = []; let i = 0;
    const varint = () => { let v = 0, m = 1, c; do { c = b[i++]; v += (c & 127) * m; m *= 128; } while (c & 128); return v; };
    while (i < b.length) {
      const tag = varint(), wire = tag & 7; out.push(Math.floor(tag / 8));
      if (wire === 0) varint(); else if (wire === 2) { const n = varint(); i += n; } else if (wire === 1) i += 8;
      else if (wire === 5) i += 4; else break;
    }
    return out;
  };
  function Counted(url, protocols) {
    const ws = protocols === undefined ? new Orig(url) : new Orig(url, protocols);
    const send = ws.send.bind(ws);
    ws.send = (data) => {
      const b = bytes(data);
      if (b && fields(b).includes(11)) { runs.sent += 1; runs.lastSent = ++runs.seq; }
      return send(data);
    };
    ws.addEventListener('message', async (ev) => {
      const b = bytes(ev.data instanceof Blob ? await ev.data.arrayBuffer() : ev.data);
      if (b && fields(b).includes(6)) { runs.finished += 1; runs.lastFinished = ++runs.seq; }
    });
    return ws;
  }
  Counted.prototype = Orig.prototype;
  for (const k of ['CONNECTING', 'OPEN', 'CLOSING', 'CLOSED']) Counted[k] = Orig[k];
  Counted.__mfCounted = true;
  window.WebSocket = Counted;
})()"""

_SETTLED = """(since) => { const r = window.__mfRuns;
  return !!r && r.sent > since && r.lastFinished > r.lastSent; }"""


def new_context(browser, **kwargs):
    """A browser context whose pages count their script runs (what :func:`wait_for_app` waits on)."""
    ctx = browser.new_context(**{"viewport": {"width": 1400, "height": 1000}, **kwargs})
    ctx.add_init_script(RUN_COUNTER_JS)
    return ctx


def runs_sent(page) -> int:
    """How many script runs the page has asked for so far: pass it to :func:`wait_for_app` as ``since`` when
    the next run is asked for after a delay of the page's own (a debounced editor)."""
    return page.evaluate("() => window.__mfRuns ? window.__mfRuns.sent : 0")


def open_box(page, label: str) -> None:
    """Open a page's folded box (Evolve's New run, built only when open) unless it is open already."""
    box = page.locator('[data-testid="stExpander"]').filter(has=page.get_by_text(label, exact=True)).first
    if box.locator("details").first.get_attribute("open") is None:
        box.locator("summary").first.click()
        expect(box.locator("details").first).to_have_attribute("open", "")
    wait_for_app(page)


def open_tab(page, name: str) -> None:
    """Open a page's section (History's, Evolve's: each is built only when open) and wait for its run to end."""
    tab = page.get_by_role("tab", name=name, exact=True)
    tab.click()
    expect(tab).to_have_attribute("aria-selected", "true")
    wait_for_app(page)


def wait_for_app(page, timeout_ms: int = DEFAULT_TIMEOUT_MS, since: int = 0) -> None:
    """Wait until every script run the page asked for (the first one, or the rerun a click or keystroke just
    asked for) has finished, Streamlit is connected and idle, and no element is left stale from an earlier run.

    ``since``: also wait for a run asked for after that many (see :func:`runs_sent`)."""
    page.wait_for_selector('[data-testid="stApp"]', state="attached", timeout=timeout_ms)
    page.wait_for_function(_SETTLED, arg=since, timeout=timeout_ms)
    page.wait_for_selector(_APP_IDLE, state="attached", timeout=timeout_ms)
    page.wait_for_function("() => !document.querySelector('[data-stale=\"true\"]')", timeout=timeout_ms)


# Resolves once the page has not moved for 5 animation frames in a row: scroll positions, height, drawings.
_STILL_JS = """() => new Promise((resolve) => {
  const sig = () => [window.scrollY, document.documentElement.scrollHeight, document.querySelectorAll('svg').length,
    ...[...document.querySelectorAll('[data-testid="stMain"], [data-testid="stAppViewContainer"]')]
      .map((e) => e.scrollTop)].join(',');
  let last = sig(), same = 0;
  const tick = () => { const now = sig(); same = now === last ? same + 1 : 0; last = now;
    if (same >= 5) resolve(true); else requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
})"""


def wait_for_still(page) -> None:
    """Wait for a state, not a time: the page (scroll, size, drawings) is unchanged over 5 frames."""
    wait_for_app(page)
    page.evaluate(_STILL_JS)


def scroll_under_header(locator) -> None:
    """Scroll the app so ``locator``'s element starts just below Streamlit's sticky header: a screenshot then
    begins with whole widgets, never labels cut in half under the header (scrollIntoView puts the element's top
    at the very top of the scrolled box, behind the header)."""
    locator.evaluate("""e => {
      e.scrollIntoView({block: 'start'});
      const header = document.querySelector('[data-testid="stHeader"]');
      const box = [document.querySelector('[data-testid="stMain"]'),
                   document.querySelector('[data-testid="stAppViewContainer"]')]
        .find(b => b && b.scrollHeight > b.clientHeight && b.scrollTop > 0);
      if (header && box) box.scrollBy(0, e.getBoundingClientRect().top - header.getBoundingClientRect().bottom - 12);
    }""")
    wait_for_still(locator.page)


def choose(page, box, option, attempts: int = 4) -> None:
    """Open the select box ``box`` and click its option named ``option`` (a string or a compiled pattern).

    A rerun that lands between the click and the list (a dialog rebuilt under load) closes the list again,
    so the box is reopened until the option shows, a state waited for, never a fixed time."""
    wanted = page.get_by_role("option", name=option).first
    for attempt in range(attempts):
        wait_for_app(page)
        box.click()
        try:
            wanted.wait_for(state="visible", timeout=5_000)
            break
        except Exception:
            if attempt == attempts - 1:
                raise
            page.keyboard.press("Escape")
    wanted.click()


def turn_on(page, name: str, role: str = "switch", attempts: int = 4) -> None:
    """Click the label of the switch (or radio, checkbox) ``name`` until it reads checked, then wait for the run.

    Under load a drawing above it can finish and push the label down between Playwright's stability check and
    its click, so the click lands elsewhere; the state is waited for and the click repeated, never a fixed time."""
    control = page.get_by_role(role, name=name)
    for attempt in range(attempts):
        wait_for_still(page)
        if control.is_checked():
            break
        page.get_by_text(name, exact=True).click()
        try:
            expect(control).to_be_checked(timeout=5_000)
            break
        except AssertionError:
            if attempt == attempts - 1:
                raise
    wait_for_app(page)


def goto_page(page, app: StreamlitApp, url_path: str = "/", timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
    """Open `url_path` of the app (e.g. "/" or "/Editor") and wait until its script has run."""
    page.goto(app.url + "/" + url_path.lstrip("/"), wait_until="domcontentloaded", timeout=timeout_ms)
    wait_for_app(page, timeout_ms)


def track_requests(page) -> dict:
    """The page's requests sent and not yet answered (request -> URL), kept up to date from now on."""
    inflight: dict = {}
    page.on("request", lambda r: inflight.__setitem__(r, r.url))
    page.on("requestfinished", lambda r: inflight.pop(r, None))
    page.on("requestfailed", lambda r: inflight.pop(r, None))
    return inflight


def wait_network_idle(page, inflight: dict | None = None, timeout_ms: int = 60_000) -> None:
    """Wait until no request has been in flight for 500 ms (Playwright's "networkidle"); past ``timeout_ms``
    (a loaded machine serves a page's 3.5 MB of Mermaid slowly) fail naming what was still in flight."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_load_state("networkidle", timeout=timeout_ms)
    except PlaywrightTimeout:
        pending = sorted(set(inflight.values())) if inflight is not None else "not tracked"
        raise AssertionError(f"{page.url}: the network never went quiet for 500 ms in {timeout_ms / 1000:.0f} s;"
                             f" in flight: {pending}") from None


def save_screenshot(page, name: str, min_bytes: int = 20_000, **kwargs) -> Path:
    """A page screenshot for the README. It lands in assets/screenshots/ only when MERMAIDFLOW_SCREENSHOTS=1
    (`make screenshots`), so an ordinary test run never changes tracked files; otherwise in the artifacts
    folder. Either way the picture must be a real one (not an empty page)."""
    folder = SCREENSHOTS if os.environ.get("MERMAIDFLOW_SCREENSHOTS") == "1" else ARTIFACTS
    folder.mkdir(parents=True, exist_ok=True)
    path = write_file(folder / name, page.screenshot(**kwargs))  # never through a link planted at the name
    assert path.stat().st_size > min_bytes, f"{name}: {path.stat().st_size} bytes, an empty page?"
    return path


def no_exceptions(page) -> list[str]:
    """Texts of any Streamlit exception boxes on the page (an empty list means none)."""
    return [e.inner_text() for e in page.query_selector_all('[data-testid="stException"]')]


# Every Content Security Policy violation a frame sees (a load the policy refused is still an attempt): add
# CSP_RECORD as an init script, read them back with csp_violations(page).
CSP_RECORD = """window.__mf_csp = [];
document.addEventListener('securitypolicyviolation', (e) => window.__mf_csp.push(e.blockedURI));"""


def csp_violations(page) -> list[str]:
    out: list[str] = []
    for frame in page.frames:
        try:
            out += frame.evaluate("window.__mf_csp || []")
        except Exception:  # noqa: BLE001 - a frame that went away meanwhile
            pass
    return out
