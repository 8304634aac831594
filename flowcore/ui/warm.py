"""The app server warms up as it starts, so the first view of each page after ``make run`` is as quick as the
second.

Left cold, a page's first view paid for what it is the first to need: Compare 2.5 s of server time (scipy.stats
for its bootstrap intervals), Export and the Editor 1.5 s (starting the Mermaid engines; the Editor's first
drawing of the default workflow is made here too, flowcore/ui/first_drawing.py), History and Settings
0.7-1.7 s (pandas, altair, the engine's own modules). A background thread started with the server imports what
the pages import and starts the Mermaid engines, one step at a time and only while the server is quiet: no page
view in progress and no request in the last second (a browser loading the app's scripts, then drawing a page on
the same machine under ``make run``). A browser that opens the app the instant it answers is not slowed by it. The engine keeps those imports
lazy so that the command line's quick commands never pay for them; the server wants them all.
"""

from __future__ import annotations

import ast
import gc
import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

# imported inside the engine's functions (the command line stays quick), wanted by the pages' first views
LAZY = ("pandas", "altair", "scipy.stats")
QUIET_AFTER = 1.0  # seconds after a request or a page view: its browser is still loading or drawing it

_views = 0
_last_view = float("-inf")
_cond = threading.Condition()


@contextmanager
def page_view() -> Iterator[None]:
    """Around each script run of the app: the warm-up waits while one is in progress."""
    global _views, _last_view
    with _cond:
        _views += 1
    try:
        yield
    finally:
        with _cond:
            _views -= 1
            _last_view = time.monotonic()
            _cond.notify_all()


def touch() -> None:
    """A request came in."""
    global _last_view
    with _cond:
        _last_view = time.monotonic()


class Activity:
    """ASGI middleware: every request and websocket marks the server busy for the warm-up."""

    def __init__(self, app: Callable) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") in ("http", "websocket"):
            touch()
        await self.app(scope, receive, send)


def wait_quiet(quiet_after: float = QUIET_AFTER) -> None:
    """Return once no page view is in progress and none ended, nor a request came, in the last ``quiet_after``
    seconds."""
    with _cond:
        while True:
            since = time.monotonic() - _last_view
            if _views == 0 and since >= quiet_after:
                return
            _cond.wait(timeout=quiet_after - since if _views == 0 else None)


def page_modules(pages_dir: Path) -> list[str]:
    """The flowcore modules the pages import, read from their source (a page runs only as a page, in a script
    thread, and is never imported here)."""
    found: set[str] = set()
    root = pages_dir.parent
    for page in sorted(pages_dir.glob("*.py")):
        try:
            tree = ast.parse(page.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "flowcore":
                base = root / node.module.replace(".", "/")
                for alias in node.names:  # `from flowcore.ui import history` names a module; `import History` not
                    is_module = (base / f"{alias.name}.py").exists() or (base / alias.name).is_dir()
                    found.add(f"{node.module}.{alias.name}" if is_module else node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.split(".")[0] == "flowcore")
    return sorted(found)


def steps(pages_dir: Path) -> list[tuple[str, Callable[[], object]]]:
    """The warm-up, one step per module and per Mermaid engine."""
    def engine(kind: str) -> Callable[[], object]:
        def start() -> object:
            from flowcore.mermaid.engines import js

            return js.backend(kind)
        return start

    def first_drawing() -> object:  # what a new session's Editor shows first, drawn (flowcore.ui.first_drawing)
        from flowcore import parse_lenient
        from flowcore.ui import first_drawing, view
        from flowcore.workspace.drafts import default_workflow

        return first_drawing.image(view.diagram_code(parse_lenient(default_workflow().text)[0]), budget_s=60)

    imports = [(name, lambda name=name: importlib.import_module(name)) for name in page_modules(pages_dir) + list(LAZY)]
    return imports + [(f"mermaid {kind} engine", engine(kind)) for kind in ("parse", "render")] \
        + [("the Editor's first drawing", first_drawing)]


def warm(pages_dir: Path, before_each: Callable[[], None] = lambda: None) -> dict[str, str]:
    """Import what the pages need and start the Mermaid engines; what failed, by name (a page then reports it
    itself when it needs it)."""
    failed: dict[str, str] = {}
    for name, step in steps(pages_dir):
        before_each()
        try:
            step()
        except Exception as e:  # noqa: BLE001 - a warm-up never stops the server
            failed[name] = f"{type(e).__name__}: {e}"
    return failed


def settle() -> None:
    """Everything imported so far is the server's for good: collected once, then left out of every later
    collection (``gc.freeze``). Streamlit collects all generations after each script run; with the pages'
    libraries imported that walked about 280,000 objects, 150-200 ms holding the interpreter, while the page's
    "script finished" message and its component files waited to be sent."""
    gc.collect()
    gc.freeze()


def start(pages_dir: Path) -> threading.Thread:
    """Warm up in a daemon thread, between page views (the server answers meanwhile)."""
    def run() -> None:
        t0 = time.perf_counter()
        failed = warm(pages_dir, before_each=wait_quiet)
        wait_quiet()
        settle()
        log.info("warmed up in %.1f s%s", time.perf_counter() - t0, f"; not warmed: {failed}" if failed else "")

    thread = threading.Thread(target=run, name="mermaidflow-warm-up", daemon=True)
    thread.start()
    return thread
