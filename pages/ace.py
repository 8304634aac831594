"""The Editor's text box (a plain module, not a page): Ace from streamlit-ace's own browser build, run by a
frame of ours (pages/components/ace) instead of the build's React app.

The stock frame ran React, Material UI and Apache Arrow (1 MB of script) before the first line of text showed,
and it switched Ace's live word completion on with no option to turn it off (a list of the document's words
popped up over the text every few letters). Ours requires only Ace and the build's table of theme, mode and
key-binding files from the build's vendor chunk; word completion is never loaded. The build is copied once
per version into a folder of its own (pages/component_dir.py) with our files beside it, and served from there
(nothing is loaded from outside 127.0.0.1; Streamlit serves a component only from inside its folder, so it is
copied, not linked).
"""

from __future__ import annotations

import hashlib
import re
import shutil
from functools import cache
from pathlib import Path

import streamlit.components.v1 as components
import streamlit_ace

from pages.component_dir import built

BUILD = Path(streamlit_ace.__file__).resolve().parent / "frontend" / "build"
SOURCE = Path(__file__).resolve().parent / "components" / "ace"
FILES = ("index.html", "editor.js", "editor.css")
# what editor.js looks for in the vendor chunk: Ace's own module and the table of module URLs
NEEDS = ('define("ace/ace"', "ace.config.setModuleUrl(")


def vendor_chunk(build: Path) -> str:
    """The name of the vendor chunk the build's index.html loads (the build also keeps an older one that
    nothing loads): the one that holds Ace. RuntimeError when it is not as editor.js expects."""
    found = re.findall(r'src="[./]*static/js/(\d+\.[0-9a-f]+\.chunk\.js)"', (build / "index.html").read_text())
    if len(found) != 1:
        raise RuntimeError(f"streamlit-ace's index.html in {build} loads {len(found)} vendor chunks, expected 1")
    text = (build / "static" / "js" / found[0]).read_text(encoding="utf-8")
    if missing := [n for n in NEEDS if n not in text]:
        raise RuntimeError(f"streamlit-ace's {found[0]} has no {missing[0]!r}: look at the new build")
    return found[0]


@cache
def build_dir() -> Path:
    """The copied build with our frame in place of its index.html, made once per version of streamlit-ace or
    of our files. RuntimeError when the build is not as editor.js expects (a new streamlit-ace: look again)."""
    vendor = vendor_chunk(BUILD)
    page = (SOURCE / "index.html").read_text(encoding="utf-8").replace("VENDOR_CHUNK", vendor)
    digest = hashlib.sha256(vendor.encode() + page.encode())
    for name in FILES[1:]:
        digest.update((SOURCE / name).read_bytes())

    def fill(folder: Path) -> None:
        shutil.copytree(BUILD, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("index.html"),
                        copy_function=shutil.copyfile)  # not the source's modes: a read-only copy stays fixable
        for name in FILES[1:]:
            shutil.copyfile(SOURCE / name, folder / name)
        (folder / "index.html").write_text(page, encoding="utf-8")  # last: its presence says the folder is whole

    return built("mermaidflow-ace-", digest.hexdigest()[:16], fill, "index.html")


@cache
def _component():  # noqa: ANN202 - Streamlit's component function
    return components.declare_component("ace_editor", path=str(build_dir()))


def ace(value: str, *, key: str, annotations: list[dict] | None = None, min_lines: int = 22, max_lines: int = 40,
        font_size: int = 15) -> str:
    """The text editor (Ace, plain text, word wrap, the value sent as you type): its current text. With a
    streamlit-ace whose build this cannot read, its stock editor (word completion and all), never an error."""
    try:
        render = _component()
    except (RuntimeError, OSError):
        return streamlit_ace.st_ace(value=value, language="text", theme="chrome", keybinding="vscode",
                                    font_size=font_size, min_lines=min_lines, max_lines=max_lines, wrap=True,
                                    auto_update=True, annotations=annotations, key=key)
    return render(defaultValue=str(value), placeholder="", height=None, minLines=min_lines,
                        maxLines=max_lines, fontSize=font_size, tabSize=4, mode="text", theme="chrome",
                        showGutter=True, showPrintMargin=False, wrapEnabled=True, readOnly=False,
                        keyboardHandler="vscode", annotations=annotations or [], markers=[], autoUpdate=True,
                        key=key, default=str(value))
