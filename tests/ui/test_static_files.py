"""Streamlit's bundles from memory (flowcore/ui/static_files.py), checked against Streamlit's own static handler."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from starlette.middleware.exceptions import ExceptionMiddleware
from streamlit import file_util
from streamlit.web.server.starlette.starlette_static_routes import create_streamlit_static_handler

from flowcore.ui.static_files import StaticBundles, bundle_names
from tests.helpers.asgi import Got, ask, scope_for

STATIC = Path(file_util.get_static_dir())


class Counted:
    """Streamlit's static handler, counting the requests that reach it."""

    def __init__(self, directory: Path, base: str = "") -> None:
        self.inner = ExceptionMiddleware(create_streamlit_static_handler(directory=str(directory), base_url=base))
        self.paths: list[str] = []

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - ASGI
        self.paths.append(scope["path"])
        await self.inner(scope, receive, send)


class Answer:
    """tests/helpers/asgi.py's answer, read as a client reads one: headers by name."""

    def __init__(self, got: Got) -> None:
        self.status_code, self.content = got.status, got.body
        self.headers = {k.decode().lower(): v.decode() for k, v in got.headers}


def _ask(app, requests: list[tuple[str, str, dict]]) -> list[Answer]:  # noqa: ANN001
    """Each request as the server hands it on: the raw path, not tidied by a client (``..`` kept)."""
    return [Answer(g) for g in ask(app, *(scope_for(p, m, h, host="127.0.0.1") for m, p, h in requests))]


def test_every_bundle_file_is_answered_from_memory_as_streamlit_answers_it():
    names = bundle_names(STATIC)
    assert len(names) > 100 and any(n.startswith("/static/js/index.") for n in names)
    own = Counted(STATIC)
    ours = StaticBundles(own, static_dir=STATIC)
    gets = [("GET", n, {}) for n in sorted(names)]
    theirs, mine = _ask(Counted(STATIC), gets), _ask(ours, gets)
    assert own.paths == []  # not one reached Streamlit
    for n, a, b in zip(sorted(names), theirs, mine, strict=True):
        assert (b.status_code, b.content) == (a.status_code, a.content) == (200, names[n].read_bytes()), n
        for h in ("content-type", "cache-control", "content-length"):
            assert b.headers[h] == a.headers[h], (n, h)
    assert "immutable" in mine[0].headers["cache-control"]


def test_everything_but_a_whole_bundle_file_goes_to_streamlit_unchanged():
    js = next(n for n in sorted(bundle_names(STATIC)) if n.endswith(".js"))
    asks = [("GET", "/", {}), ("GET", "/index.html", {}), ("GET", "/manifest.json", {}), ("GET", "/editor", {}),
            ("GET", "/favicon.png", {}), ("GET", "/static/js/", {}), ("GET", "/static/js/nothing.js", {}),
            ("GET", "/static/js/../../index.html", {}), ("GET", "/static/js/%2e%2e/%2e%2e/index.html", {}),
            ("GET", "/static//" + js[len("/static/"):], {}), ("GET", js.upper(), {}), ("GET", js + "/", {}),
            ("POST", js, {}), ("PUT", js, {}), ("GET", js, {"range": "bytes=0-9"})]
    own = Counted(STATIC)
    mine = _ask(StaticBundles(own, static_dir=STATIC), asks)
    theirs = _ask(Counted(STATIC), asks)
    assert len(own.paths) == len(asks)
    for (m, p, _), a, b in zip(asks, theirs, mine, strict=True):
        assert (b.status_code, b.content) == (a.status_code, a.content), (m, p)
    assert mine[-1].status_code == 206 and len(mine[-1].content) == 10  # a range: Streamlit's partial answer


def test_head_gives_the_headers_alone_and_a_known_etag_gets_304():
    js = next(n for n in sorted(bundle_names(STATIC)) if n.endswith(".js"))
    own = Counted(STATIC)
    app = StaticBundles(own, static_dir=STATIC)
    head, full = _ask(app, [("HEAD", js, {}), ("GET", js, {})])
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == full.headers["content-length"] == str(len(full.content))
    tag = full.headers["etag"]
    again, other, listed = _ask(app, [("GET", js, {"if-none-match": tag}), ("GET", js, {"if-none-match": '"x"'}),
                                      ("GET", js, {"if-none-match": f'"y", {tag}'})])
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag
    assert other.status_code == 200 and other.content == full.content
    assert listed.status_code == 304
    assert own.paths == []


def test_under_a_base_path_only_its_own_bundle_paths_are_answered():
    js = next(n for n in sorted(bundle_names(STATIC)) if n.endswith(".js"))
    own = Counted(STATIC, base="studio")
    app = StaticBundles(own, static_dir=STATIC, base_url="/studio/")
    inside, _, _ = _ask(app, [("GET", "/studio" + js, {}), ("GET", js, {}), ("GET", "/studio", {})])
    assert inside.status_code == 200 and inside.content == (STATIC / js.lstrip("/")).read_bytes()
    assert own.paths == [js, "/studio"]  # the unprefixed path and the base itself went to Streamlit


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    (tmp_path / "static" / "js").mkdir(parents=True)
    (tmp_path / "static" / "js" / "a.js").write_text("export const a = 1;\n")
    (tmp_path / "static" / "css").mkdir()
    (tmp_path / "static" / "css" / "s.css").write_text("body{}\n")
    (tmp_path / "index.html").write_text("<html></html>")
    (tmp_path / "secret.txt").write_text("not a bundle")
    return tmp_path


def test_only_files_under_the_bundle_folders_found_at_start_are_served(tiny: Path):
    assert set(bundle_names(tiny)) == {"/static/js/a.js", "/static/css/s.css"}
    own = Counted(tiny)
    app = StaticBundles(own, static_dir=tiny)
    (tiny / "static" / "js" / "late.js").write_text("export const late = 1;\n")  # added after start
    a, css, _, _, _ = _ask(app, [("GET", "/static/js/a.js", {}), ("GET", "/static/css/s.css", {}),
                                 ("GET", "/static/js/late.js", {}), ("GET", "/static/js/../../secret.txt", {}),
                                 ("GET", "/secret.txt", {})])
    assert a.content == b"export const a = 1;\n" and a.headers["content-type"].startswith(("text/javascript",
                                                                                               "application/javascript"))
    assert css.headers["content-type"] == "text/css; charset=utf-8"
    assert own.paths == ["/static/js/late.js", "/static/js/../../secret.txt", "/secret.txt"]


def test_a_bundle_file_gone_from_disk_is_left_to_streamlit(tiny: Path):
    own = Counted(tiny)
    app = StaticBundles(own, static_dir=tiny)
    os.remove(tiny / "static" / "js" / "a.js")
    (gone,) = _ask(app, [("GET", "/static/js/a.js", {})])
    assert own.paths == ["/static/js/a.js"]
    assert gone.content != b"export const a = 1;\n"  # Streamlit's answer for a missing file, whatever it is
