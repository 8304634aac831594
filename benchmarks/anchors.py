"""The anchors the speed scripts measure beside the product, in the same run (``make bench-anchors`` installs them):

- the MermaidFlow authors' own soft checker (their linter, read from the team's shared peers folder; benchmarks only,
  never part of the product), run in this process with `regex` and `pydantic` from ``.bench-anchors/py``;
- Mermaid 11 in one kept-open page of Debian's chromium (Playwright drives it; never a downloaded browser), loaded
  from mermaid-cli's own copy in ``.bench-anchors/node_modules``;
- mermaid-cli itself (``mmdc``), run as people run it, with Debian's chromium.

Each function returns None (and ``why`` says what is missing) when its anchor is not installed: the row is then
skipped with that note, never filled with a remembered figure.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANCHORS = ROOT / ".bench-anchors"
CHROMIUM = os.environ.get("MERMAIDFLOW_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
why: dict[str, str] = {}


def linter_dir() -> Path | None:
    """The MermaidFlow linter: $MERMAIDFLOW_LINTER, else shared/peers/mermaidflow_linter beside the repository (a
    worktree's repository is one level further down)."""
    env = os.environ.get("MERMAIDFLOW_LINTER")
    candidates = [Path(env)] if env else []
    candidates += [p / "shared" / "peers" / "mermaidflow_linter" for p in (ROOT.parent, ROOT.parent.parent)]
    return next((p for p in candidates if (p / "scripts" / "MermaidChecker.py").exists()), None)


def linter():
    """``check(text) -> (ok, message)`` with the MermaidFlow linter (its soft_check reads a file: the text is written
    to one first, and that write is part of what it costs), or None."""
    where = linter_dir()
    if where is None:
        why["linter"] = "the MermaidFlow linter is not in shared/peers/mermaidflow_linter (set MERMAIDFLOW_LINTER)"
        return None
    if str(ANCHORS / "py") not in sys.path:
        sys.path.insert(0, str(ANCHORS / "py"))
    sys.path.insert(0, str(where))
    try:
        from scripts.MermaidChecker import ConfigCls, MermaidCheker
    except ImportError as exc:
        why["linter"] = f"the MermaidFlow linter cannot start ({exc}): run make bench-anchors"
        return None
    finally:
        sys.path.remove(str(where))
    cfg = where / "config"
    lint = MermaidCheker(ConfigCls(segmentor_config=cfg / "sgement_config.json",
                                   checker_config=cfg / "checker_config.json"))
    tmp = Path(tempfile.mkdtemp(prefix="mf-linter-")) / "workflow.mmd"

    def check(text: str) -> tuple[bool, str]:
        tmp.write_text(text, encoding="utf-8")
        with contextlib.redirect_stdout(io.StringIO()):  # it prints every violation
            ok, message = lint.soft_check(tmp)[:2]
        return ok, message

    return check


def mermaid_js() -> Path | None:
    path = ANCHORS / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
    if not path.exists():
        why["chromium"] = "Mermaid for the browser anchor is not installed: run make bench-anchors"
        return None
    if not Path(CHROMIUM).exists():
        why["chromium"] = f"{CHROMIUM} is missing (apt-get install chromium)"
        return None
    return path


class ChromiumPage:
    """One page of Debian's chromium with Mermaid 11 loaded, kept open: parse and render time inside the page
    (``performance.now``), as a warm browser editor pays them."""

    def __init__(self, script: Path):
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        self.page = self._browser.new_page()
        self.page.set_content("<!doctype html><html><body><div id='out'></div></body></html>")
        self.page.add_script_tag(path=str(script))
        self.page.evaluate("() => mermaid.initialize({startOnLoad: false, maxEdges: 100000, maxTextSize: 5000000})")
        package = script.parents[1] / "package.json"
        self.version = json.loads(package.read_text())["version"] if package.exists() else "11"
        self._n = 0

    def parse_ms(self, text: str) -> float:
        return self.page.evaluate("async (t) => { const t0 = performance.now(); await mermaid.parse(t);"
                                  " return performance.now() - t0; }", text)

    def render_ms(self, text: str) -> tuple[float, str]:
        self._n += 1
        return tuple(self.page.evaluate(
            "async ([t, id]) => { const t0 = performance.now(); const r = await mermaid.render(id, t);"
            " return [performance.now() - t0, r.svg]; }", [text, f"d{self._n}"]))

    def close(self) -> None:
        self._browser.close()
        self._pw.stop()


def chromium_page() -> ChromiumPage | None:
    script = mermaid_js()
    if script is None:
        return None
    try:
        return ChromiumPage(script)
    except Exception as exc:  # noqa: BLE001 - a missing anchor is a note, not a crash
        why["chromium"] = f"chromium did not start: {str(exc)[:120]}"
        return None


def mmdc_svg_ms(text: str) -> float | None:
    """Wall time of one ``mmdc -i x.mmd -o x.svg`` (a fresh Node and browser each time, as people run it)."""
    mmdc = ANCHORS / "node_modules" / ".bin" / "mmdc"
    if not mmdc.exists() or not Path(CHROMIUM).exists():
        why["mmdc"] = "mermaid-cli is not installed: run make bench-anchors"
        return None
    with tempfile.TemporaryDirectory(prefix="mf-mmdc-") as d:
        src, out, cfg = Path(d) / "x.mmd", Path(d) / "x.svg", Path(d) / "puppeteer.json"
        src.write_text(text, encoding="utf-8")
        cfg.write_text(json.dumps({"executablePath": CHROMIUM, "args": CHROMIUM_ARGS}))
        t0 = time.perf_counter()
        res = subprocess.run([str(mmdc), "-q", "-p", str(cfg), "-i", str(src), "-o", str(out)],
                             capture_output=True, text=True, timeout=300)
        ms = (time.perf_counter() - t0) * 1000
        if res.returncode != 0 or not out.exists():
            why["mmdc"] = f"mmdc failed: {(res.stderr or res.stdout).strip()[:160]}"
            return None
    return ms
