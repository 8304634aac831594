"""Export bundle: a Python module that compiles, the canonical Mermaid, real SVG/PNG drawings, the JSON
description, and no API key anywhere."""

from __future__ import annotations

import json
import py_compile

import pytest

from flowcore import parse
from flowcore.execution.runtime import WorkflowInvalid
from flowcore.export import bundle as export
from flowcore.workspace import library

MARKER = "sk-test-MARKER-0123456789abcdef"


def example(name: str) -> tuple[str, str]:
    for n, task, text in library.examples():
        if n == name:
            return text, task
    raise AssertionError(f"example {name} missing")


@pytest.fixture(scope="module")
def code_bundle() -> dict[str, bytes]:
    text, task = example("humaneval_case_study")
    mp = pytest.MonkeyPatch()
    mp.setenv("OPENAI_API_KEY", MARKER)  # the key is in the environment while exporting
    try:
        return export.export_bundle(parse(text), task=task, name="HumanEval case study")
    finally:
        mp.undo()


def test_bundle_files(code_bundle, tmp_path):
    stem = "HumanEval_case_study"
    assert sorted(code_bundle) == sorted(f"{stem}{ext}" for ext in (".py", ".mmd", ".svg", ".png", ".json"))
    py = tmp_path / f"{stem}.py"
    py.write_bytes(code_bundle[f"{stem}.py"])
    py_compile.compile(str(py), doraise=True)
    assert b"class Workflow" in code_bundle[f"{stem}.py"]
    svg = code_bundle[f"{stem}.svg"].decode()
    assert "<svg" in svg and "CustomCodeGenerate" in svg
    assert code_bundle[f"{stem}.png"].startswith(b"\x89PNG\r\n\x1a\n")
    text, _ = example("humaneval_case_study")
    assert parse(code_bundle[f"{stem}.mmd"].decode()) == parse(text)


def test_no_api_key_in_any_file(code_bundle):
    for name, data in code_bundle.items():
        assert MARKER.encode() not in data, f"{name} contains the API key"


def test_workflow_json_describes_the_graph(code_bundle):
    text, task = example("humaneval_case_study")
    w = parse(text)
    d = json.loads(code_bundle["HumanEval_case_study.json"])
    assert d["format"] == export.FORMAT and d["task"] == task and d["direction"] == w.direction
    assert {"nodes", "edges", "prompts", "mermaid"} <= set(d)
    assert [n["id"] for n in d["nodes"]] == list(w.nodes)
    assert {n["id"]: n["op"] for n in d["nodes"]} == {k: n.op for k, n in w.nodes.items()}
    assert d["prompts"] == w.prompts and len(d["edges"]) == len(w.edges)
    with_prompt = [n for n in d["nodes"] if n["prompt"]]
    assert with_prompt and all(n["prompt_text"] == w.prompts[n["prompt"]] for n in with_prompt)
    # every edge names the port it feeds, or is a Decision route
    for e in d["edges"]:
        assert e["port"] or e.get("route") in ("Passed", "Failed"), e


def test_edge_ports_resolve_defaults():
    text, task = example("math_seed")
    d = export.workflow_json(parse(text), task=task)
    ports = {(e["src"], e["dst"]): e["port"] for e in d["edges"]}
    assert ports == {("PROBLEM", "C1"): "input", ("C1", "RETURN"): "response"}  # unlabelled -> default port


def test_key_in_a_prompt_is_refused(monkeypatch):
    text, task = example("math_seed")
    leaky = text.replace("Solve the math problem", f"Use key {MARKER}. Solve the math problem")
    monkeypatch.setenv("OPENAI_API_KEY", MARKER)
    with pytest.raises(export.ExportError, match="API key"):
        export.export_bundle(parse(leaky), task=task, images=False)
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(export.ExportError):  # a key typed on the Settings page is passed in
        export.export_bundle(parse(leaky), task=task, images=False, secrets=[MARKER])
    assert export.export_bundle(parse(leaky), task=task, images=False)  # no known key: nothing to protect


def test_invalid_workflow_raises_with_diagnostics():
    text, task = example("math_seed")
    with pytest.raises(WorkflowInvalid) as info:
        export.export_bundle(parse(text.replace("    C1 --> RETURN\n", "")), task=task, images=False)
    assert any(d.code == "M005" or d.code == "M004" for d in info.value.diagnostics)


def test_file_stem():
    assert export.file_stem("My flow v2") == "My_flow_v2"
    assert export.file_stem("../../etc/passwd") == "etc_passwd"
    assert export.file_stem("") == export.file_stem(None) == "workflow"
