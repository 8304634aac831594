"""The Editor in a real browser: a typed error is marked in the gutter at its line within a second (typically
~0.5 s: Ace's 200 ms debounce, a ~40 ms script run, the redraw), listed beside the editor, and once fixed the
diagram renders. Saves the README screenshot."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from .conftest import (
    ACE,
    choose,
    goto_page,
    no_exceptions,
    runs_sent,
    save_screenshot,
    scroll_under_header,
    turn_on,
    wait_for_app,
    wait_for_still,
)

pytestmark = pytest.mark.browser

MERMAID = 'iframe[title="pages.drawing.mermaid_drawing"]'
BASE = 'flowchart TD\nPROBLEM(["Problem"])\nC1["Custom"]\n'


def _editor_text(ace) -> str:
    return "\n".join(ace.locator(".ace_editor").first.locator(".ace_line").all_inner_texts())


def test_error_marked_at_its_line_then_fixed(page, streamlit_app):
    js_errors: list[str] = []
    page.on("pageerror", lambda exc: js_errors.append(str(exc)))
    goto_page(page, streamlit_app, "/editor")
    ace = page.frame_locator(ACE)
    ace.locator(".ace_content").wait_for()
    page.frame_locator(MERMAID).locator("svg g.node").first.wait_for()

    ace.locator(".ace_text-input").focus()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(BASE)
    marker = ace.locator(".ace_gutter-cell.ace_error")
    line4 = marker.filter(has_text=re.compile(r"^\s*4\s*$"))
    page.keyboard.type("PROBLEM --> C1", delay=20)  # line 4 reads fine (the graph still lacks a RETURN)
    marker.first.wait_for()  # M004 (no RETURN) on line 1
    wait_for_app(page)
    expect(line4).to_have_count(0)
    timings = []
    for attempt in range(2):  # a second try only if the first was slow: one scheduling hiccup is not a bug
        page.keyboard.type(" &")  # one keystroke that breaks line 4: '&' joins nothing
        typed_at = time.monotonic()
        line4.wait_for(timeout=3000)
        timings.append(time.monotonic() - typed_at)
        expect(marker).to_have_count(1)  # a syntax error hides the graph checks: only line 4 is marked
        if timings[-1] < 1.0 or attempt:
            break
        page.keyboard.press("Backspace")
        page.keyboard.press("Backspace")
        line4.wait_for(state="detached", timeout=3000)
        wait_for_app(page)
    # The goal is 1 s on a machine that is not oversubscribed; past one runnable task per core (CI beside other
    # work on a shared 2-core host) the browser, Streamlit and the checker each get a share, so the budget scales.
    budget = 1.0 * min(3.0, max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1)))
    print(f"error marked {', '.join(f'{t:.2f}' for t in timings)} s after the keystroke (budget {budget:.2f} s)")
    assert min(timings) < budget, f"the gutter marked the error {min(timings):.2f} s after typing (budget {budget:.2f})"
    expect(page.get_by_text(re.compile(r"M001 line 4: .*expected .*found"))).to_be_visible()  # the list
    expect(page.get_by_text("1 error, 0 warnings")).to_be_visible()

    for _ in range(2):  # fix it: drop the dangling '&', send the answer to RETURN
        page.keyboard.press("Backspace")
    page.keyboard.press("End")
    page.keyboard.insert_text('\nC1 --> RETURN(["Return"])\n')
    # valid only once Mermaid 11's own verdict (computed off the typing path) has arrived
    expect(page.get_by_text("Valid for math tasks: no problems found (Mermaid 11 agrees).")).to_be_visible(
        timeout=20_000)
    expect(marker).to_have_count(0)
    wait_for_app(page)
    assert _editor_text(ace).splitlines()[3:5] == ["PROBLEM --> C1", 'C1 --> RETURN(["Return"])']
    labels = page.frame_locator(MERMAID).locator("svg g.node")
    labels.filter(has_text="Return").first.wait_for()
    assert {"Problem", "Custom", "Return"} <= {t.strip() for t in labels.all_text_contents()}
    assert no_exceptions(page) == []
    assert js_errors == []


def test_screenshot_of_an_example(page, streamlit_app):
    """Open the HumanEval case study from the example loader and keep a screenshot for the README."""
    page.set_viewport_size({"width": 1600, "height": 1000})
    goto_page(page, streamlit_app, "/editor")
    page.get_by_role("button", name="Open", exact=True).click()  # the examples are in the Open popover
    wait_for_app(page)
    choose(page, page.get_by_label("Example").first, "humaneval_case_study")
    wait_for_app(page)
    page.get_by_role("button", name="Load example").click()
    wait_for_app(page)
    page.keyboard.press("Escape")  # closed again: the screenshot shows the page
    wait_for_app(page)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")  # no tooltip on it
    page.mouse.move(5, 600)
    expect(page.get_by_role("button", name="Load example")).to_have_count(0)
    page.get_by_text("Valid for code tasks").first.wait_for()
    for _ in range(5):  # the new text's editor reports it once mounted: one more run, which redraws the drawing
        sent = runs_sent(page)
        page.frame_locator(MERMAID).locator('body[data-drawn="1"] svg g.node').filter(has_text="Decision") \
            .first.wait_for()
        wait_for_still(page)  # the drawing and the gutter laid out: nothing moves any more
        if runs_sent(page) == sent:
            break
        wait_for_app(page, since=sent)
    save_screenshot(page, "editor.png")
    assert no_exceptions(page) == []


def test_the_mmd_download_has_a_safe_file_name(page, streamlit_app):
    from urllib.parse import urlencode

    from flowcore.workspace.drafts import encode_text

    odd = "../../My flow: v2*?"  # a name from a copied link can be any text
    query = urlencode({"wf": odd, "task": "math", "code": encode_text(BASE + "RETURN([Return])\n")})
    goto_page(page, streamlit_app, f"/editor?{query}")
    page.get_by_role("button", name="Save", exact=True).click()  # the download is in the Save popover
    wait_for_app(page)
    with page.expect_download() as info:
        page.get_by_role("button", name="Download .mmd").click()
    assert info.value.suggested_filename == "My_flow_v2.mmd"  # the Export page's stem, not the raw name
    assert Path(info.value.path()).read_text().startswith("flowchart TD")


def test_the_canvas_node_dialog_is_the_apps_and_writes_the_text(page, streamlit_app):
    """A click on a canvas node opens the app's own dialog (operator type, prompt, ports), not the component's
    generic one ("Node Width", "Draggable"); Apply changes the text, and the checker judges the new text."""
    from urllib.parse import urlencode

    from flowcore.workspace.drafts import encode_text

    text = ('flowchart TD\n%% @prompt solver: Solve it.\nPROBLEM(["Problem"])\nC1["Custom<br/>(role: solver)"]\n'
            'RETURN(["Return"])\nPROBLEM --> C1\nC1 --> RETURN\n')
    goto_page(page, streamlit_app, f"/editor?{urlencode({'wf': 'dialog', 'task': 'math', 'code': encode_text(text)})}")
    turn_on(page, "Draw on a canvas")
    flow = page.frame_locator('iframe[title="pages.flow.streamlit_flow"]')
    flow.locator('.react-flow__node[data-id="C1"]').click()
    wait_for_app(page)
    dialog = page.locator(".st-key-ed_node_dialog")
    expect(dialog).to_contain_text("Node C1")
    expect(dialog.locator("textarea")).to_have_value("Solve it.")
    assert page.get_by_text("Node Width").count() == 0 and flow.get_by_text("Draggable").count() == 0
    choose(page, dialog.get_by_label("Operator type"), re.compile("^AnswerGenerate —"))
    wait_for_app(page)
    dialog.get_by_role("button", name="Apply").click()
    wait_for_app(page)
    ace = page.frame_locator(ACE).last  # the editor is rebuilt around the new text
    expect(ace.locator(".ace_content")).to_contain_text('C1["AnswerGenerate"]')
    expect(page.get_by_text(re.compile("Valid for math tasks"))).to_be_visible(timeout=20_000)
    expect(flow.locator('.react-flow__node[data-id="C1"]')).to_contain_text("AnswerGenerate")
    assert no_exceptions(page) == []


def _wide(n: int) -> str:
    """A valid math workflow with ``n`` Custom nodes side by side: wider than the drawing's box at 11 px."""
    lines = ["flowchart TD", "%% @prompt s: Solve it.", 'PROBLEM(["Problem"])', 'E["ScEnsemble"]', 'RETURN(["Return"])']
    lines += [f'C{i}["Custom<br/>(role: s)"]' for i in range(n)]
    lines += [f"PROBLEM --> C{i}" for i in range(n)] + [f"C{i} -->|solutions| E" for i in range(n)]
    return "\n".join(lines + ["E --> RETURN"]) + "\n"


def test_the_drawing_fits_without_tiny_text_pans_zooms_copies_and_falls_back_to_the_last_text_read(
        page, streamlit_app):
    from urllib.parse import urlencode

    from flowcore.workspace.drafts import encode_text

    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=streamlit_app.url)
    goto_page(page, streamlit_app, f"/editor?{urlencode({'wf': 'wide', 'task': 'math', 'code': encode_text(_wide(12))})}")
    frame = page.frame_locator(MERMAID).first
    expect(frame.locator("svg g.node")).to_have_count(15, timeout=20_000)  # Mermaid's first load
    body = frame.locator("body")
    text_px = float(body.get_attribute("data-text-px"))
    assert text_px >= 11, f"Fit drew {text_px} px text"
    view = frame.locator("#view")
    assert view.evaluate("v => v.scrollWidth > v.clientWidth")  # too wide at 11 px: the box scrolls instead

    view.hover()
    page.mouse.wheel(300, 0)  # the wheel pans
    page.wait_for_function("(f) => f.contentDocument.getElementById('view').scrollLeft > 0",
                           arg=page.locator(MERMAID).first.element_handle())
    before = float(body.get_attribute("data-scale"))
    page.keyboard.down("Control")
    page.mouse.wheel(0, -400)  # Ctrl + wheel zooms in at the cursor
    page.keyboard.up("Control")
    expect(body).not_to_have_attribute("data-scale", str(before))
    assert float(body.get_attribute("data-scale")) > before
    frame.get_by_role("button", name="Fit").click()
    assert float(body.get_attribute("data-text-px")) >= 11

    frame.get_by_role("button", name="Copy link").click()
    expect(frame.locator("#note")).to_have_text("Link copied")
    assert page.evaluate("navigator.clipboard.readText()") == page.url  # the link holds the workflow
    frame.get_by_role("button", name="Copy PNG").click()
    expect(frame.locator("#note")).to_have_text("PNG copied")
    size = page.evaluate("""async () => { const [item] = await navigator.clipboard.read();
        return (await item.getType('image/png')).size; }""")
    assert size > 5_000

    # a syntax error: the drawing stays exactly the last text that read (15 nodes, 25 edges), nothing invented
    ace = page.frame_locator(ACE)
    ace.locator(".ace_text-input").focus()
    page.keyboard.press("Control+End")
    page.keyboard.insert_text("PROBLEM --> |problem G\n")
    expect(page.get_by_text("The diagram shows the last readable version of the text.")).to_be_visible()
    expect(frame.locator("svg g.node")).to_have_count(15)
    assert frame.locator("svg .edgePaths path").count() == 25
    assert no_exceptions(page) == []


def test_an_unclosed_label_is_reported_where_it_opened_and_no_word_completion_pops_up(page, streamlit_app):
    """`-->|problem G` left open on line 20 was reported on line 21 with nothing about the label; Ace offered
    the document's words in a pop-up over the text every few letters."""
    from urllib.parse import urlencode

    from flowcore.workspace import library
    from flowcore.workspace.drafts import encode_text

    text = dict((n, t) for n, _, t in library.examples())["gsm8k_case_study"]
    rows = text.splitlines()
    assert rows[19] == "    PROBLEM -->|problem| P1 & P2 & P3 & P4 & P5"
    rows[19] = "    PROBLEM -->|problem G"
    query = urlencode({"wf": "label", "task": "math", "code": encode_text("\n".join(rows) + "\n")})
    goto_page(page, streamlit_app, f"/editor?{query}")
    ace = page.frame_locator(ACE)
    editor = ace.locator(".ace_editor").first
    editor.wait_for()
    # word completion is never loaded (pages/components/ace/editor.js runs Ace alone): Ace has no such option
    assert editor.evaluate("e => [e.env.editor.getOption('enableLiveAutocompletion'),"
                           " e.env.editor.getOption('enableBasicAutocompletion'),"
                           " !!window.ace.require('ace/ext/language_tools')]") == [None, None, False]
    line20 = ace.locator(".ace_gutter-cell.ace_error").filter(has_text=re.compile(r"^\s*20\s*$"))
    expect(line20).to_have_count(1)
    expect(ace.locator(".ace_gutter-cell.ace_error")).to_have_count(1)  # not line 21
    expect(page.get_by_text(re.compile(r"M001 line 20: the edge label opened here with '\|' is not closed\. "
                                       r"Mermaid's own position: line 21, column 11"))).to_be_visible()

    # typing words of the document: no completion list over the text
    ace.locator(".ace_text-input").focus()
    page.keyboard.press("Control+End")
    since = runs_sent(page)
    page.keyboard.type("PROB", delay=30)
    wait_for_app(page, since=since)  # the debounced value reached the app: a pop-up would be open by now
    expect(ace.locator(".ace_autocomplete")).to_have_count(0)
    assert no_exceptions(page) == []


def _centre(locator) -> tuple[float, float]:
    box = locator.bounding_box()
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def test_the_canvas_has_named_ports_and_a_palette_to_drag_operators_from(page, streamlit_app):
    """issue #30 item 8: a Review on the canvas shows a handle per input, named; a drag from Problem onto its
    'problem' handle writes `PROBLEM -->|problem| R1`; a Revise dragged from the strip above becomes V1."""
    from urllib.parse import urlencode, urlsplit

    from flowcore.workspace.drafts import encode_text

    off_host: list[str] = []  # nothing the canvas, its ports or its palette load comes from elsewhere
    page.on("request", lambda r: urlsplit(r.url).hostname not in ("127.0.0.1", "localhost", None)
            and not r.url.startswith(("data:", "blob:", "about:")) and off_host.append(r.url))
    text = ('flowchart TD\n%% @prompt solver: Solve it.\nPROBLEM(["Problem"])\nC1["Custom<br/>(role: solver)"]\n'
            'R1["Review"]\nRETURN(["Return"])\nPROBLEM --> C1\nC1 --> R1\nC1 --> RETURN\n')
    goto_page(page, streamlit_app, f"/editor?{urlencode({'wf': 'ports', 'task': 'math', 'code': encode_text(text)})}")
    turn_on(page, "Draw on a canvas")
    flow = page.frame_locator('iframe[title="pages.flow.streamlit_flow"]')
    review = flow.locator('.react-flow__node[data-id="R1"]')
    expect(review).to_be_visible(timeout=20_000)  # the canvas loads on demand
    expect(review.locator(".mf-port-name")).to_have_text(["solution", "problem"])  # ReviewOp's inputs, named
    expect(flow.locator('.react-flow__node[data-id="C1"] .mf-port')).to_have_count(0)  # one input: one handle
    assert page.locator('iframe[title="pages.flow.streamlit_flow"]').get_attribute("src").startswith(streamlit_app.url)

    # a drag from Problem's handle onto R1's 'problem' handle: an edge labelled with that port
    source = flow.locator('.react-flow__node[data-id="PROBLEM"] .react-flow__handle.source')
    target = review.locator('.react-flow__handle[data-handleid="problem"]')
    page.locator('iframe[title="pages.flow.streamlit_flow"]').scroll_into_view_if_needed()
    expect(target).to_be_visible()
    (x0, y0), (x1, y1) = _centre(source), _centre(target)
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, (y0 + y1) / 2, steps=8)
    page.mouse.move(x1, y1, steps=8)
    page.mouse.up()
    ace = page.frame_locator(ACE).last
    expect(ace.locator(".ace_content")).to_contain_text("PROBLEM -->|problem| R1", timeout=20_000)
    wait_for_app(page)

    # an operator dragged from the strip above the canvas becomes a node of the text
    chip = flow.locator("#mf-palette .mf-chip", has_text=re.compile("^Revise$"))
    expect(chip).to_be_visible()
    pane = flow.locator(".react-flow__pane")
    box = pane.bounding_box()
    at = {"x": box["width"] * 0.85, "y": 150}  # right: an empty spot away from the layout's middle layer
    # where that is in the drawing's own coordinates (the canvas's pan and zoom undone)
    want = pane.evaluate("""(p, at) => {
      const vp = document.querySelector('.react-flow__viewport');
      const m = new DOMMatrixReadOnly(getComputedStyle(vp).transform);
      return {x: (at.x - m.e) / m.a - 80, y: (at.y - m.f) / m.d - 20};  // the node is centred on the pointer
    }""", at)
    chip.drag_to(pane, target_position=at)
    expect(page.frame_locator(ACE).last.locator(".ace_content")).to_contain_text('V1["Revise"]', timeout=20_000)
    wait_for_app(page)
    v1 = flow.locator('.react-flow__node[data-id="V1"]')
    expect(v1).to_be_visible()
    got = v1.evaluate("n => { const m = new DOMMatrixReadOnly(getComputedStyle(n).transform); return {x: m.e, y: m.f}; }")
    assert abs(got["x"] - want["x"]) < 2 and abs(got["y"] - want["y"]) < 2, (got, want)  # where it was dropped
    expect(flow.locator('.react-flow__node[data-id="V1"] .mf-port-name')).to_have_text(
        ["solution", "feedback", "problem"])
    label = flow.locator(".react-flow__edge-text", has_text="problem")  # drawn once: the port's name says it
    expect(label).to_have_count(1)
    assert label.evaluate("t => getComputedStyle(t).display") == "none"
    scroll_under_header(page.get_by_role("heading", name="Draw"))  # the palette and canvas, nothing cut above
    save_screenshot(page, "canvas.png")
    assert no_exceptions(page) == [] and off_host == []


def test_a_decisions_routes_are_named_handles_and_a_drag_from_one_writes_that_route(page, streamlit_app):
    """issue #30 item 8: a Decision shows one source handle per route, named Passed and Failed; its Passed edge
    leaves from the Passed handle; a drag from the Failed handle onto a Revise writes `D1 -->|Failed| V1`
    (before, a Decision had one unnamed handle and the route was guessed)."""
    from urllib.parse import urlencode

    from flowcore.workspace.drafts import encode_text

    text = ('flowchart TD\n%% @prompt coder: Write the function.\nPROBLEM(["Problem"])\n'
            'ENTRY_POINT(["Entry point"])\nG1["CustomCodeGenerate<br/>(instruction: coder)"]\nT1["Test"]\n'
            'D1{"Decision<br/>tests passed?"}\nV1["Revise"]\nRETURN(["Return"])\nPROBLEM --> G1\n'
            'ENTRY_POINT -->|entry_point| G1\nG1 --> T1\nT1 --> D1\nD1 -->|Passed| RETURN\n')
    goto_page(page, streamlit_app, f"/editor?{urlencode({'wf': 'routes', 'task': 'code', 'code': encode_text(text)})}")
    turn_on(page, "Draw on a canvas")
    frame = page.locator('iframe[title="pages.flow.streamlit_flow"]')
    flow = page.frame_locator('iframe[title="pages.flow.streamlit_flow"]')
    decision = flow.locator('.react-flow__node[data-id="D1"]')
    expect(decision).to_be_visible(timeout=20_000)  # the canvas loads on demand
    expect(decision.locator(".mf-route-name")).to_have_text(["Passed", "Failed"])
    expect(decision.locator(".react-flow__handle.source")).to_have_count(2)
    expect(flow.locator('.react-flow__node[data-id="T1"] .mf-route')).to_have_count(0)  # only a Decision routes

    # the Passed edge starts at the Passed handle (its path's first point, in the page's pixels)
    frame.scroll_into_view_if_needed()
    passed = decision.locator('.react-flow__handle[data-handleid="Passed"]')
    failed = decision.locator('.react-flow__handle[data-handleid="Failed"]')
    edge = flow.locator(".react-flow__edge", has=flow.locator(".react-flow__edge-text", has_text="Passed"))
    expect(edge).to_have_count(1)
    start = edge.locator("path.react-flow__edge-path").evaluate("""p => {
      const a = p.getPointAtLength(0), m = p.getScreenCTM();
      return [a.x * m.a + a.y * m.c + m.e, a.x * m.b + a.y * m.d + m.f]; }""")
    fbox = frame.bounding_box()
    (px, _), (fx, _) = _centre(passed), _centre(failed)
    assert abs(start[0] + fbox["x"] - px) < abs(start[0] + fbox["x"] - fx), (start, px, fx)

    # a drag from the Failed handle onto V1: an edge labelled with that route, whatever input it lands on
    target = flow.locator('.react-flow__node[data-id="V1"] .react-flow__handle[data-handleid="solution"]')
    expect(target).to_be_visible()
    (x0, y0), (x1, y1) = _centre(failed), _centre(target)
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, (y0 + y1) / 2, steps=8)
    page.mouse.move(x1, y1, steps=8)
    page.mouse.up()
    expect(page.frame_locator(ACE).last.locator(".ace_content")).to_contain_text("D1 -->|Failed| V1", timeout=20_000)
    wait_for_app(page)
    # the routes now leave from the side their targets are on, so the two edges do not cross
    names = flow.locator('.react-flow__node[data-id="D1"] .mf-route-name')
    expect(names).to_have_count(2)
    v1, ret = (_centre(flow.locator(f'.react-flow__node[data-id="{n}"]'))[0] for n in ("V1", "RETURN"))
    expect(names).to_have_text(["Failed", "Passed"] if v1 < ret else ["Passed", "Failed"])
    label = flow.locator(".react-flow__edge-text", has_text="Failed")  # drawn once: the handle's name says it
    expect(label).to_have_count(1)
    assert label.evaluate("t => getComputedStyle(t).display") == "none"
    assert no_exceptions(page) == []
