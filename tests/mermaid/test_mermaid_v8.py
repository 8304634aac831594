"""Mermaid in V8 (mini-racer): the engine the hard check and export use when it is installed, its speed-ups proven
to change nothing, and the fall-back to QuickJS when V8 cannot start."""

from __future__ import annotations

import json

import pytest

from flowcore.mermaid.engines import js as mermaid_js
from flowcore.mermaid.engines import v8 as mermaid_v8
from flowcore.mermaid.engines.js import parse_check

pytestmark = pytest.mark.skipif(not mermaid_v8.available(), reason="mini-racer is not installed")

# Math.random seeded (roughjs draws shapes with it), so two renders of one text can be compared byte for byte
_SEED_JS = ("(function(){let a=12345;Math.random=function(){a|=0;a=a+0x6D2B79F5|0;let t=Math.imul(a^a>>>15,1|a);"
            "t=t+Math.imul(t^t>>>7,61|t)^t;return((t^t>>>14)>>>0)/4294967296;};})();")
DRAWING = """flowchart TD
    PROBLEM(["Problem"])
    C1["Custom<br/>(role: solver)"]
    C2{"Decide"}
    subgraph S [Two steps]
      C3[["Program"]] -.-> C4[("Store")]
    end
    classDef hot fill:#f96
    class C2 hot
    PROBLEM -->|input| C1 --> C2 -->|Passed| C3
    C4 ==> RETURN(["Return"])
"""


@pytest.fixture()
def engine_state():
    """The module's engines as they were, restored after a test that starts its own."""
    saved = (dict(mermaid_js._engines), dict(mermaid_js._backends), dict(mermaid_js._fallbacks),
             dict(mermaid_js._parse_cache), dict(mermaid_js._svg_cache))
    mermaid_js._engines.clear()
    mermaid_js._parse_cache.clear()
    mermaid_js._svg_cache.clear()
    yield
    for eng in mermaid_js._engines.values():
        eng.close()
    for store, old in zip((mermaid_js._engines, mermaid_js._backends, mermaid_js._fallbacks,
                           mermaid_js._parse_cache, mermaid_js._svg_cache), saved, strict=True):
        store.clear()
        store.update(old)


def _seeded_render(speedups: bool, text: str) -> str:
    from mermaidx.engines import v8_engine
    from mermaidx.engines._common import TextMeasurer

    known: dict = {}

    def build():
        fresh = mermaid_v8.build_context(speedups=speedups)
        contexts.append(fresh)
        fresh.eval(_SEED_JS)
        return fresh

    contexts: list = []
    first = build()
    try:
        return v8_engine._render(first, text, "default", dict(mermaid_js.MERMAID_CONFIG), None, known,
                                 TextMeasurer().foreign_object, build)
    finally:
        for c in contexts:  # every context closed: a dropped one can hang the interpreter's exit
            c.close()


def test_shim_speedups_draw_the_same_svg():
    plain = _seeded_render(False, DRAWING)
    fast = _seeded_render(True, DRAWING)
    assert "Two steps" in fast and "Custom" in fast
    assert fast == plain


def test_v8_has_the_regexp_statics_the_shim_wrapper_was_for():
    ctx = mermaid_v8.build_context()
    try:
        assert ctx.eval("'abcd'.match(/(b)(c)/); [RegExp.$1, RegExp.$2, RegExp['$&'], RegExp['$`'], "
                        "RegExp[\"$'\"]].join('|')") == "b|c|bc|a|d"
        # the wrapper is gone: exec is the engine's own
        assert ctx.eval("RegExp.prototype.exec.toString().includes('[native code]')")
    finally:
        ctx.close()


def test_the_v8_parse_engine_is_fast_and_agrees_with_quickjs(engine_state):
    v8 = mermaid_v8.V8ParseEngine()
    v8.start()
    qjs = mermaid_js._ParseEngine()
    qjs.start()
    try:
        assert v8.fast_ready
        for text in (DRAWING, DRAWING + "  C4 --> (\n", "flowchart TD\n  A[x] --> B{y\n", "graph TDA;\n", "pie\n"):
            assert v8.parse(text) == qjs.parse(text), text
        assert v8.graph(DRAWING) == qjs.graph(DRAWING)
    finally:
        v8.close()
        qjs.close()


def test_v8_is_the_default_engine_and_quickjs_can_be_chosen(engine_state, monkeypatch):
    monkeypatch.delenv(mermaid_js.ENGINE_ENV, raising=False)
    assert mermaid_js.backend("parse") == "v8"
    assert parse_check(DRAWING) is None
    mermaid_js._engines.pop("parse").close()
    monkeypatch.setenv(mermaid_js.ENGINE_ENV, "quickjs")
    assert mermaid_js.backend("parse") == "quickjs"
    err = parse_check(DRAWING + "  C4 --> (\n")
    assert err is not None and err.line == 12


def test_when_v8_cannot_start_quickjs_checks_and_draws(engine_state, monkeypatch, tmp_path):
    monkeypatch.delenv(mermaid_js.ENGINE_ENV, raising=False)

    def broken(*_a, **_k):
        raise OSError("libmini_racer.so: cannot open shared object file")

    monkeypatch.setattr(mermaid_v8, "build_context", broken)
    monkeypatch.setattr(mermaid_v8, "render_engine", broken)
    # the hard check's engine lives in a child process (engines/process.py): break V8 there the same way, with a
    # py_mini_racer whose MiniRacer cannot load its library, found first on the child's path
    shadow = tmp_path / "py_mini_racer"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("class MiniRacer:\n    def __init__(self):\n        raise OSError("
                                        "'libmini_racer.so: cannot open shared object file')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    which = mermaid_js.backend("parse")
    assert which.startswith("quickjs (V8 did not start: OSError: libmini_racer.so")
    assert parse_check(DRAWING) is None
    assert parse_check(DRAWING.replace('C2{"Decide"}', 'C2{"Decide"')) is not None
    svg = mermaid_js.render_svg("flowchart LR\n  A[one] --> B[two]\n")
    assert mermaid_js.backend("render").startswith("quickjs") and "one" in svg and "two" in svg


def test_v8_drawing_process_renders_and_learns_label_sizes(engine_state, monkeypatch):
    monkeypatch.delenv(mermaid_js.ENGINE_ENV, raising=False)
    svg = mermaid_js.render_svg(DRAWING)
    assert mermaid_js.backend("render") == "v8"
    assert svg.lstrip().startswith("<svg") and "Two steps" in svg and "Program" in svg
    assert json.loads(json.dumps(svg)) == svg  # plain text, no bytes


def test_png_has_the_pixels_novasvg_paints():
    import io

    from mermaidx.raster import render_bitmap
    from PIL import Image

    text = "flowchart LR\n  A[one] --> B((two))\n"
    for background in ("#ffffff", None):
        png = mermaid_js.render_png(text, scale=1.5, background=background)
        ours = Image.open(io.BytesIO(png))
        ref = Image.open(io.BytesIO(render_bitmap(mermaid_js.render_svg(text), scale=1.5,
                                                  background=background).to_bytes("png")))
        assert ours.size == ref.size and ours.convert("RGBA").tobytes() == ref.convert("RGBA").tobytes()


def test_a_warm_drawing_context_draws_what_a_fresh_one_draws():
    """The drawing child keeps one context for every drawing and resets its state (v8.RESET_JS, the document,
    Mermaid's config): after another diagram, the same text draws the same bytes as in a fresh context."""
    from mermaidx.engines._common import TextMeasurer

    fresh = _seeded_render(True, DRAWING)
    ctx = mermaid_v8.build_context()
    known: dict = {}

    def draw(text: str) -> str:
        ctx.eval(_SEED_JS)
        return mermaid_v8.render_warm(ctx, text, "default", dict(mermaid_js.MERMAID_CONFIG), None, known,
                                      TextMeasurer().foreign_object)

    try:
        draw("flowchart LR\n  X[other] --> Y((thing))\n  subgraph Q\n  Z\n  end\n  classDef hot fill:#f00\n")
        draw(DRAWING)  # learns its label sizes (two passes, so the seeded random numbers differ)
        assert draw(DRAWING) == fresh
    finally:
        ctx.close()


def test_the_drawing_process_reuses_its_context_and_recovers_after_an_error(engine_state, monkeypatch):
    monkeypatch.delenv(mermaid_js.ENGINE_ENV, raising=False)
    eng = mermaid_v8.render_engine()
    eng.start()
    try:
        cfg = dict(mermaid_js.MERMAID_CONFIG)
        first = eng.render_svg("flowchart LR\n  A[one] --> B[two]\n", "default", cfg, None)
        with pytest.raises(Exception):  # noqa: B017 - mermaidx's own error type
            eng.render_svg("flowchart LR\n  A --> (\n", "default", cfg, None)
        again = eng.render_svg("flowchart LR\n  A[one] --> B[two]\n", "default", cfg, None)
        assert "one" in again and again.count("<g") == first.count("<g")
    finally:
        eng.close()


# Texts that exercise what the drawing speed-ups touch: config changes (directive, front matter, theme), labels
# DOMPurify changes (a script, a link with a target), markdown, classes and styles the shim's cascade resolves.
SPEEDUP_TEXTS = [
    '%%{init: {"theme": "forest", "flowchart": {"curve": "basis"}}}%%\nflowchart LR\n  A[one] -->|x| B((two))\n',
    '---\nconfig:\n  theme: dark\n  themeVariables:\n    primaryColor: "#ff0000"\n---\nflowchart TD\n'
    '  A["`**bold** _it_`"] --> B[/lean/]\n  click A "https://example.com" "tip"\n',
    'flowchart TD\n  A[<a href="https://x.y" target="_blank">link</a>] --> B["<b>b</b><script>alert(1)</script>"]\n'
    '  style A fill:#f9f,stroke:#333,font-weight:bold\n  linkStyle 0 stroke:#f00\n',
    DRAWING,
]


def _corpus() -> list[str]:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "assets"
    return SPEEDUP_TEXTS + [p.read_text(encoding="utf-8") for p in sorted(root.glob("examples/*case_study.mmd"))]


def test_the_drawing_speedups_apply_to_the_bundled_mermaid():
    from mermaidx.engines._common import context_scripts as mx_scripts

    from flowcore.mermaid.engines.draw_speedups import patch_mermaid

    assert patch_mermaid(mx_scripts()[2])[1] == []


def test_a_type_selector_finds_what_the_selector_machinery_finds():
    """draw_speedups' querySelector of a bare type selector ('style') against the shim's general one (reached by a
    selector that is not bare: ':not(.never)' adds nothing), on a tree with SVG and HTML, nested and mixed-case."""
    ctx = mermaid_v8.build_context()
    try:
        got = json.loads(ctx.eval("""(() => {
          __resetDocument();
          const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
          document.body.appendChild(svg);
          const g = svg.appendChild(document.createElementNS("http://www.w3.org/2000/svg", "g"));
          const fo = g.appendChild(document.createElementNS("http://www.w3.org/2000/svg", "foreignObject"));
          fo.appendChild(document.createElement("div")).appendChild(document.createElement("span"));
          svg.appendChild(document.createElementNS("http://www.w3.org/2000/svg", "style")).textContent = "g{x:1}";
          document.head.appendChild(document.createElement("style"));
          const out = [];
          for (const sel of ["style", "g", "foreignObject", "FOREIGNOBJECT", "div", "span", "svg", "nope", "g-x"]) {
            for (const root of [document, svg, g]) {
              const fast = root.querySelector(sel), slow = root.querySelector(sel + ":not(.never)");
              out.push([sel, fast === slow, fast ? fast.tagName : null]);
            }
          }
          return JSON.stringify(out);
        })()"""))
    finally:
        ctx.close()
    assert all(same for _, same, _ in got), [g for g in got if not g[1]]
    found = {sel: tag for sel, _, tag in got if tag}
    assert found.keys() == {"style", "g", "foreignObject", "FOREIGNOBJECT", "div", "span", "svg"}, found


def test_the_drawing_speedups_draw_the_same_bytes_fresh_and_warm():
    """Mermaid's config copy, DOMPurify's memory and the shim's cascade (draw_speedups) against the plain context:
    fresh, and in one warm context that drew the other texts (another theme, a directive) just before."""
    from mermaidx.engines._common import TextMeasurer

    texts = _corpus()
    plain = [_seeded_render(False, t) for t in texts]
    assert [_seeded_render(True, t) for t in texts] == plain
    ctx = mermaid_v8.build_context()
    known: dict = {}
    try:
        for text, want in zip(texts + texts[::-1], plain + plain[::-1], strict=True):
            mermaid_v8.render_warm(ctx, text, "default", dict(mermaid_js.MERMAID_CONFIG), None, known,
                                   TextMeasurer().foreign_object)  # sizes learned
            ctx.eval(_SEED_JS)
            assert mermaid_v8.render_warm(ctx, text, "default", dict(mermaid_js.MERMAID_CONFIG), None, known,
                                          TextMeasurer().foreign_object) == want, text[:60]
    finally:
        ctx.close()


def test_getconfig_is_mermaids_copy_after_config_changes():
    """The cached copy follows every change of Mermaid's config (initialize, setConfig, a directive's reset)."""
    fast, plain = mermaid_v8.build_context(), mermaid_v8.build_context(speedups=False)
    js = ("(function(){const out=[];const api=mermaid.mermaidAPI;"
          "mermaid.initialize({theme:'dark', flowchart:{curve:'step'}});out.push(api.getConfig());"
          "const c=api.getConfig(); c.flowchart.curve='mutated'; c.theme='x'; out.push(api.getConfig());"
          "api.setConfig({flowchart:{htmlLabels:false}, fontSize: 20});out.push(api.getConfig());"
          "api.reset();out.push(api.getConfig());"
          "mermaid.initialize({theme:'forest'});out.push(api.getConfig());return JSON.stringify(out);})()")
    try:
        got, want = json.loads(fast.eval(js)), json.loads(plain.eval(js))
        assert got == want
        assert got[1]["flowchart"]["curve"] == "step" and got[2]["fontSize"] == 20
    finally:
        fast.close()
        plain.close()


def test_a_text_whose_drawing_kills_the_child_is_not_drawn_past_its_deadline(engine_state, monkeypatch):
    """A child that dies under a drawing is replaced and the text drawn once more (a child killed between drawings
    and not reaped yet). A text that kills its child (the kernel's OOM killer, SIGKILL) some seconds in was then
    drawn twice, each time with the whole deadline: Export's minute became two, the first drawing's DRAW_TIMEOUT_S
    twice itself, and the lock Export and the first drawing share was held for all of it. The second drawing gets
    what is left of the deadline."""
    import os
    import signal
    import threading
    import time

    monkeypatch.delenv(mermaid_js.ENGINE_ENV, raising=False)
    deadline_s, kill_after_s = 4.0, 2.5  # the text kills its child 2.5 s into each drawing
    eng = mermaid_v8.render_engine(timeout_ms=int(deadline_s * 1000))
    eng.start()
    endless = "flowchart TD\n" + "".join(f"  N{i % 80} --> N{(i * 37 + 11) % 80}\n" for i in range(1900))
    killed: list[int] = []
    stop = threading.Event()

    def hostile_text() -> None:  # what the text does to whichever child draws it
        seen, since = None, 0.0
        while not stop.wait(0.01):
            process = eng._process
            if process is not seen:
                seen, since = process, time.monotonic()  # a child set up by the engine draws at once
            elif process is not None and process.is_alive() and time.monotonic() - since >= kill_after_s:
                os.kill(process.pid, signal.SIGKILL)
                killed.append(process.pid)
                seen = None

    watcher = threading.Thread(target=hostile_text)
    try:
        watcher.start()
        with pytest.raises(Exception):  # noqa: B017 - mermaidx's own error type
            eng.render_svg(endless, "default", dict(mermaid_js.MERMAID_CONFIG), None)
        stop.set()
        watcher.join(5)
        assert len(killed) == 1, killed  # drawn 2.5 s, then only within the 1.5 s left: not 5 s past 4
        assert "ok" in eng.render_svg("flowchart LR\n  A[ok] --> B\n", "default", dict(mermaid_js.MERMAID_CONFIG),
                                      None)  # and the engine draws again
    finally:
        stop.set()
        watcher.join(5)
        eng.close()
