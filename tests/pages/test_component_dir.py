"""The components' browser files are copied to a folder of this user's under the temporary directory: it works
from a fresh clone and a read-only site-packages, and a folder someone else planted at the name is never
served (pages/component_dir.py, pages/ace.py, pages/drawing.py)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from pages import ace, component_dir


@pytest.fixture
def tmp_root(tmp_path, monkeypatch):
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _fill(text: str):
    def fill(folder: Path) -> None:
        (folder / "sub").mkdir()
        (folder / "sub" / "a.js").write_text(text)
        (folder / "index.html").write_text("<html>")
    return fill


def test_built_once_then_reused_with_plain_modes(tmp_root):
    first = component_dir.built("c-", "d1", _fill("one"), "index.html")
    assert first == tmp_root / "c-d1" and (first / "sub" / "a.js").read_text() == "one"
    assert first.stat().st_mode & 0o777 == 0o755 and (first / "sub" / "a.js").stat().st_mode & 0o777 == 0o644
    again = component_dir.built("c-", "d1", _fill("two"), "index.html")
    assert again == first and (again / "sub" / "a.js").read_text() == "one"  # not rebuilt
    assert sorted(p.name for p in tmp_root.iterdir()) == ["c-d1"]  # no stray copies


@pytest.mark.parametrize("plant", ["writable", "link", "half made"])
def test_a_folder_planted_at_the_name_is_not_served(tmp_root, tmp_path, plant):
    target = tmp_root / "c-d1"
    if plant == "link":
        evil = tmp_path / "evil"
        evil.mkdir()
        (evil / "index.html").write_text("<script>evil</script>")
        target.symlink_to(evil)
    else:
        target.mkdir()
        if plant == "writable":
            (target / "index.html").write_text("<script>evil</script>")
            target.chmod(0o777)
    got = component_dir.built("c-", "d1", _fill("ours"), "index.html")
    assert got != target and got.parent == tmp_root and (got / "sub" / "a.js").read_text() == "ours"
    assert got.stat().st_uid == os.getuid() and (got / "index.html").read_text() == "<html>"


def test_a_failed_fill_leaves_nothing(tmp_root):
    def fill(folder: Path) -> None:
        (folder / "x").write_text("partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        component_dir.built("c-", "d1", fill, "index.html")
    assert list(tmp_root.iterdir()) == []


def test_the_ace_frame_from_a_read_only_copy_loads_ace_alone_from_its_folder(tmp_root, tmp_path, monkeypatch):
    source = tmp_path / "build"
    shutil.copytree(ace.BUILD, source)
    for root, _dirs, files in os.walk(source):  # as a read-only site-packages installs it
        for name in files:
            os.chmod(os.path.join(root, name), 0o444)
        os.chmod(root, 0o555)
    monkeypatch.setattr(ace, "BUILD", source)
    ace.build_dir.cache_clear()
    try:
        folder = ace.build_dir()
    finally:
        ace.build_dir.cache_clear()
        for root, _, _ in os.walk(source):
            os.chmod(root, 0o755)
    assert folder.parent == tmp_root
    html = (folder / "index.html").read_text()
    scripts = re.findall(r'<script src="([^"]+)"', html)
    # the build's vendor chunk (Ace among its modules) and ours; not the build's React app, whose main chunk
    # switched word completion on
    assert scripts == [f"./static/js/{ace.vendor_chunk(source)}", "editor.js"]
    assert "<script>" not in html and "main." not in html
    assert (folder / "static" / "js" / ace.vendor_chunk(source)).is_file() and (folder / "editor.js").is_file()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # every script and sheet is the folder's own
    assert (source / "index.html").read_text() != html  # the installed build is untouched


def test_a_build_without_ace_where_the_frame_expects_it_is_refused_and_the_stock_editor_used(tmp_path,
                                                                                           monkeypatch):
    source = tmp_path / "build"
    shutil.copytree(ace.BUILD, source)
    chunk = source / "static" / "js" / ace.vendor_chunk(source)
    chunk.write_text(chunk.read_text().replace('define("ace/ace"', 'define("ace/acf"'))
    with pytest.raises(RuntimeError, match="ace/ace"):
        ace.vendor_chunk(source)
    monkeypatch.setattr(ace, "BUILD", source)
    ace.build_dir.cache_clear()
    ace._component.cache_clear()
    stock = []
    monkeypatch.setattr(ace.streamlit_ace, "st_ace", lambda **kw: stock.append(kw) or kw["value"])
    try:
        assert ace.ace("flowchart TD", key="k") == "flowchart TD"
    finally:
        ace.build_dir.cache_clear()
        ace._component.cache_clear()
    assert stock and stock[0]["key"] == "k"


def test_the_canvas_build_is_patched_for_named_ports_and_the_palette(tmp_root, monkeypatch):
    from pages import flow

    flow.build_dir.cache_clear()
    try:
        folder = flow.build_dir()
    finally:
        flow.build_dir.cache_clear()
    assert folder.parent == tmp_root
    main = (folder / flow._main_chunk(flow.BUILD).relative_to(flow.BUILD)).read_text()
    assert all(new in main and old not in main for old, new in flow.PATCHES)
    assert flow._main_chunk(flow.BUILD).read_text().count(flow.PATCHES[0][0]) == 1  # the installed one untouched
    html = (folder / "index.html").read_text()
    assert 'src="./palette.js"' in html and '<div id="mf-palette" hidden></div>' in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # every script and sheet is the folder's own
    # a streamlit-flow without the code this patches: the stock canvas, never an error
    monkeypatch.setattr(flow, "PATCHES", (("no such code", "x"),))
    flow.build_dir.cache_clear()
    flow._component.cache_clear()
    try:
        assert flow.patched() is False
    finally:
        flow.build_dir.cache_clear()
        flow._component.cache_clear()
