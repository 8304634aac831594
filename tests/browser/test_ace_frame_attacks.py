"""Attacks on the Editor's own Ace frame (pages/components/ace: editor.js speaks Streamlit's component protocol by
hand), in Chromium against a real `streamlit run app.py`:

- a linked workflow whose text and checker diagnostics hold HTML and script: shown as text, in the lines and in
  the gutter's tooltip; nothing runs, nothing is loaded from another host, no load the policy had to refuse;
- forged ``streamlit:render`` messages from another frame of the page (the Mermaid drawing) or from another
  window (one the page opened): ignored; the frame sends no value the user did not type;
- the gutter keeps a line's mark when a line break is typed at that line's end (the checker's marks come back
  the same, so the app's render carries nothing new);
- a typed text reaches the app and survives a reload (the value round trip), through a fast run of keystrokes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from urllib.parse import urlencode, urlsplit

import pytest
from playwright.sync_api import expect

from flowcore.workspace.drafts import encode_text

from .conftest import (
    ACE,
    CSP_RECORD,
    REPO,
    STARTUP_TIMEOUT_S,
    StreamlitApp,
    _free_port,
    _healthy,
    _stop,
    csp_violations,
    new_context,
    no_exceptions,
    runs_sent,
    wait_for_app,
)

pytestmark = pytest.mark.browser

MERMAID = 'iframe[title="pages.drawing.mermaid_drawing"]'
EVIL = "img.evil.invalid"  # never resolves; any request to it is recorded before DNS fails
PWN = "(window.top.__pwned = (window.top.__pwned || 0) + 1)"
# an edge label the checker quotes in its M007 message (the gutter tooltip), and HTML in the lines themselves
ATTACK = (f'flowchart TD\nPROBLEM(["Problem"])\n'
          f'C1["Custom</script><script>{PWN}</script>"]\n'
          f'PROBLEM -->|"<img src=http://{EVIL}/port.png onerror={PWN}>"| C1\n'
          f'C1 --> RETURN(["Return"])\n'
          f"%% <img src='http://{EVIL}/comment.png' onerror='{PWN}'><svg onload='{PWN}'>\n")
# every Streamlit component message the app's page receives, with the title of the frame that sent it
RECORD_MESSAGES = """if (window.top === window) {
  window.__mfMessages = [];
  window.addEventListener('message', (e) => {
    const d = e.data;
    if (!d || !d.isStreamlitMessage) return;
    const f = [...document.querySelectorAll('iframe')].find((i) => i.contentWindow === e.source);
    window.__mfMessages.push({from: f ? f.title : '?', type: d.type,
                              value: typeof d.value === 'string' ? d.value : null});
  });
}"""


def _link(app, text: str, wf: str = "attack") -> str:
    return f"{app.url}/editor?" + urlencode({"wf": wf, "task": "math", "code": encode_text(text)})


def _open(page, url: str):
    page.goto(url, wait_until="domcontentloaded")
    wait_for_app(page)
    ace = page.frame_locator(ACE)
    ace.locator(".ace_content").wait_for()
    return ace


def _ace_text(page) -> str:
    """The editor's text (its lines wrap on screen, so not read from them)."""
    return _ace_frame(page).evaluate("() => window.ace.edit(document.getElementById('editor')).getValue()")


def _ace_frame(page):
    return next(f for f in page.frames if "/component/pages.ace.ace_editor/" in f.url and not f.is_detached())


def _values_from_ace(page) -> list[str]:
    return [m["value"] for m in page.evaluate("window.__mfMessages")
            if m["from"] == "pages.ace.ace_editor" and m["type"] == "streamlit:setComponentValue"]


@pytest.fixture
def recorded(browser):
    context = new_context(browser)
    context.add_init_script(CSP_RECORD)  # in every frame, the components' included
    context.add_init_script(RECORD_MESSAGES)
    page = context.new_page()
    off_host: list[str] = []
    page.on("request", lambda r: urlsplit(r.url).hostname not in ("127.0.0.1", "localhost", None)
            and not r.url.startswith(("data:", "blob:", "about:")) and off_host.append(r.url))
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page, off_host, errors
    finally:
        context.close()


def test_html_in_the_text_and_in_the_checkers_marks_is_shown_as_text(recorded, streamlit_app):
    page, off_host, errors = recorded
    ace = _open(page, _link(streamlit_app, ATTACK))
    expect(ace.locator(".ace_content")).to_contain_text("onerror")
    lines = _ace_text(page).splitlines()
    assert lines[2] == f'C1["Custom</script><script>{PWN}</script>"]', lines  # the text, as typed
    assert lines[5].startswith("%% <img src=")
    assert ace.locator(".ace_content img, .ace_content script, .ace_content svg").count() == 0

    # the checker quotes the edge label (M007): its mark's tooltip shows it as text
    mark = ace.locator(".ace_gutter-cell.ace_error").filter(has_text=re.compile(r"^\s*4\s*$"))
    expect(mark).to_have_count(1)
    mark.hover()
    tip = ace.locator(".ace_tooltip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text(f"M007 '<img src=http://{EVIL}/port.png onerror=")
    assert tip.locator("img, script, svg").count() == 0, tip.inner_html()

    wait_for_app(page)
    assert page.evaluate("window.__pwned") is None
    assert all(f.evaluate("window.__pwned === undefined") for f in page.frames if not f.is_detached())
    assert off_host == [], f"requests to other hosts: {sorted(set(off_host))}"
    assert csp_violations(page) == []
    assert errors == [] and no_exceptions(page) == []
    assert _values_from_ace(page) == []  # nothing typed: the frame sent no value of its own


def test_a_forged_render_from_another_frame_or_window_is_ignored(recorded, streamlit_app):
    """The Mermaid frame (same page, same origin) and a window the page opened each post a render whose
    annotation carries raw HTML (Ace shows an annotation's ``html`` unescaped) and a read-only switch."""
    page, off_host, errors = recorded
    text = 'flowchart TD\nPROBLEM(["Problem"])\nC1["Custom"]\nPROBLEM --> C1\nC1 --> RETURN(["Return"])\n'
    ace = _open(page, _link(streamlit_app, text, "forged"))
    page.frame_locator(MERMAID).locator("svg g.node").first.wait_for()
    forged = {"isStreamlitMessage": True, "type": "streamlit:render", "args": {
        "defaultValue": "EVIL", "fontSize": 40, "readOnly": True, "autoUpdate": True,
        "annotations": [{"row": 0, "type": "error", "html": f"<img src=http://{EVIL}/forged.png onerror={PWN}>"}]}}
    post = """(m) => { const f = window.parent.document.querySelector('iframe[title="pages.ace.ace_editor"]');
        f.contentWindow.postMessage(m, '*'); }"""
    mermaid = next(f for f in page.frames if "/component/pages.drawing.mermaid_drawing/" in f.url)
    mermaid.evaluate(post, forged)
    with page.expect_popup() as popup_info:
        page.evaluate("() => window.open('about:blank')")
    popup = popup_info.value
    popup.evaluate("""(m) => window.opener.document.querySelector('iframe[title="pages.ace.ace_editor"]')
        .contentWindow.postMessage(m, '*')""", forged)
    # a message the frame must take (the app's page, its parent) after the forged ones: once it has been seen,
    # the forged ones (posted earlier, delivered in order) have been too
    frame = _ace_frame(page)
    frame.evaluate("() => { window.__seen = 0; window.addEventListener('message', () => { window.__seen += 1; }); }")
    page.evaluate("""() => document.querySelector('iframe[title="pages.ace.ace_editor"]').contentWindow
        .postMessage({type: 'probe'}, '*')""")
    frame.wait_for_function("window.__seen >= 1")
    popup.close()

    state = frame.evaluate("""() => { const e = window.ace.edit(document.getElementById('editor'));
        return {ro: e.getReadOnly(), size: e.getFontSize(), marks: e.getSession().getAnnotations().length}; }""")
    assert state == {"ro": False, "size": "15px", "marks": 0}, state
    assert ace.locator(".ace_gutter-cell.ace_error, .ace_gutter-cell.ace_warning").count() == 0
    assert _ace_text(page).splitlines()[:2] == ["flowchart TD", 'PROBLEM(["Problem"])']
    assert page.evaluate("window.__pwned") is None
    assert off_host == [] and csp_violations(page) == []
    assert _values_from_ace(page) == []
    assert errors == []


def test_a_line_break_typed_after_a_marked_line_keeps_its_mark(recorded, streamlit_app):
    """Ace moves its gutter marks with the text as it changes, and a line break typed at the end of a marked
    line drops that line's mark; the checker then marks the same line again, the app's render brings the same
    marks, and the frame must still show them."""
    page, off_host, errors = recorded
    text = 'flowchart TD\nPROBLEM(["Problem"])\nC1["Custom"]\nPROBLEM --> C1 &\nC1 --> RETURN(["Return"])\n'
    ace = _open(page, _link(streamlit_app, text, "enter"))
    marks = ace.locator(".ace_gutter-cell.ace_error")
    line4 = marks.filter(has_text=re.compile(r"^\s*4\s*$"))
    expect(line4).to_have_count(1)
    expect(page.get_by_text(re.compile(r"M001 line 4: "))).to_be_visible()
    before = page.get_by_text(re.compile(r"M001 line 4: ")).first.inner_text()

    ace.locator(".ace_text-input").focus()
    page.keyboard.press("Control+Home")
    for _ in range(3):
        page.keyboard.press("ArrowDown")
    page.keyboard.press("End")
    sent = runs_sent(page)
    page.keyboard.press("Enter")
    wait_for_app(page, since=sent)  # the new text reached the app and was checked
    wait_for_app(page)
    expect(page.get_by_text(re.compile(r"M001 line 4: ")).first).to_have_text(before)  # the same diagnosis
    assert _ace_text(page).splitlines()[3:6] == ["PROBLEM --> C1 &", "", 'C1 --> RETURN(["Return"])']
    expect(line4).to_have_count(1)
    expect(marks).to_have_count(1)
    assert errors == []


def test_a_fast_run_of_keystrokes_reaches_the_app_and_survives_a_reload(recorded, streamlit_app):
    page, off_host, errors = recorded
    text = 'flowchart TD\nPROBLEM(["Problem"])\nC1["Custom"]\nPROBLEM --> C1\nC1 --> RETURN(["Return"])\n'
    url = _link(streamlit_app, text, "roundtrip")
    ace = _open(page, url)
    ace.locator(".ace_text-input").focus()
    page.keyboard.press("Control+Home")
    for _ in range(2):
        page.keyboard.press("ArrowDown")
    page.keyboard.press("End")
    typed = " %% <b>typed</b> fast"
    for ch in typed:  # each pause shorter and longer than the 200 ms debounce: runs overlap the typing
        page.keyboard.type(ch, delay=0)
        if ch == " ":
            page.wait_for_timeout(250)
    wait_for_app(page)
    page.wait_for_function(
        """(t) => (window.__mfMessages || []).some((m) => m.value !== null && m.value.includes(t))""",
        arg='C1["Custom"]' + typed)
    wait_for_app(page)
    sent = _values_from_ace(page)
    assert sent and sent[-1] == text.replace('C1["Custom"]', 'C1["Custom"]' + typed)
    page.reload(wait_until="domcontentloaded")  # the tab's draft: the app kept what the frame sent
    wait_for_app(page)
    ace = page.frame_locator(ACE)
    expect(ace.locator(".ace_content")).to_contain_text("<b>typed</b> fast")
    assert _ace_text(page).splitlines()[2] == 'C1["Custom"]' + typed
    assert errors == [] and off_host == []


def _comments(n: int) -> str:
    body = "".join(f"%% note {i:05d}: <b>{i}</b>\n" for i in range(n))
    return 'flowchart TD\nPROBLEM(["Problem"])\nC1["Custom"]\nPROBLEM --> C1\nC1 --> RETURN(["Return"])\n' + body


def test_a_text_of_5000_lines_is_shown_whole_and_its_last_line_can_be_edited(recorded, streamlit_app):
    page, off_host, errors = recorded
    text = _comments(5000)
    ace = _open(page, _link(streamlit_app, text, "long"))
    page.wait_for_function("(n) => { const f = [...document.querySelectorAll('iframe')].find((i) => "
                           "i.title === 'pages.ace.ace_editor'); return f && f.contentWindow.ace && "
                           "f.contentWindow.ace.edit(f.contentDocument.getElementById('editor')).getValue().length === n; }",
                           arg=len(text))
    ace.locator(".ace_text-input").focus()
    page.keyboard.press("Control+End")
    page.keyboard.insert_text("%% the end\n")
    page.wait_for_function("(t) => (window.__mfMessages || []).some((m) => m.value !== null && m.value.endsWith(t))",
                           arg="%% note 04999: <b>4999</b>\n%% the end\n", timeout=30_000)
    wait_for_app(page)
    assert _ace_text(page) == text + "%% the end\n"
    assert ace.locator(".ace_content b").count() == 0
    assert errors == [] and no_exceptions(page) == [] and off_host == []


def test_a_pasted_1_mb_line_leaves_the_editor_working(recorded, streamlit_app):
    page, off_host, errors = recorded
    text = 'flowchart TD\nPROBLEM(["Problem"])\nC1["Custom"]\nPROBLEM --> C1\nC1 --> RETURN(["Return"])\n'
    ace = _open(page, _link(streamlit_app, text, "huge"))
    ace.locator(".ace_text-input").focus()
    page.keyboard.press("Control+End")
    page.keyboard.insert_text("%% " + "<img src=x onerror=top.__pwned=1>" * 32_000 + "\n")  # ~1 MB, one line
    page.wait_for_function("() => (window.__mfMessages || []).some((m) => m.value !== null && m.value.length > 1e6)",
                           timeout=30_000)
    wait_for_app(page, timeout_ms=60_000)
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(text.replace("Custom", "Custom after"))
    page.wait_for_function("(t) => (window.__mfMessages || []).some((m) => m.value === t)",
                           arg=text.replace("Custom", "Custom after"), timeout=30_000)
    wait_for_app(page, timeout_ms=60_000)
    expect(page.get_by_text(re.compile("Valid for math tasks"))).to_be_visible(timeout=30_000)
    assert page.evaluate("window.__pwned") is None
    assert errors == [] and off_host == [] and no_exceptions(page) == []


def _app_under(workdir, base: str) -> StreamlitApp:
    """The app served under ``server.baseUrlPath`` (start_app asks for its health at the root)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MERMAIDFLOW_DB": str(workdir / "workspace.db"), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.address",
           "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", "--server.baseUrlPath", base]
    with open(workdir / "streamlit.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    app = StreamlitApp(url, workdir / "workspace.db", workdir / "streamlit.log", proc)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not _healthy(f"{url}/{base}"):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"streamlit not healthy at {url}/{base}; log tail:\n{app.log_tail()}", pytrace=False)
        time.sleep(0.2)
    return app


def test_under_a_base_path_component_files_go_plain_and_path_tricks_are_still_refused(browser, tmp_path):
    """``server.baseUrlPath``: the Ace frame loads its theme and key bindings from under it; its 1 MB chunk is
    sent as it is on disk even to a browser that takes gzip, the page itself still gzipped; and the requests that
    reach PlainComponentFiles with a path trick are refused by Streamlit as before (nothing outside the folder)."""
    import http.client

    from pages.ace import BUILD, vendor_chunk

    app = _app_under(tmp_path, "studio")
    context = new_context(browser)
    page = context.new_page()
    failed: list[str] = []
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    try:
        page.goto(f"{app.url}/studio/editor", wait_until="domcontentloaded")
        wait_for_app(page)
        ace = page.frame_locator(ACE)
        expect(ace.locator(".ace_editor.ace-chrome")).to_have_count(1)  # the theme file, from under /studio/
        frame = _ace_frame(page)
        frame.wait_for_function("() => !!window.ace.require('ace/keyboard/vscode')")
        assert failed == []

        def get(path: str) -> http.client.HTTPResponse:
            conn = http.client.HTTPConnection(urlsplit(app.url).netloc, timeout=30)
            conn.putrequest("GET", path, skip_accept_encoding=True)  # the path sent as it is
            conn.putheader("Accept-Encoding", "gzip, deflate, br")
            conn.endheaders()
            r = conn.getresponse()
            r.body = r.read()
            conn.close()
            return r

        chunk = vendor_chunk(BUILD)
        on_disk = (BUILD / "static" / "js" / chunk).read_bytes()
        folder = "/studio/component/pages.ace.ace_editor"
        r = get(f"{folder}/static/js/{chunk}")
        assert r.status == 200 and r.getheader("content-encoding") is None and r.body == on_disk
        assert get("/studio/editor").getheader("content-encoding") == "gzip"  # the rest: Streamlit's gzip
        assert get(f"/component/pages.ace.ace_editor/static/js/{chunk}").body != on_disk  # not without the base
        for trick in ("/../../_stcore/host-config", "/%2e%2e/%2e%2e/_stcore/host-config", "/..%2f..%2f..%2fetc%2fpasswd",
                      "/../../../../../../etc/passwd", "/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd", "//etc/passwd",
                      "/static/../../../../../etc/passwd"):
            r = get(folder + trick)
            assert r.status in (400, 403, 404), (trick, r.status)
            assert b"root:" not in r.body and b"allowedOrigins" not in r.body, trick
    finally:
        context.close()
        _stop(app.process)
