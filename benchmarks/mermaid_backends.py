"""Hard check and SVG/PNG export per JS engine: QuickJS (mermaidx's own) and V8 (mini-racer), as the app runs them
and, for V8, as mermaidx ships it (to show what each fix is worth).

Run: .venv/bin/python benchmarks/mermaid_backends.py [--repeats 9] [--no-quickjs-render]
The last table sets the app's V8 engines beside the anchors of the same run (benchmarks/anchors.py, installed by
`make bench-anchors`): Mermaid 11 in one kept-open page of Debian's chromium (time inside the page) and mermaid-cli
(a whole `mmdc` run, as people run it). Each parse gets a distinct text (a trailing comment) so no cache answers;
renders of the same labels reuse the label sizes learned before (as the app does), the "new labels" row does not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import anchors
from check_speed import generated_workflow, load_line

from flowcore.mermaid.engines import js as mermaid_js
from flowcore.mermaid.engines import v8 as mermaid_v8


def timed(fn, repeats: int) -> tuple[float, float, float]:
    """(median wall, min wall, median CPU of this process) in ms."""
    wall, cpu = [], []
    for i in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn(i)
        cpu.append((time.process_time() - c0) * 1000)
        wall.append((time.perf_counter() - t0) * 1000)
    return statistics.median(wall), min(wall), statistics.median(cpu)


def row(what: str, med: float, best: float, cpu: float | None = None, ref: str = "") -> None:
    cpu_s = f"{cpu:>10.1f}" if cpu is not None else f"{'(child)':>10}"
    print(f"{what:50}{med:>11.1f}{best:>10.1f}{cpu_s}  {ref}")


class StockV8Parser:
    """A V8 context exactly as mermaidx's V8 engine builds it (DOM shim unchanged, no lexer or db changes)."""

    def __init__(self) -> None:
        from mermaidx.engines import v8_engine

        self.ctx = v8_engine._build_context()
        self.ctx.eval(f"mermaid.initialize({json.dumps(mermaid_js.MERMAID_CONFIG)});")

    def parse(self, text: str) -> dict:
        self.ctx.eval(mermaid_js._PARSE_JS % json.dumps(text))
        for _ in range(1000):
            out = self.ctx.eval("globalThis.__mfOut")
            if out or not self.ctx.eval("__runNextTimer()"):
                break
        return json.loads(out)

    def close(self) -> None:
        self.ctx.close()


def main() -> None:  # noqa: C901, PLR0915
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--no-quickjs-render", action="store_true", help="skip QuickJS's 100-node render (~15-25 s each)")
    args = ap.parse_args()
    texts = {10: generated_workflow(10), 100: generated_workflow(100)}
    print(load_line())
    v8 = mermaid_v8.available()
    print(f"V8 (mini-racer) installed: {'yes' if v8 else 'no (pip install mini-racer)'}; the app uses: "
          f"hard check {mermaid_js.backend('parse')}, drawing {mermaid_js.backend('render')}")
    print(f"{'what':50}{'median ms':>11}{'min ms':>10}{'CPU ms':>10}  reference")

    engines: list[tuple[str, object]] = []
    t0 = time.perf_counter()
    qjs = mermaid_js._ParseEngine()
    qjs.start()
    row("start, QuickJS parse engine", (time.perf_counter() - t0) * 1000, (time.perf_counter() - t0) * 1000)
    engines.append(("QuickJS (app's fallback)", qjs))
    if v8:
        t0 = time.perf_counter()
        ours = mermaid_v8.V8ParseEngine()
        ours.start()
        row("start, V8 parse engine", (time.perf_counter() - t0) * 1000, (time.perf_counter() - t0) * 1000)
        engines.append(("V8 (app's default)", ours))
        engines.append(("V8 as mermaidx ships it", StockV8Parser()))
    for name, eng in engines:
        for n, text in texts.items():
            assert eng.parse(text)["ok"] and not eng.parse(text + "  PROBLEM --> (\n")["ok"]
            med, best, cpu = timed(lambda i, t=text, e=eng: e.parse(t + f"%% {i} {time.time()}\n"), args.repeats)
            row(f"hard check, {name}, {n} nodes", med, best, cpu, "")
    if v8:  # how the parse grows: FlowDB or the line mapping being quadratic would show here
        from flowcore.mermaid.text import to_error

        eng = engines[1][1]
        for n in (200, 400, 800):
            big = generated_workflow(n)
            med, best, cpu = timed(lambda i, t=big: eng.parse(t + f"%% {i} {time.time()}\n"), max(3, args.repeats // 2))
            bad = big + "  PROBLEM --> (\n"
            out = eng.parse(bad)
            t0 = time.perf_counter()
            to_error(bad, out)
            mapping = (time.perf_counter() - t0) * 1000
            row(f"hard check, V8, {n} nodes", med, best, cpu,
                f"{med / n * 100:.1f} ms per 100 nodes; error line mapping {mapping:.2f} ms")
    for _, eng in engines:
        eng.close()

    text = texts[100]
    reps = max(2, args.repeats // 3)
    renders: list[tuple[str, object]] = []
    if not args.no_quickjs_render:
        q = mermaid_js._Engine()
        q.start()
        renders.append(("QuickJS", q))
    if v8:
        t0 = time.perf_counter()
        r = mermaid_v8.render_engine()
        r.start()
        row("start, V8 drawing process", (time.perf_counter() - t0) * 1000, (time.perf_counter() - t0) * 1000)
        renders.append(("V8", r))
    cfg = dict(mermaid_js.MERMAID_CONFIG)
    for name, eng in renders:
        if name == "V8":  # a text whose labels this process has never measured: two passes and a fresh context
            fresh = text.replace("(role: step)", f"(role: step {os.getpid()})")
            t0 = time.perf_counter()
            eng.render_svg(fresh, "default", cfg, None)
            med = (time.perf_counter() - t0) * 1000
            row("SVG export, V8, 100 nodes, new labels", med, med, None, "")
            eng.render_svg(text, "default", cfg, None)
        med, best, cpu = timed(lambda i, e=eng: e.render_svg(text + f"%% r{i} {time.time()}\n", "default", cfg, None),
                               reps)
        row(f"SVG export, {name}, 100 nodes", med, best, cpu if name == "QuickJS" else None, "")
    if v8:
        from mermaidx.raster import render_png

        svg = renders[-1][1].render_svg(text, "default", cfg, None)
        med, best, cpu = timed(lambda i: render_png(svg, scale=2.0, background="#ffffff"), reps)
        row("SVG -> PNG 2x, novasvg's encoder (before)", med, best, cpu)
        for scale in (1.0, 2.0):  # mermaid-cli's default scale is 1; the app exports at 2
            med, best, _ = timed(lambda i, s=scale: mermaid_js.render_png(text + f"%% png{i} {time.time()}\n",
                                                                          scale=s), reps)
            row(f"PNG export {scale:.0f}x (render_png: V8 + Pillow), 100 nodes", med, best, None,
                "")
    if v8:
        stock = None
        try:
            from mermaidx.engines import v8_engine

            stock = v8_engine.Engine(render_timeout_ms=120_000)
            stock.start()
            stock.render_svg(text, "default", cfg, None)
            med, best, _ = timed(lambda i: stock.render_svg(text + f"%% s{i}\n", "default", cfg, None), reps)
            row("SVG export, V8 as mermaidx ships it, 100 nodes", med, best, None, "")
        except Exception as exc:  # noqa: BLE001 - a benchmark row, not a crash
            print(f"SVG export, V8 as mermaidx ships it: failed ({str(exc)[:80]})")
        finally:
            if stock is not None:
                stock.close()
    for _, eng in renders:
        eng.close()
    if v8:
        beside_anchors(texts, max(3, args.repeats // 2))
    print(load_line())


def beside_anchors(texts: dict, reps: int) -> None:
    """Parse and SVG in the app's warm V8 engines vs a kept-open chromium page and mermaid-cli, in turn."""
    print(load_line())
    page = anchors.chromium_page()
    parse = mermaid_v8.V8ParseEngine()
    parse.start()
    draw = mermaid_v8.render_engine()
    draw.start()
    cfg = dict(mermaid_js.MERMAID_CONFIG)
    name = f"chromium page (Mermaid {page.version})" if page else "chromium page"
    print(f"{'what':34}{'ours ms':>10}  {'anchor':<30}{'anchor ms':>10}{'anchor/ours':>12}")
    ours_parse: dict = {}
    for n, text in texts.items():
        for what, ours_fn, page_fn in (
                ("warm parse", lambda i, t=text: parse.parse(t + f"%% {i} {time.time()}\n"),
                 (lambda t: page.parse_ms(t)) if page else None),
                ("warm SVG", lambda i, t=text: draw.render_svg(t + f"%% {i} {time.time()}\n", "default", cfg, None),
                 (lambda t: page.render_ms(t)[0]) if page else None)):
            ours_fn(-1)  # label sizes learned, engine warm
            ours, theirs = [], []
            for i in range(reps):
                t0 = time.perf_counter()
                ours_fn(i)
                ours.append((time.perf_counter() - t0) * 1000)
                if page_fn is not None:
                    theirs.append(page_fn(text + f"%% {i} {time.time()}\n"))
            med = statistics.median(ours)
            if what == "warm parse":
                ours_parse[n] = med
            label = f"{what}, {n} nodes"
            if theirs:
                a = statistics.median(theirs)
                print(f"{label:34}{med:>10.1f}  {name:<30}{a:>10.1f}{a / med:>11.2f}x")
            else:
                print(f"{label:34}{med:>10.1f}  {name:<30}{'skipped':>10}  ({anchors.why.get('chromium', '')})")
            if what == "warm SVG":
                print(f"{'  SVG / warm parse, same engine':34}{med / ours_parse[n]:>10.1f}x  (goal at 10 nodes: <= 10x)")
    mmdc = anchors.mmdc_svg_ms(texts[10])
    med = statistics.median([_wall(lambda i=i: draw.render_svg(texts[10] + f"%% m{i} {time.time()}\n", "default", cfg,
                                                              None)) for i in range(reps)])
    if mmdc is None:
        print(f"{'SVG, 10 nodes, one command':34}{med:>10.1f}  {'mermaid-cli (mmdc)':<30}{'skipped':>10}  "
              f"({anchors.why.get('mmdc', '')})")
    else:
        print(f"{'SVG, 10 nodes, one command':34}{med:>10.1f}  {'mermaid-cli (mmdc), a run':<30}{mmdc:>10.1f}"
              f"{mmdc / med:>11.2f}x")
    draw.close()
    parse.close()
    if page:
        page.close()


def _wall(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


if __name__ == "__main__":
    main()
