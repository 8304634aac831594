"""P_avg, C_dependency, steps and the selection rule on hand-computed graphs; the `aov metrics/select` CLI."""

from __future__ import annotations

import json
import math

import networkx as nx
import pytest

from flowcore.aov import AOVError, AOVGraph, c_dependency, choose, compute, p_avg, rank, steps
from flowcore.cli.aov import main


def graph(edges: list[tuple[str, str]], nodes: list[str] | None = None) -> AOVGraph:
    ids = list(dict.fromkeys((nodes or []) + [n for e in edges for n in e]))
    subs = {i: {"subtask_requirement": f"do {i}", "agent": "w", "parents": [p for p, c in edges if c == i]}
            for i in ids}
    return AOVGraph.from_dict({"goal": "g", "agents": [{"id": "w", "role": "worker"}], "subtasks": subs})


CHAIN = [("a", "b"), ("b", "c"), ("c", "d")]
FAN_OUT = [("r", "x"), ("r", "y"), ("r", "z")]
FAN_IN = [("x", "w"), ("y", "w"), ("z", "w")]
DIAMOND = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]


@pytest.mark.parametrize("edges,nodes,P,C,S", [
    # degrees 1,2,2,1: mean 1.5, variance 0.25
    (CHAIN, None, 1.0, 0.5, [["a"], ["b"], ["c"], ["d"]]),
    # degrees 3,1,1,1: mean 1.5, variance (2.25 + 3*0.25)/4 = 0.75
    (FAN_OUT, None, 2.0, math.sqrt(0.75), [["r"], ["x", "y", "z"]]),
    (FAN_IN, None, 2.0, math.sqrt(0.75), [["x", "y", "z"], ["w"]]),
    # every degree is 2
    (DIAMOND, None, 4 / 3, 0.0, [["a"], ["b", "c"], ["d"]]),
    # a -> b plus a lone c: degrees 1,1,0, mean 2/3, variance 2/9
    ([("a", "b")], ["a", "b", "c"], 1.5, math.sqrt(2 / 9), [["a", "c"], ["b"]]),
    # two disconnected chains of different length: T = 3, |V| = 5, degrees 1,2,1,1,1
    ([("a", "b"), ("b", "c"), ("d", "e")], None, 5 / 3, 0.4, [["a", "d"], ["b", "e"], ["c"]]),
    # a single subtask
    ([], ["solo"], 1.0, 0.0, [["solo"]]),
])
def test_metrics_hand_computed(edges, nodes, P, C, S) -> None:
    g = graph(edges, nodes)
    m = compute(g)
    assert m.P_avg == pytest.approx(P, abs=1e-12)
    assert m.C_dependency == pytest.approx(C, abs=1e-12)
    assert m.steps == S and m.T == len(S)
    assert p_avg(g) == pytest.approx(P) and c_dependency(g) == pytest.approx(C)
    # the same numbers straight from a networkx graph
    nxg = nx.DiGraph(edges)
    nxg.add_nodes_from(nodes or [])
    assert compute(nxg).P_avg == pytest.approx(P) and compute(nxg).C_dependency == pytest.approx(C)


def test_steps_keep_file_order_inside_a_generation() -> None:
    g = graph([("z", "m"), ("a", "m")], ["z", "a", "m"])
    assert steps(g) == [["z", "a"], ["m"]]


def test_selection_highest_parallelism_then_lowest_dependency_then_index() -> None:
    fan = compute(graph(FAN_OUT + [("r", "q")]))      # P = 5/2
    k22 = compute(graph([("a", "c"), ("a", "d"), ("b", "c"), ("b", "d")]))  # P 2, C 0
    mixed = compute(graph([("a", "c"), ("a", "d"), ("b", "d")]))           # P 2, C 0.5
    star = compute(graph(FAN_OUT))                                          # P 2, C 0.866
    pairs = compute(graph([("a", "c"), ("b", "d")]))                        # P 2, C 0
    assert choose([k22, fan]) == 1
    assert choose([star, mixed, k22]) == 2
    assert rank([star, mixed, k22]) == [2, 1, 0]
    assert choose([k22, pairs]) == 0 and choose([pairs, k22]) == 0  # full tie: lowest index
    assert rank([None, star, None, k22]) == [3, 1]
    with pytest.raises(AOVError):
        choose([None])


def test_ties_within_tolerance() -> None:
    a = compute(graph(DIAMOND))
    # P_avg 4/3 computed as a float sum differs from 4/3 in the last bits: still a tie -> C decides
    from flowcore.aov.metrics import Metrics
    b = Metrics(a.P_avg + 1e-12, a.C_dependency + 0.1, a.steps)
    c = Metrics(a.P_avg - 1e-12, a.C_dependency, a.steps)
    assert choose([b, c]) == 1
    assert choose([Metrics(a.P_avg + 1e-6, 5.0, a.steps), a]) == 0  # a real difference in P wins


def test_empty_and_cyclic_graphs_are_errors() -> None:
    with pytest.raises(AOVError, match="empty"):
        compute(nx.DiGraph())
    with pytest.raises(AOVError, match=r"cycle: a -> b -> c -> a"):
        compute(nx.DiGraph([("a", "b"), ("b", "c"), ("c", "a")]))
    with pytest.raises(AOVError, match=r"cycle: x -> y -> x"):  # the cycle, not the path into it
        compute(nx.DiGraph([("s", "x"), ("x", "y"), ("y", "x")]))


# ---- command line ---------------------------------------------------------------------------------
def write(tmp_path, name: str, doc: dict) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def test_cli_metrics_json(tmp_path, capsys) -> None:
    f = write(tmp_path, "d.json", graph(DIAMOND).to_dict())
    assert main(["metrics", f, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"P_avg": pytest.approx(4 / 3), "C_dependency": 0.0, "steps": [["a"], ["b", "c"], ["d"]]}


def test_cli_metrics_text_and_minimal_records(tmp_path, capsys) -> None:
    # structure-only files: no agents, no requirements, edges given by `child` only
    f = write(tmp_path, "m.json", {"subtasks": {"a": {"child": ["b", "c"]}, "b": {}, "c": {"child": ["d"]},
                                                "d": {}}})
    assert main(["metrics", f]) == 0
    out = capsys.readouterr().out
    assert "P_avg: 1.33333" in out and "steps (T=3)" in out and "2: b, c" in out


def test_cli_select(tmp_path, capsys) -> None:
    files = [write(tmp_path, "chain.json", graph(CHAIN).to_dict()),
             write(tmp_path, "star.json", graph(FAN_OUT).to_dict()),
             write(tmp_path, "k22.json", graph([("a", "c"), ("a", "d"), ("b", "c"), ("b", "d")]).to_dict())]
    assert main(["select", *files, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["chosen"] == 2
    assert [c["file"] for c in out["candidates"]] == files
    assert out["candidates"][0] == {"file": files[0], "P_avg": 1.0, "C_dependency": 0.5}
    assert main(["select", *files]) == 0
    assert "chosen: 2" in capsys.readouterr().out


def test_cli_cycle_refused_naming_the_cycle(tmp_path, capsys) -> None:
    doc = graph(CHAIN).to_dict()
    doc["subtasks"]["a"]["parents"] = ["d"]
    doc["subtasks"]["d"]["child"] = ["a"]
    f = write(tmp_path, "cyc.json", doc)
    for argv in (["metrics", f, "--json"], ["select", f], ["run", f]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "cycle: a -> b -> c -> d -> a" in err
        assert "Traceback" not in err


def test_cli_usage_and_io_errors(tmp_path, capsys) -> None:
    assert main(["metrics", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["metrics", str(bad)]) == 1
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["metrics"]) == 2
    assert main(["frobnicate"]) == 2
