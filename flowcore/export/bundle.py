"""Export a workflow: the standalone Python module, the canonical Mermaid text, SVG and PNG drawings, and a
JSON description of the graph (nodes, edges with their ports, prompts).

No file ever carries an API key: nothing here reads one, and ``export_bundle`` refuses (ExportError) when a
known key (the environment's or one passed in ``secrets``) appears in any file, e.g. pasted into a prompt.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from typing import Any

from flowcore import catalogue as cat
from flowcore.execution.compiler import compile_workflow
from flowcore.mermaid.reader import to_mermaid
from flowcore.mermaid.safe import display_copy
from flowcore.model import Workflow

__all__ = ["FORMAT", "MIME", "ExportError", "assert_no_secrets", "export_bundle", "file_stem", "workflow_json"]

FORMAT = "mermaidflow-workflow/1"
KEY_ENV = ("OPENAI_API_KEY",)
MIME = {".py": "text/x-python", ".mmd": "text/plain", ".svg": "image/svg+xml", ".png": "image/png",
        ".json": "application/json"}


class ExportError(ValueError):
    """The workflow cannot be exported as asked (it would carry a secret)."""


def drawing_text(w: Workflow) -> str:
    """The Mermaid text the .svg and .png are drawn from: styled, and through the one drawing sanitiser, so an
    exported picture opened in a browser loads nothing either (the .mmd keeps the workflow as written)."""
    return to_mermaid(display_copy(w), styles=True)


def file_stem(name: str | None) -> str:
    """A safe file name stem from a workflow name ('My flow v2' -> 'My_flow_v2')."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", (name or "").strip()).strip("._")
    return stem or "workflow"


def _edge_json(w: Workflow, i: int) -> dict[str, Any]:
    e = w.edges[i]
    src, dst = w.nodes.get(e.src), w.nodes.get(e.dst)
    out: dict[str, Any] = {"src": e.src, "dst": e.dst, "label": e.label, "arrow": e.arrow}
    if src is not None and src.op == cat.DECISION:
        out["route"] = "Passed" if (e.label or "").strip().lower() == "passed" else "Failed"
        out["port"] = None
    else:
        port = cat.port_of(dst.op, dst.id, e.label) if dst is not None and dst.op else None
        out["port"] = port.name if port is not None else e.label  # unknown port: as written (the checker says so)
    return out


def workflow_json(w: Workflow, *, task: str | None = None, name: str | None = None) -> dict[str, Any]:
    """The workflow as plain JSON data: direction, nodes (op, label, prompt name and text), edges with the
    input port each one feeds (or the Decision route it is), the prompts, and the canonical Mermaid text."""
    nodes = []
    for n in w.nodes.values():
        nodes.append({"id": n.id, "op": n.op, "label": n.label, "shape": n.shape, "prompt": n.prompt,
                      "prompt_text": w.prompts.get(n.prompt) if n.prompt else None, "subgraph": n.subgraph,
                      "classes": list(n.classes)})
    return {"format": FORMAT, "name": name, "task": task, "direction": w.direction, "nodes": nodes,
            "edges": [_edge_json(w, i) for i in range(len(w.edges))], "prompts": dict(w.prompts),
            "subgraphs": [{"id": s.id, "title": s.title, "parent": s.parent} for s in w.subgraphs.values()],
            "mermaid": to_mermaid(w)}


def _secrets(extra: Iterable[str | None]) -> list[str]:
    found = [os.environ.get(k) for k in KEY_ENV] + list(extra)
    return [s.strip() for s in found if s and len(s.strip()) >= 8]  # short strings would match by chance


def export_bundle(w: Workflow, *, task: str | None = None, name: str | None = None, images: bool = True,
                  secrets: Iterable[str | None] = ()) -> dict[str, bytes]:
    """{file name: bytes} for <stem>.py, .mmd, .json and (with ``images``) .svg and .png.

    Raises WorkflowInvalid when the workflow does not check (no Python for it), MermaidRenderError when
    Mermaid cannot draw it, ExportError when a known API key would end up in a file."""
    stem = file_stem(name)
    files = {
        f"{stem}.py": compile_workflow(w, task).encode(),
        f"{stem}.mmd": to_mermaid(w).encode(),
        f"{stem}.json": (json.dumps(workflow_json(w, task=task, name=name), indent=2, ensure_ascii=False)
                         + "\n").encode(),
    }
    if images:
        from flowcore.mermaid.engines import (
            js as mermaid_js,  # the QuickJS engine starts only when a drawing is asked for
        )

        drawing = drawing_text(w)
        files[f"{stem}.svg"] = mermaid_js.render_svg(drawing).encode()
        files[f"{stem}.png"] = mermaid_js.render_png(drawing)
    assert_no_secrets(files, secrets)
    return files


def assert_no_secrets(files: dict[str, bytes], secrets: Iterable[str | None] = ()) -> None:
    """ExportError naming the file when a known API key appears in it."""
    for key in _secrets(secrets):
        needle = key.encode()
        for fname, data in files.items():
            if needle in data:
                raise ExportError(f"{fname} would contain your API key (it appears in the workflow text, e.g. "
                                  "in a prompt): remove it from the workflow before exporting")
