"""The server's warm-up (flowcore/ui/warm.py): what the pages import, imported before the first view."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from flowcore.ui.warm import page_modules, warm

REPO = Path(__file__).resolve().parents[2]


def test_it_finds_the_modules_the_real_pages_import():
    found = page_modules(REPO / "pages")
    for name in ["flowcore.evaluation.compare", "flowcore.ui.history", "flowcore.evolution.session",
                 "flowcore.workspace.drafts"]:
        assert name in found
    assert not any(n.startswith("pages") or n.endswith(".History") for n in found)  # modules, not classes


def test_a_broken_or_missing_import_is_reported_not_raised(tmp_path):
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "bad.py").write_text("def (:\n")  # unreadable: skipped
    (pages / "gone.py").write_text("from flowcore.no_such_stage import thing\nimport flowcore.nor_this\n")
    assert page_modules(pages) == ["flowcore.no_such_stage", "flowcore.nor_this"]
    failed = warm(pages)
    assert set(failed) == {"flowcore.no_such_stage", "flowcore.nor_this"}
    assert "ModuleNotFoundError" in failed["flowcore.no_such_stage"]


def test_after_the_warm_up_a_fresh_interpreter_holds_what_the_pages_need():
    code = ("import json, sys; from pathlib import Path; from flowcore.ui.warm import warm, LAZY;"
            f"failed = warm(Path({str(REPO / 'pages')!r}));"
            "from flowcore.mermaid.engines import js; from flowcore.ui import first_drawing;"
            "print(json.dumps({'failed': failed, 'lazy': [m in sys.modules for m in LAZY],"
            " 'engines': sorted(js._engines),"
            " 'drawn': js.started_backend('render') != 'v8' or any(first_drawing._cache.values()),"
            " 'walked': len(__import__('gc').get_objects())}));"
            "from flowcore.ui.warm import settle; import gc; settle();"
            "print(json.dumps({'walked': len(gc.get_objects()), 'frozen': gc.get_freeze_count()}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got, settled = (json.loads(line) for line in out.stdout.strip().splitlines()[-2:])
    walked = got.pop("walked")
    # with V8, the Editor's first drawing of the default workflow is ready for a new session's first view
    assert got == {"failed": {}, "lazy": [True, True, True], "engines": ["parse", "render"], "drawn": True}
    # then what was imported is left out of later collections: Streamlit's collection after every script run
    # walked all of it (150-200 ms holding the interpreter)
    assert walked > 100_000 and settled["walked"] < walked / 20 and settled["frozen"] > walked * 0.9, settled


def test_the_warm_up_waits_for_page_views_and_the_quiet_after_them():
    import threading
    import time

    from flowcore.ui import warm as w

    done: list[float] = []
    with w.page_view():
        waiter = threading.Thread(target=lambda: (w.wait_quiet(0.3), done.append(time.monotonic())))
        waiter.start()
        waiter.join(0.5)
        assert done == []  # a view in progress: no step
        ended = time.monotonic()
    waiter.join(5)
    assert done and done[0] - ended >= 0.29  # and not in the quiet second after it
    t0 = time.monotonic()
    w.wait_quiet(0.0)  # nothing going on: at once
    assert time.monotonic() - t0 < 0.1


def test_a_step_waits_before_it_runs(tmp_path):
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "p.py").write_text("from flowcore.ui import warm\n")
    calls: list[str] = []
    assert warm(pages, before_each=lambda: calls.append("wait")) == {}
    # flowcore.ui.warm, the three lazy imports, the two engines, the Editor's first drawing: a wait before each
    assert len(calls) == 1 + 3 + 2 + 1


def test_a_request_holds_off_the_warm_up():
    import asyncio
    import time

    from flowcore.ui import warm as w

    async def app(scope, receive, send):
        return None

    asyncio.run(w.Activity(app)({"type": "http"}, None, None))
    t0 = time.monotonic()
    w.wait_quiet(0.3)
    assert time.monotonic() - t0 >= 0.25
    asyncio.run(w.Activity(app)({"type": "lifespan"}, None, None))  # not a request
    t0 = time.monotonic()
    w.wait_quiet(0.3)
    assert time.monotonic() - t0 < 0.1
