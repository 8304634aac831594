"""The Editor's text box (a plain module, not a page): streamlit-ace's own browser build, without its word
completion. streamlit-ace 0.1.1 switches Ace's live word completion on in its build, with no option to turn it
off, so every few letters a list of the document's words popped up over the text. The build is copied once
per version into a folder of its own (pages/component_dir.py) with those two settings off, and served from
there (nothing is loaded from outside 127.0.0.1; Streamlit serves a component only from inside its folder, so
it is copied, not linked).
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
ON = "r.enableBasicAutocompletion=!0,r.enableLiveAutocompletion=!0"
OFF = "r.enableBasicAutocompletion=!1,r.enableLiveAutocompletion=!1"


def _main_chunk(build: Path, folder: Path | None = None) -> Path:
    """The main chunk the build's index.html loads (the build also keeps an older one that nothing loads), in
    ``folder`` (a copy of the build) when given."""
    found = re.findall(r'src="[./]*(static/js/main\.[0-9a-f]+\.chunk\.js)"', (build / "index.html").read_text())
    if len(found) != 1:
        raise RuntimeError(f"streamlit-ace's index.html in {build} loads {len(found)} main chunks, expected 1")
    return (folder or build) / found[0]


@cache
def build_dir() -> Path:
    """The copied build with word completion off, made once per version of streamlit-ace. RuntimeError when the
    build does not have the settings this expects (a new streamlit-ace: look again, then update ON)."""
    main = _main_chunk(BUILD)
    source = main.read_text(encoding="utf-8")
    if source.count(ON) != 1:
        raise RuntimeError(f"streamlit-ace's {main.name} does not switch word completion on as expected")
    digest = hashlib.sha256(source.encode() + OFF.encode()).hexdigest()[:16]

    def fill(folder: Path) -> None:
        shutil.copytree(BUILD, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("index.html"),
                        copy_function=shutil.copyfile)  # not the source's modes: a read-only copy can't be patched
        _main_chunk(BUILD, folder).write_text(source.replace(ON, OFF), encoding="utf-8")
        shutil.copyfile(BUILD / "index.html", folder / "index.html")  # last: its presence says the folder is whole

    return built("mermaidflow-ace-", digest, fill, "index.html")


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
