"""Hard check and SVG export: our QuickJS engine against mermaidx's V8 backend (mini-racer), when installed.

Run: .venv/bin/python benchmarks/mermaid_backends.py [--repeats 9]
(V8 needs `pip install "mermaidx[v8engine]"`, which brings the mini-racer wheel; without it those rows say so.)
Reference (FIELD-NOTES): warm mermaid-cli in headless Chromium parses 10 / 100 nodes in ~16 / 90 ms and renders
a 100-node SVG in ~2.4 s on this machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from check_speed import generated_workflow  # noqa: E402

from flowcore import mermaid_js  # noqa: E402


def timed(fn, repeats: int) -> tuple[float, float]:
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), min(times)


def v8_parser():
    """A warm V8 context with Mermaid loaded, parsing only (as our QuickJS parse engine does)."""
    from mermaidx.engines import v8_engine
    from mermaidx.engines._common import context_scripts, run_event_loop
    from py_mini_racer import MiniRacer

    ctx = MiniRacer()
    ctx.eval("globalThis.__log = (s) => {};")
    ctx.eval(v8_engine._measure_text_js())
    for script in context_scripts():
        ctx.eval(script)
    ctx.eval(f"mermaid.initialize({json.dumps(mermaid_js.MERMAID_CONFIG)});")

    def parse(text: str) -> dict:
        ctx.eval(mermaid_js._PARSE_JS % json.dumps(text))
        run_event_loop(ctx.eval)
        return json.loads(ctx.eval("globalThis.__mfOut"))

    return parse


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    texts = {10: generated_workflow(10), 100: generated_workflow(100)}
    print(f"{'what':44}{'median ms':>12}{'min ms':>10}")
    for n, text in texts.items():
        mermaid_js.parse_check(text)
        med, best = timed(lambda i, t=text: mermaid_js.parse_check(t + f"%% {i} {time.time()}\n"), args.repeats)
        print(f"{f'hard check, QuickJS (ours), {n} nodes':44}{med:>12.1f}{best:>10.1f}")
    try:
        parse = v8_parser()
    except ImportError:
        print("hard check, V8: mini-racer is not installed (pip install \"mermaidx[v8engine]\")")
        parse = None
    if parse is not None:
        for n, text in texts.items():
            parse(text)
            med, best = timed(lambda i, t=text: parse(t + f"%% {i}\n"), args.repeats)
            print(f"{f'hard check, V8 (mini-racer), {n} nodes':44}{med:>12.1f}{best:>10.1f}")
    text = texts[100]
    med, best = timed(lambda i: mermaid_js.render_svg(text + f"%% r{i} {time.time()}\n"), max(2, args.repeats // 3))
    print(f"{'SVG export, QuickJS (ours), 100 nodes':44}{med:>12.1f}{best:>10.1f}")
    if parse is not None:
        from mermaidx.engines import v8_engine

        eng = v8_engine.Engine(render_timeout_ms=60_000)
        eng.start()
        try:
            med, best = timed(lambda i: eng.render_svg(text + f"%% v{i}\n", "default",
                                                        dict(mermaid_js.MERMAID_CONFIG), None),
                              max(2, args.repeats // 3))
            print(f"{'SVG export, V8 (mermaidx), 100 nodes':44}{med:>12.1f}{best:>10.1f}")
        except Exception as exc:  # noqa: BLE001 - a benchmark row, not a crash
            print(f"SVG export, V8 (mermaidx), 100 nodes: failed ({str(exc)[:80]})")
        finally:
            eng.close()


if __name__ == "__main__":
    main()
