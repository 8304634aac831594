"""#14 item 5: compile/run preparation is linear (no per-node edge scans), and inputs nested deeper than Python's
recursion limit get a one-line error naming the file instead of a RecursionError traceback."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from benchmarks.compile_speed import big_workflow_text
from flowcore.aov import AOVError, AOVGraph
from flowcore.aov import session as S
from flowcore.cli.main import main
from flowcore.execution.compiler import compile_workflow
from flowcore.execution.runtime import prepare
from flowcore.mermaid.reader import parse
from flowcore.model import Workflow


def test_prepare_and_compile_index_the_edges_once(monkeypatch):
    w = parse(big_workflow_text(2_000))

    def per_node_scan(self, node_id):  # the old quadratic path: any use of it fails the test
        raise AssertionError("in_edges called per node")

    monkeypatch.setattr(Workflow, "in_edges", per_node_scan)
    plan = prepare(w, "math")
    assert len(plan.nodes) == len(w.nodes) - 2  # every operator node, PROBLEM and RETURN aside
    into = w.edges_into()
    assert sum(len(v) for v in into.values()) == len(w.edges)
    first = plan.steps[1][0]  # a second link of some chain reads from the first
    assert first.ports[0][1][0].endswith("_0")
    assert "class Workflow" in compile_workflow(w, "math")


def _nested(n: int) -> str:
    return ("flowchart TD\n    PROBLEM([\"Problem\"])\n" + "".join(f"    subgraph S{i}\n" for i in range(n))
            + "    C1[\"Custom\"]\n" + "    end\n" * n
            + "    RETURN([\"Return\"])\n    PROBLEM -->|input| C1\n    C1 --> RETURN\n"
            "    class PROBLEM,RETURN Interface\n")


def test_compile_on_1000_nested_subgraphs_is_one_line_or_a_module(tmp_path, capsys):
    f = tmp_path / "nested.mmd"
    f.write_text(_nested(1000))
    code = main(["compile", str(f), "--task", "math", "-o", str(tmp_path / "out.py")])
    out, err = capsys.readouterr()
    if code == 0:  # the printer walks subgraphs without recursion: the module is written
        assert "class Workflow" in (tmp_path / "out.py").read_text()
    else:
        assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
        assert err.startswith(f"error: {f}: subgraphs are nested 1000 levels deep")
    w = parse(_nested(1000))
    assert len(prepare(w, "math").nodes) == 1  # run preparation does not recurse on subgraphs


DEEP = '{"goal": ' + "[" * 100_000 + "]" * 100_000 + "}"
DEEP_DATA = json.dumps({"goal": "g", "agents": [], "subtasks": {"a": {"subtask_requirement": "x", "data": "@"}}}
                       ).replace('"@"', "[" * 500 + "]" * 500)


@pytest.mark.parametrize("text", [DEEP, DEEP_DATA], ids=["beyond the parser", "beyond later copies"])
def test_deeply_nested_aov_json_is_one_line_naming_the_file(text, tmp_path, capsys):
    with pytest.raises(AOVError, match=r"^JSON nested too deeply \(more than 100 levels\)$"):
        AOVGraph.from_json(text)
    f = tmp_path / "deep.json"
    f.write_text(text)
    assert main(["aov", "metrics", str(f)]) == 1
    out, err = capsys.readouterr()
    assert err == f"error: {f}: JSON nested too deeply (more than 100 levels)\n" and out == ""
    (cand,) = S.candidates_from_texts([("deep.json", text)])
    assert cand.candidate.graph is None and cand.candidate.error.startswith("deep.json: JSON nested too deeply")


@pytest.mark.usefixtures("app_env")
def test_the_aov_page_shows_the_error_and_keeps_its_uploader():
    at = AppTest.from_file("../../pages/aov.py", default_timeout=60).run()
    at.selectbox(key="aov_example_set").set_value(None).run()
    at.text_area(key="aov_paste").set_value(DEEP).run()
    at.button(key="aov_use").click().run()
    assert not at.exception
    shown = [e.value for e in at.error]
    assert any("JSON nested too deeply (more than 100 levels)" in m for m in shown), shown
    assert at.text_area(key="aov_paste").value == DEEP  # nothing typed is lost
    assert any(el.proto.label == "AOV JSON files" for el in at.get("file_uploader"))
