"""Attacks on the Editor's first drawing made on the server (flowcore/ui/first_drawing.py) as a team server sees
them: several users drawing at once, texts made to hold the one drawing thread, to fill the memory or the queue,
and SVG documents that would smuggle a DTD past the XML check."""

from __future__ import annotations

import base64
import random
import threading
import time

import pytest

from flowcore.mermaid.engines import v8 as mermaid_v8
from flowcore.ui import first_drawing as fd

SVG = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"><text>{}</text></svg>'


def _svg_of(image: dict) -> str:
    return base64.b64decode(image["src"].split(",", 1)[1]).decode()


@pytest.fixture
def fake(monkeypatch):
    fd.clear()
    monkeypatch.setattr(fd, "engine_ready", lambda: True)
    yield monkeypatch
    fd.clear()


@pytest.fixture(scope="module")
def v8_engine():
    from flowcore.mermaid.engines import js

    if not mermaid_v8.available() or js.backend("render") != "v8":
        pytest.skip("the V8 drawing engine is not available")
    fd.clear()
    yield js
    fd.clear()


def test_two_users_drawing_at_once_each_get_their_own_drawing(v8_engine):
    """Export (a page's thread) and the Editor's first drawing (the drawing thread) use one V8 child: its replies
    were taken by whichever thread read the pipe first, so one user's workflow was drawn, cached and shown as
    another's (2 of 6 swapped before the fix)."""
    js = v8_engine
    for rnd in range(2):
        texts = [f'flowchart TD\n  N{i}["secret{rnd}x{i}"] --> M{i}["other{i}"]\n' for i in range(6)]
        got: dict[str, str] = {}

        def export(text: str, got: dict = got) -> None:
            got[text] = js.render_svg_with(text, fd.CONFIG)

        def editor(text: str, got: dict = got) -> None:
            got[text] = _svg_of(fd.image(text, budget_s=60))

        threads = [threading.Thread(target=export if i % 2 else editor, args=(t,)) for i, t in enumerate(texts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for i, text in enumerate(texts):
            others = [f"secret{rnd}x{j}<" for j in range(6) if j != i]
            assert f"secret{rnd}x{i}<" in got[text] and not any(o in got[text] for o in others), (i, rnd)


def test_a_drawing_that_never_settles_holds_the_engine_seconds_not_a_minute(v8_engine):
    """80 nodes (drawn live) and 1,900 edges in 31,000 characters: Mermaid's layout ran past the engine's minute,
    the drawing thread (and Export, waiting for the same engine) held for all of it."""
    from flowcore import parse_lenient
    from flowcore.ui import view

    rng = random.Random(1)
    text = "flowchart TD\n" + "".join(f'  N{i}["n{i}"]\n' for i in range(80)) \
        + "".join(f"  N{rng.randrange(80)} --> N{rng.randrange(80)}\n" for _ in range(1900))
    w = parse_lenient(text)[0]
    assert view.draw_live(w)
    code = view.diagram_code(w)
    assert len(code) <= fd.MAX_CODE_CHARS
    t0 = time.monotonic()
    assert fd.image(code, budget_s=120) is None
    assert time.monotonic() - t0 < fd.DRAW_TIMEOUT_S + 25  # the deadline, and a new V8 child started
    assert fd.image('flowchart TD\n  A["after"] --> B\n', budget_s=60) is not None  # the engine draws again


def test_a_killed_drawing_child_is_replaced_and_the_next_text_is_drawn(v8_engine):
    js = v8_engine
    eng = js._engine("render")
    done = threading.Event()
    out: list = []
    slow = "flowchart TD\n" + "".join(f'  A{i}["node {i}"] --> A{i + 1}\n' for i in range(70))
    threading.Thread(target=lambda: (out.append(fd.image(slow, budget_s=60)), done.set())).start()
    end = time.monotonic() + 30  # the child drawing it is up (a test before may have left none: started on demand)
    while (eng._process is None or not eng._process.is_alive()) and time.monotonic() < end:
        time.sleep(0.01)
    time.sleep(0.3)  # the drawing is under way
    eng._process.kill()
    assert done.wait(60)
    assert fd.image('flowchart TD\n  K["killed before"] --> L\n', budget_s=60) is not None
    # the child dies between drawings (out of memory, killed): every drawing failed from then on, Export's too
    eng._process.kill()
    eng._process.join(5)
    assert fd.image('flowchart TD\n  K["killed idle"] --> L\n', budget_s=60) is not None
    assert ">killedagain<" in js.render_svg_with('flowchart TD\n  K["killedagain"] --> L\n', fd.CONFIG)


def test_a_child_killed_just_before_a_drawing_does_not_fail_it(v8_engine):
    """A child killed between drawings reads as alive until it is reaped: the next drawing was written to its
    closed pipe and failed (20 of 20 before the fix; the first drawing cached it as undrawable, Export raised)."""
    js = v8_engine
    js.render_svg_with('flowchart TD\n  A["warm"] --> B\n', fd.CONFIG)
    eng = js._engine("render")
    for i in range(5):
        eng._process.kill()  # not joined: the next drawing finds it dying
        assert f">k{i}<" in js.render_svg_with(f'flowchart TD\n  K["k{i}"] --> L\n', fd.CONFIG)
    with pytest.raises(js.MermaidRenderError):  # Mermaid's own refusal is not drawn twice, and still raised
        js.render_svg_with("flowchart TD\n  A -->\n", fd.CONFIG)


def test_the_editor_path_hands_the_server_no_directive_and_no_markup(v8_engine):
    """What the Editor draws is view.diagram_code of the workflow (display_copy): a pasted text's %%{init}%%,
    front matter, themeCSS/fontFamily url(), htmlLabels and <img> labels never reach the server's Mermaid."""
    from flowcore import parse_lenient
    from flowcore.ui import view

    hostile = ('---\nconfig:\n  themeCSS: "@import url(http://evil.test/a.css);"\n---\n'
               '%%{init: {"securityLevel": "loose", "htmlLabels": true, "flowchart": {"htmlLabels": true}, '
               '"fontFamily": "x;background:url(http://evil.test/f)", "themeCSS": "g{background:url(http://evil.test/c)}"}}%%\n'
               'flowchart TD\n  A["<img src=http://evil.test/i.png>"] -->|"&lt;image href=http://evil.test/e&gt;"| B\n'
               '  style B fill:url(http://evil.test/s)\n  classDef c fill:#fff,background:url(http://evil.test/d)\n'
               '  class A c\n')
    image = fd.image(view.diagram_code(parse_lenient(hostile)[0]), budget_s=60)
    assert image is not None
    svg = _svg_of(image)
    assert ">‹img<" in svg and ">src=http://evil.test/i.png<" in svg  # the label, as text
    for bad in ("url(http", "@import", 'href="http', 'src="http', "<image", "<img", "<foreignObject", "<script"):
        assert bad not in svg, bad


def test_the_queue_of_texts_waiting_for_the_drawing_thread_is_bounded(fake):
    """Every new session's first view of a new text queued a drawing: 200 links were 200 drawings queued, the
    drawing thread busy long after those sessions left and every other user's text behind them."""
    drawn: list[str] = []

    def slow(code: str) -> str:
        time.sleep(0.05)
        drawn.append(code)
        return SVG.format("x")

    fake.setattr(fd, "_draw", slow)
    for i in range(200):
        fd.image(f"flowchart TD\n  H{i} --> X\n", budget_s=0.001)
    deadline = time.monotonic() + 3
    while fd._pending and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not fd._pending and len(drawn) <= fd.MAX_PENDING + 1
    assert fd.image("flowchart TD\n  Mine --> Y\n", budget_s=2) is not None  # a user's text is drawn again


def test_the_images_kept_for_every_session_hold_a_bounded_memory(fake):
    """64 images of up to 4 MB each (5.3 MB as data URLs) were kept: 340 MB of a team server's memory for
    anyone's texts."""
    big = SVG.format("w " * 900_000)  # 1.8 MB
    fake.setattr(fd, "_draw", lambda code: big)
    for i in range(fd.CACHE_SIZE):
        assert fd.image(f"flowchart TD\n  Big{i} --> X\n", budget_s=10) is not None
    assert sum(len(v["src"]) for v in fd._cache.values() if v) <= fd.MAX_CACHE_BYTES
    assert fd._cached_bytes == sum(len(v["src"]) for v in fd._cache.values() if v)
    assert fd.cached(f"flowchart TD\n  Big{fd.CACHE_SIZE - 1} --> X\n") is not None  # the newest are kept


@pytest.mark.parametrize("svg", [
    "<!--" + "x" * 3000 + "--><!DOCTYPE svg [<!ENTITY a 'pwned'>]><svg xmlns='http://www.w3.org/2000/svg' "
    "viewBox='0 0 1 1'><text>&a;</text></svg>",  # the DTD past the first 2,000 characters
    "<?xml version='1.0'?>" + " " * 2500 + "<!doctype svg [<!ENTITY a 'b'>]><svg "
    "xmlns='http://www.w3.org/2000/svg' viewBox='0 0 1 1'>&a;</svg>",
    "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 1 1'><text>&xxe;</text></svg>",  # an undeclared entity
])
def test_no_dtd_or_entity_passes_the_xml_check(svg):
    assert fd.to_image(svg) is None


def test_a_huge_or_odd_viewbox_is_not_shown():
    ns = "xmlns='http://www.w3.org/2000/svg'"
    for box in ("0 0 1e9 10", "0 0 inf 10", "0 0 -5 10", "0 0 10", "a b c d"):
        assert fd.to_image(f"<svg {ns} viewBox='{box}'/>") is None, box
    assert fd.to_image(f"<svg {ns} viewBox='0,0,10,20'/>")["h"] == 20  # commas are Mermaid's too


def test_a_child_started_after_a_page_has_run_does_not_run_that_page(v8_engine, tmp_path, monkeypatch):
    """Streamlit installs each page run's script as ``__main__`` (AppTest a generated one), and multiprocessing's
    spawn re-runs ``__main__``'s file in a new child: a drawing child replaced after a page had run executed that
    page and died (in a full test run, every later drawing failed). A child now starts with a bare ``__main__``."""
    import sys
    import types

    js = v8_engine
    page = tmp_path / "page.py"
    flag = tmp_path / "ran"
    page.write_text(f"open({str(flag)!r}, 'w').close()\nraise SystemExit('a page ran in the drawing child')\n")
    fake_main = types.ModuleType("__main__")
    fake_main.__file__ = str(page)
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    eng = js._engine("render")
    js.render_svg_with('flowchart TD\n  A["before"] --> B\n', fd.CONFIG)  # a child is up
    eng._process.kill()
    eng._process.join(10)
    svg = js.render_svg_with('flowchart TD\n  A["afterpage"] --> B\n', fd.CONFIG)  # a new child draws it
    assert "afterpage" in svg and not flag.exists() and sys.modules["__main__"] is fake_main


def _recording_drawer(fake, pause) -> list[str]:  # noqa: ANN001 - the fixture's monkeypatch, pause() -> Any
    """Draw with a fake that records each code it is asked for and pauses before answering."""
    calls: list[str] = []

    def draw(code: str) -> str:
        calls.append(code)
        pause()
        return SVG.format(code.split()[-1])

    fake.setattr(fd, "_draw", draw)
    return calls


def test_a_member_cannot_learn_from_the_cache_what_another_member_drew(fake):
    """A drawing that came back at once had been drawn before: with one cache for the whole team server, a member
    who guessed another's exact text learned that it had been drawn (a timing side channel). Each member's
    drawings are now theirs; the warm-up's (no scope: the bundled default workflow) are everyone's."""
    calls = _recording_drawer(fake, lambda: time.sleep(0.3))
    secret = "flowchart TD\n  Merger --> Acme\n"
    assert fd.image(secret, budget_s=10, scope="alice@example.com") is not None
    assert fd.cached(secret, "alice@example.com") is not None
    assert fd.cached(secret, "mallory@example.com") is None  # not hers to see
    t0 = time.monotonic()
    assert fd.image(secret, budget_s=0.05, scope="mallory@example.com") is None  # drawn anew, not answered at once
    assert time.monotonic() - t0 >= 0.05
    deadline = time.monotonic() + 10
    while fd._pending and time.monotonic() < deadline:
        time.sleep(0.02)
    assert calls.count(secret) == 2  # her own drawing, made for her
    public = "flowchart TD\n  Default --> Shown\n"
    assert fd.image(public, budget_s=10) is not None  # the warm-up's drawing, no scope
    assert fd.cached(public, "mallory@example.com") is not None and calls.count(public) == 1


def test_a_member_neither_joins_another_members_drawing_in_progress_nor_writes_the_public_drawings(fake):
    """While another member's text is still being drawn, a member who asks for the same text waits for a drawing of
    her own (joining the one in progress would answer her when it is done: the text had been asked for), and no
    member's drawing is ever shown to everyone (only the warm-up draws without a scope)."""
    release = threading.Event()
    calls = _recording_drawer(fake, lambda: release.wait(10))
    secret = "flowchart TD\n  Layoffs --> March\n"
    assert fd.image(secret, budget_s=0.01, scope="alice@example.com") is None  # drawing, held
    assert fd.image(secret, budget_s=0.01, scope="mallory@example.com") is None
    assert len(fd._pending) == 2  # two drawings queued, one per member: hers is not Alice's
    release.set()
    deadline = time.monotonic() + 10
    while fd._pending and time.monotonic() < deadline:
        time.sleep(0.02)
    assert calls == [secret, secret]
    assert fd.cached(secret, "alice@example.com") is not None and fd.cached(secret, "mallory@example.com") is not None
    assert fd.cached(secret) is None and fd.cached(secret, "bob@example.com") is None  # nobody else's, not public


@pytest.mark.xfail(strict=True, reason="left open: the cache's bounds are shared by every member (see the docstring)")
def test_a_member_cannot_tell_from_her_own_drawings_being_evicted_that_another_member_drew(fake):
    """Known and accepted, not fixed: the cache's bounds (CACHE_SIZE, MAX_CACHE_BYTES) are the whole server's, so
    a member who fills the cache with her own drawings sees one of them go when another member has a new text
    drawn (and, through the byte budget, about how large its drawing is). It says when another member drew a new
    text, never which: the same as the one drawing thread's timing does, which no cache can hide. Each member's
    own quota would close it, but then the memory kept grows with the number of members (every address the
    provider vouches for when MERMAIDFLOW_MEMBERS is unset)."""
    fake.setattr(fd, "_draw", lambda code: SVG.format(code.split()[-1]))
    mine = [f"flowchart TD\n  Probe{i} --> P\n" for i in range(fd.CACHE_SIZE)]
    for text in mine:
        assert fd.image(text, budget_s=10, scope="mallory@example.com") is not None
    assert fd.image("flowchart TD\n  Secret --> S\n", budget_s=10, scope="alice@example.com") is not None
    assert all(fd.cached(text, "mallory@example.com") is not None for text in mine)
