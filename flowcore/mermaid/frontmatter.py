"""The front matter (YAML between ``---`` lines at the top) as Mermaid 11 reads it, for its one effect on reading:
whether Mermaid throws. ``extractFrontMatter`` loads it with js-yaml's JSON schema (``yamldata``, so YAML 1.1
words stay text), keeps ``title``, ``displayMode`` and ``config``, and ``processFrontmatter`` then writes
``config.gantt.displayMode``: a ``config`` (or ``config.gantt``) that is a number, text or ``true`` makes that
assignment throw a TypeError, so Mermaid rejects the text.
"""

from __future__ import annotations

from typing import Any

from flowcore.mermaid.errors import MermaidParseError


def _truthy(v: Any) -> bool:
    """JavaScript's truthiness of a value js-yaml loaded (an empty list or mapping is an object: truthy)."""
    if isinstance(v, (list, dict)):
        return True
    if isinstance(v, float) and v != v:
        return False
    return bool(v)


def _js_type(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    return "number" if isinstance(v, (int, float)) else "string"


def problem(doc: str) -> tuple[str, int | None, int | None] | None:
    """Why Mermaid rejects a text with this front matter (message, 1-based line and column in ``doc`` when the
    YAML names one), or None when it reads it."""
    from flowcore.mermaid import yamldata

    try:
        parsed = yamldata.load(doc, limit=yamldata.MAX_FRONT_MATTER_CHARS)
    except yamldata.YamlDataError as exc:
        what = "is refused" if exc.bound else "is not valid YAML"
        return f"the front matter between the --- lines {what}: {exc.message}", exc.line, exc.column
    if not isinstance(parsed, dict):
        return None  # Mermaid reads a list, text or nothing as no settings
    mode = parsed.get("displayMode")
    if not (_truthy(mode) and yamldata.js_str(mode)):
        return None
    config = parsed.get("config") if _truthy(parsed.get("config")) else {}
    if isinstance(config, list):
        return None
    if not isinstance(config, dict):
        return (f"the front matter's config is a {_js_type(config)}, so Mermaid cannot set its gantt.displayMode "
                "(config must be a mapping)", None, None)
    gantt = config.get("gantt")
    if _truthy(gantt) and not isinstance(gantt, (list, dict)):
        return (f"the front matter's config.gantt is a {_js_type(gantt)}, so Mermaid cannot set its displayMode "
                "(config.gantt must be a mapping)", None, None)
    return None


def errors(original: str, front_matters: list[tuple[str, int]]) -> list[MermaidParseError]:
    """The error Mermaid throws for the first front matter it rejects (``Prepared.front_matters``), placed at the
    line and column of ``original`` the YAML names (else the front matter's first line)."""
    for doc, start in front_matters:
        found = problem(doc)
        if found is None:
            continue
        message, line, column = found
        base_line = original.count("\n", 0, start) + 1
        if line is None:
            at = (base_line, 1)
        else:
            first_col = start - (original.rfind("\n", 0, start) + 1) + 1
            at = (base_line + line - 1, column if line > 1 else first_col + (column or 1) - 1)
        return [MermaidParseError(message, pos=-1, line=None, column0=None, kind="db", at=at)]
    return []
