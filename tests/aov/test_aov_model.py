"""AOV records: validation with errors naming subtask and field, derived links, JSON round trip, Mermaid."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flowcore.aov import AOVError, AOVGraph, to_mermaid

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "aov"
AGENTS = [{"id": "coder", "role": "programmer"}, {"id": "tester", "role": "QA"}]


def doc(subtasks: dict, agents: list | None = None) -> dict:
    return {"goal": "ship it", "subtasks": subtasks, "agents": AGENTS if agents is None else agents}


def rec(req: str = "do it", agent: str = "coder", **kw) -> dict:
    return {"subtask_requirement": req, "agent": agent, **kw}


def test_links_derived_from_either_side_and_counts_rewritten() -> None:
    g = AOVGraph.from_dict(doc({
        "a": rec(child=["b", "c"], status="completed", data="A out", num_parents_not_completed=7),
        "b": rec(),                                  # parents derived from a.child
        "c": rec(parents=["a", "b"], agent="tester"),  # b.child derived from here
    }))
    assert g.subtasks["b"].parents == ["a"] and g.subtasks["a"].child == ["b", "c"]
    out = g.to_dict()["subtasks"]
    assert [out[s]["num_parents_not_completed"] for s in "abc"] == [0, 0, 1]
    assert out["c"]["parents"] == ["a", "b"] and out["b"]["child"] == ["c"]
    assert g.ready() == ["b"]


@pytest.mark.parametrize("subtasks,agents,pattern", [
    ({"a": rec(parents=["ghost"])}, None, r"subtask 'a': field 'parents': parent 'ghost' does not exist"),
    ({"a": rec(child=["ghost"])}, None, r"subtask 'a': field 'child': child 'ghost' does not exist"),
    ({"a": rec(agent="designer")}, None, r"subtask 'a': field 'agent': unknown agent 'designer'"),
    ({"a": rec(child=["b"]), "b": rec(parents=[])}, None, r"subtask 'b': field 'parents' lacks 'a'"),
    ({"a": rec(child=[]), "b": rec(parents=["a"])}, None, r"subtask 'a': field 'child' lacks 'b'"),
    ({"a": rec(parents=["b"]), "b": rec(parents=["a"])}, None, r"cycle: a -> b -> a"),
    ({"a": rec(parents=["a"])}, None, r"cycle: a -> a"),
    ({"a": rec(status="done")}, None, r"subtask 'a': field 'status' is 'done'"),
    ({"a": {"agent": "coder"}}, None, r"subtask 'a': field 'subtask_requirement'"),
    ({"a": rec(req="   ")}, None, r"subtask 'a': field 'subtask_requirement'"),
    ({"a": {"subtask_requirement": "x"}}, None, r"subtask 'a': field 'agent' is missing"),
    ({"a": rec(id="b")}, None, r"subtask 'a': field 'id' is 'b'"),
    ({"a": rec(parents="b")}, None, r"subtask 'a': field 'parents' must be a list"),
    ({"a": rec(num_parents_not_completed=-1)}, None, r"num_parents_not_completed"),
    ({}, None, r"empty"),
    ({"a": rec()}, [{"id": "coder"}, {"id": "coder"}], r"agent 'coder' declared twice"),
    ({"a": rec()}, [{"role": "x"}], r"agents\[0\]"),
])
def test_invalid_documents_name_subtask_and_field(subtasks, agents, pattern) -> None:
    with pytest.raises(AOVError, match=pattern):
        AOVGraph.from_dict(doc(subtasks, agents))


def test_longer_cycle_is_named_from_the_first_subtask() -> None:
    with pytest.raises(AOVError) as e:
        AOVGraph.from_dict(doc({"s": rec(), "a": rec(parents=["s", "c"]), "b": rec(parents=["a"]),
                                "c": rec(parents=["b"])}))
    assert str(e.value) == "cycle: a -> b -> c -> a"


def test_not_json_and_not_an_object() -> None:
    with pytest.raises(AOVError, match="not valid JSON"):
        AOVGraph.from_json("{")
    with pytest.raises(AOVError, match="JSON object"):
        AOVGraph.from_json("[1, 2]")


def test_agents_default_to_the_names_the_subtasks_use() -> None:
    g = AOVGraph.from_dict({"goal": "g", "subtasks": {"a": rec(agent="x"),
                                                      "b": rec(agent="y", parents=["a"])}})
    assert g.agent_ids() == ["x", "y"]


def test_json_round_trip_keeps_everything() -> None:
    src = doc({
        "plan": rec("plan", status="completed", data={"files": ["a.py"]}, child=["impl", "test"]),
        "impl": rec("implement", status="failed", data="ERROR: boom", expect=["def main"]),
        "test": rec("write tests", agent="tester", extra_note="kept"),
        "ship": rec("ship", parents=["impl", "test"]),
    })
    g = AOVGraph.from_dict(src)
    text = g.to_json()
    again = AOVGraph.from_json(text)
    assert again.to_dict() == g.to_dict()
    assert again.to_json() == text
    d = json.loads(text)
    assert d["subtasks"]["test"]["extra_note"] == "kept"
    assert d["subtasks"]["impl"]["expect"] == ["def main"]
    assert d["subtasks"]["plan"]["data"] == {"files": ["a.py"]}
    assert list(d["subtasks"]["plan"]) == ["id", "subtask_requirement", "status", "data",
                                            "num_parents_not_completed", "parents", "child", "agent"]
    assert d["subtasks"]["ship"]["num_parents_not_completed"] == 2
    # a list of records with ids is read the same way
    listed = dict(d, subtasks=list(d["subtasks"].values()))
    assert AOVGraph.from_dict(listed).to_dict() == g.to_dict()


@pytest.mark.parametrize("path", sorted(ASSETS.glob("*.json")), ids=lambda p: p.name)
def test_example_files_are_valid(path: Path) -> None:
    g = AOVGraph.load(path)
    assert g.goal and len(g.subtasks) >= 5
    assert AOVGraph.from_json(g.to_json()).to_dict() == json.loads(path.read_text())


def test_mermaid_sanitises_ids_quotes_labels_and_colours_by_status() -> None:
    g = AOVGraph.from_dict(doc({
        "end": rec('write "index.html" <b>#1</b> & more ' + "x" * 80, status="completed", data="ok"),
        "a-b.c": rec("b", parents=["end"], status="failed"),
        "a_b_c": rec("c", parents=["end"], status="running"),
        "d": rec("d", agent="tester", parents=["a-b.c", "a_b_c"]),
    }))
    text = to_mermaid(g)
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    ids = re.findall(r'^\s+(\w+)\["', text, re.M)
    assert ids == ["n_end", "n_a_b_c", "n_a_b_c_2", "n_d"]
    label = re.search(r'n_end\["(.*)"\]', text).group(1)
    assert '"' not in label and "<" not in label and "#quot;index.html#quot;" in label
    assert label.endswith("… (coder)") and len(label) < 120
    assert "    n_a_b_c --> n_d" in lines and "    n_a_b_c_2 --> n_d" in lines
    assert "    class n_end completed" in lines and "    class n_a_b_c failed" in lines
    assert "    class n_a_b_c_2 running" in lines and "    class n_d pending" in lines
    for status, colour in (("pending", "#e5e7eb"), ("running", "#bfdbfe"), ("completed", "#bbf7d0"),
                           ("failed", "#fecaca")):
        assert any(line.strip().startswith(f"classDef {status} fill:{colour}") for line in lines)


def test_mermaid_parses_with_the_real_mermaid_library() -> None:
    mermaidx = pytest.importorskip("mermaidx")
    g = AOVGraph.from_dict(doc({
        "end": rec('quote " hash # semicolon ; %% pipe | [br] {x} (y) `tick` &amp;', status="completed"),
        "graph": rec("b", parents=["end"], status="failed"),
        "x y": rec("c", parents=["graph"], agent="tester"),
    }))
    text = to_mermaid(g, max_label=200, changed=["graph", "not-there"])
    assert "    class n_graph changed" in text.splitlines() and "not" not in text.split("classDef changed")[1]
    svg = mermaidx.render(text).svg()
    assert "quote" in svg and svg.count('class="node') >= 3


def test_cycle_in_a_large_graph_is_named_and_wide_fans_validate() -> None:
    n = 3000
    subs = {"root": rec()}
    subs.update({f"m{i}": rec(parents=["root"]) for i in range(n)})
    subs["sink"] = rec(parents=[f"m{i}" for i in range(n)])
    g = AOVGraph.from_dict({"subtasks": subs}, lenient=True)
    assert len(g.subtasks["root"].child) == n and g.subtasks["m7"].child == ["sink"]
    subs["x"] = rec(parents=["sink", "y"])
    subs["y"] = rec(parents=["x"])
    with pytest.raises(AOVError, match=r"^cycle: x -> y -> x$"):
        AOVGraph.from_dict({"subtasks": subs}, lenient=True)
