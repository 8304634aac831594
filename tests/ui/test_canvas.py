"""Canvas <-> workflow: round trips on every example, typed additions, connections, deletions, layout."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowcore import check, parse, to_mermaid
from flowcore.ui import canvas as cv
from flowcore.workspace.library import examples

EXAMPLES = examples()
SEED = next(t for n, _, t in EXAMPLES if n == "math_seed")
CODE = next(t for n, _, t in EXAMPLES if n == "code_seed")


def edge_tuples(w):
    return [(e.src, e.dst, e.label) for e in w.edges]


@pytest.mark.parametrize("name,task,text", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_text_canvas_text_round_trips_on_every_example(name, task, text):
    w = parse(text)
    canvas = cv.to_canvas(w)
    assert [n["id"] for n in canvas["nodes"]] == list(w.nodes)
    assert len(canvas["edges"]) == len(w.edges)
    back = cv.apply_canvas(w, canvas)
    assert back == w
    assert parse(to_mermaid(back)) == w
    assert cv.to_canvas(w) == canvas  # stable positions


@pytest.mark.parametrize("name,task,text", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_layout_puts_every_edge_downstream_and_no_two_nodes_on_one_spot(name, task, text):
    w = parse(text)
    pos = {n["id"]: (n["x"], n["y"]) for n in cv.to_canvas(w)["nodes"]}
    assert len(set(pos.values())) == len(pos)
    for e in w.edges:
        assert pos[e.dst][1] > pos[e.src][1], (e.src, e.dst)  # flowchart TD: layers go down


def test_layout_follows_the_direction_and_survives_cycles():
    lr = parse("flowchart LR\n A --> B --> C\n")
    xs = [n["x"] for n in cv.to_canvas(lr)["nodes"]]
    assert xs == sorted(xs) and len(set(xs)) == 3
    bt = parse("flowchart BT\n A --> B\n")
    ys = {n["id"]: n["y"] for n in cv.to_canvas(bt)["nodes"]}
    assert ys["B"] < ys["A"]
    cyclic = parse("flowchart TD\n A --> B --> C --> A\n C --> D\n")
    canvas = cv.to_canvas(cyclic)
    assert len(canvas["nodes"]) == 4 and cv.apply_canvas(cyclic, canvas) == cyclic


def test_positions_override_the_layout_for_known_nodes_only():
    w = parse(SEED)
    canvas = cv.to_canvas(w, {"C1": (5, 7), "GONE": (1, 1)})
    c1 = next(n for n in canvas["nodes"] if n["id"] == "C1")
    assert (c1["x"], c1["y"]) == (5.0, 7.0)
    assert {n["id"] for n in canvas["nodes"]} == {"PROBLEM", "C1", "RETURN"}


def test_adding_palette_nodes_gives_typed_nodes_with_prefixed_ids_and_prompt_names():
    w = parse(SEED)
    canvas = cv.to_canvas(w)
    for item in ("CustomOp", "ScEnsembleOp", "ProgrammerOp", "CustomOp"):
        canvas = cv.add_palette_node(canvas, item)
    out = cv.apply_canvas(w, canvas)
    assert list(out.nodes)[3:] == ["C2", "E1", "P1", "C3"]
    assert out.nodes["C2"].op == "CustomOp" and out.nodes["C2"].label == "Custom<br/>(role: c2)"
    assert out.nodes["C2"].prompt == "c2" and out.nodes["C3"].prompt == "c3"
    assert out.nodes["E1"].label == "ScEnsemble" and out.nodes["P1"].op == "ProgrammerOp"
    again = parse(to_mermaid(out))
    assert again == out  # the new nodes are typed in the text (class lines), not just in the model
    codes = {d.code for d in check(out, "math")}
    assert "M013" in codes and "M014" not in codes and "M003" not in codes


def test_a_node_dropped_from_the_palette_stays_where_it_was_dropped():
    w = parse(SEED)
    canvas = cv.to_canvas(w)
    canvas["nodes"].append({"id": "new-drop-1", "op": "ReviseOp", "label": "Revise", "x": 612.5, "y": 140})
    out = cv.apply_canvas(w, canvas)
    dropped = cv.dropped_positions(w, canvas, out)
    assert dropped == {"V1": (612.5, 140.0)}  # under the id the text gives it
    v1 = next(n for n in cv.to_canvas(out, dropped)["nodes"] if n["id"] == "V1")
    assert (v1["x"], v1["y"]) == (612.5, 140.0)  # not the layout's middle layer
    laid = next(n for n in cv.to_canvas(out)["nodes"] if n["id"] == "V1")
    assert (laid["x"], laid["y"]) != (612.5, 140.0)  # (which is where it would be without)
    canvas["nodes"][-1].update(x=-30, y=3)  # dropped at the very edge: moved in, its port names drawn whole
    assert cv.dropped_positions(w, canvas, out) == {"V1": (cv.MARGIN, 2 * cv.MARGIN)}
    canvas["nodes"][-1].update(x=612.5, y=140)
    # a node the drawing cannot type is not added: nothing to match, the layout places the rest
    canvas["nodes"].append({"id": "new-drop-2", "op": None, "label": "", "x": 1, "y": 1})
    assert cv.dropped_positions(w, canvas, cv.apply_canvas(w, canvas)) == {}
    assert cv.dropped_positions(w, cv.to_canvas(w), w) == {}  # nothing new


def test_code_palette_and_interfaces():
    w = parse("flowchart TD\n PROBLEM([Problem])\n")
    items = cv.palette("code", w)
    assert "CustomCodeGenerateOp" in items and "ProgrammerOp" not in items
    assert items[-2:] == ["ENTRY_POINT", "RETURN"]
    canvas = cv.add_palette_node(cv.add_palette_node(cv.to_canvas(w), "RETURN"), "CustomCodeGenerateOp")
    out = cv.apply_canvas(w, canvas)
    assert out.nodes["RETURN"].op == "Interface" and out.nodes["RETURN"].shape == "(["
    assert out.nodes["G1"].label == "CustomCodeGenerate<br/>(instruction: g1)"
    with pytest.raises(ValueError, match="unknown palette item 'Teleport'"):
        cv.add_palette_node(canvas, "Teleport")


def _connect(w, src, dst, label=""):
    canvas = cv.to_canvas(w)
    canvas["edges"].append({"id": f"st-flow-edge_{src}-{dst}", "source": src, "target": dst, "label": label})
    return cv.apply_canvas(w, canvas)


def test_new_connections_pick_the_port_that_takes_what_the_source_emits():
    w = parse(SEED)
    w = cv.apply_canvas(w, cv.add_palette_node(cv.to_canvas(w), "ProgrammerOp"))
    w = _connect(w, "PROBLEM", "P1")
    assert edge_tuples(w)[-1] == ("PROBLEM", "P1", None)  # default port 'problem' takes a Problem
    w = _connect(w, "C1", "P1")
    assert edge_tuples(w)[-1] == ("C1", "P1", "analysis")  # Text does not fit 'problem'; 'analysis' does
    w = _connect(w, "P1", "RETURN", label="response")
    assert edge_tuples(w)[-1] == ("P1", "RETURN", "response")  # a label that is set is kept
    code = parse(CODE)
    code.edges = [e for e in code.edges if e.src != "ENTRY_POINT"]
    code = _connect(code, "ENTRY_POINT", "G1")
    assert edge_tuples(code)[-1] == ("ENTRY_POINT", "G1", "entry_point")
    assert not [d for d in check(code, "code") if d.severity == "error"]


def test_connections_out_of_a_decision_are_routes():
    w = parse("flowchart TD\n T1[Test]\n D1{Decision}\n G1[CustomCodeGenerate]\n RETURN([Return])\n"
              " T1 --> D1\n")
    w = _connect(w, "D1", "RETURN")
    w = _connect(w, "D1", "G1")
    assert edge_tuples(w)[-2:] == [("D1", "RETURN", "Passed"), ("D1", "G1", "Failed")]


def test_impossible_connections_are_ignored():
    w = parse(SEED)
    for src, dst in (("C1", "PROBLEM"), ("RETURN", "C1"), ("C1", "C1"), ("C1", "NOWHERE")):
        assert _connect(w, src, dst) == w
    canvas = cv.to_canvas(w)
    canvas["edges"].append(dict(canvas["edges"][0], id="dup"))  # the same edge drawn twice
    assert cv.apply_canvas(w, canvas) == w


def test_deleting_a_node_drops_its_edges_and_keeps_prompts_and_the_rest():
    w = parse(next(t for n, _, t in EXAMPLES if n == "math_case_study"))
    canvas = cv.to_canvas(w)
    canvas["nodes"] = [n for n in canvas["nodes"] if n["id"] != "C3"]  # what the canvas sends back
    canvas["edges"] = [e for e in canvas["edges"] if "C3" not in (e["source"], e["target"])]
    out = cv.apply_canvas(w, canvas)
    assert "C3" not in out.nodes and all("C3" not in (e.src, e.dst) for e in out.edges)
    assert out.prompts == w.prompts and out.nodes["C1"] == w.nodes["C1"]
    assert len(out.edges) == len(w.edges) - 2
    stale = cv.to_canvas(w)  # even if the canvas still lists the node's edges, they go with the node
    stale["nodes"] = [n for n in stale["nodes"] if n["id"] != "C3"]
    assert cv.apply_canvas(w, stale) == out


def test_removing_and_relabelling_edges():
    w = parse(SEED)
    canvas = cv.to_canvas(w)
    canvas["edges"] = [e for e in canvas["edges"] if e["target"] != "RETURN"]
    out = cv.apply_canvas(w, canvas)
    assert edge_tuples(out) == [("PROBLEM", "C1", "input")]
    canvas = cv.to_canvas(w)
    canvas["edges"][1]["label"] = "response"
    assert edge_tuples(cv.apply_canvas(w, canvas))[1] == ("C1", "RETURN", "response")


@given(st.lists(st.tuples(st.sampled_from(["add", "connect", "delete"]), st.integers(0, 50),
                          st.integers(0, 50), st.sampled_from(cv.palette("math"))), max_size=12))
def test_any_sequence_of_drawing_edits_gives_a_workflow_the_text_reproduces(steps):
    w = parse(SEED)
    for action, i, j, item in steps:
        canvas = cv.to_canvas(w)
        ids = [n["id"] for n in canvas["nodes"]]
        if action == "add":
            canvas = cv.add_palette_node(canvas, item)
        elif action == "connect" and ids:
            canvas["edges"].append({"id": f"new{i}-{j}", "source": ids[i % len(ids)],
                                    "target": ids[j % len(ids)], "label": ""})
        elif ids:
            canvas["nodes"] = [n for n in canvas["nodes"] if n["id"] != ids[i % len(ids)]]
        w = cv.apply_canvas(w, canvas)
        assert parse(to_mermaid(w)) == w
        assert all(e.src in w.nodes and e.dst in w.nodes for e in w.edges)
        assert not [d for d in check(w, "math") if d.code in ("M001", "M003", "M014")]


def test_set_prompt_text_replaces_in_place_or_adds_after_the_header():
    text = ("%% note\nflowchart TD\n    %% keep me\n    %% @prompt solver: old\n"
            "    C1[\"Custom<br/>(role: solver)\"]\n")
    out = cv.set_prompt_text(text, "solver", "Two\nlines \\boxed{}")
    assert out.splitlines()[3].startswith("    %% @prompt solver: Two\\nlines ")  # same line, same indent
    assert "%% keep me" in out and out.count("@prompt") == 1
    assert parse(out).prompts["solver"] == "Two\nlines \\boxed{}"
    added = cv.set_prompt_text(text, "critic", "Be strict.")
    assert added.splitlines()[2] == "    %% @prompt critic: Be strict."
    assert parse(added).prompts == {"critic": "Be strict.", "solver": "old"}


def test_annotations_are_zero_based_and_typed():
    diags = check("flowchart TD\n    PROBLEM([Problem])\n    C1[\"Custom<br/>(role: x)\"]\n"
                  "    PROBLEM --> C1 -->\n", "math")
    ann = cv.annotations(diags)
    assert ann == [{"row": 3, "column": 18, "type": "error", "text": ann[0]["text"]}]  # the dangling arrow
    assert ann[0]["text"].startswith("M001 ")
    warn = cv.annotations(check("flowchart TD\n PROBLEM([P])\n C1[\"Custom<br/>(role: x)\"]\n RETURN([R])\n"
                                " PROBLEM --> C1 --> RETURN\n", "math"))
    assert [(a["row"], a["type"], a["text"][:4]) for a in warn] == [(2, "warning", "M013")]


# -- the node dialog ------------------------------------------------------------------------------------------

DIALOG = ('flowchart TD\n%% @prompt solver: Solve it.\nPROBLEM(["Problem"])\nC1["Custom<br/>(role: solver)"]\n'
          'RETURN(["Return"])\nPROBLEM --> C1\nC1 --> RETURN\n')


def test_the_dialog_changes_the_type_in_the_text_and_the_checker_agrees():
    from flowcore import check, is_valid, parse, to_mermaid

    w = parse(DIALOG)
    form = cv.node_form(w, "C1", "math")
    assert form["op"] == "CustomOp" and form["prompt"] == "solver" and form["prompt_text"] == "Solve it."
    assert form["incoming"] == [{"index": 0, "source": "PROBLEM", "port": "", "choices": ["input"]}]
    text = to_mermaid(cv.edit_node(w, "C1", op="AnswerGenerateOp"))
    assert 'C1["AnswerGenerate"]' in text and parse(text).nodes["C1"].op == "AnswerGenerateOp"
    assert is_valid(check(text, "math"))
    back = parse(to_mermaid(cv.edit_node(parse(text), "C1", op="CustomOp")))  # a prompt-driven type gets a role
    assert back.nodes["C1"].op == "CustomOp" and back.nodes["C1"].prompt == "c1"


def test_the_dialog_sets_the_prompt_and_ports_and_names_a_bad_port():
    from flowcore import parse

    w = cv.edit_node(parse(DIALOG), "C1", prompt="  Think twice.  ", ports={0: "input"})
    assert w.prompts["solver"] == "Think twice." and w.edges[0].label == "input"
    with pytest.raises(ValueError, match="has no input port 'feedback'; its ports: input"):
        cv.edit_node(w, "C1", ports={0: "feedback"})
    with pytest.raises(ValueError, match="edge 1 does not feed node C1"):
        cv.edit_node(w, "C1", ports={1: "input"})
    with pytest.raises(ValueError, match="cannot become 'Nope'"):
        cv.edit_node(w, "C1", op="Nope")
    assert "C1" not in cv.delete_node(w, "C1").nodes and not any("C1" in (e.src, e.dst)
                                                                 for e in cv.delete_node(w, "C1").edges)


# -- the layered layout ---------------------------------------------------------------------------------------

# crossing pairs of the layout before it was layered (centre to centre, straight): 7, 16, 15 of 153, 231, 190
FEWER = {"gsm8k_case_study": 1, "humaneval_case_study": 5, "math_case_study": 0, "mbpp_case_study": 4}


@pytest.mark.parametrize("name,task,text", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_the_layered_layout_has_few_crossings_and_no_edge_behind_a_node(name, task, text):
    w = parse(text)
    crossed, pairs = cv.crossings(w)
    assert crossed <= FEWER.get(name, 0), (crossed, pairs)
    assert cv.hidden_edges(w) == 0
    pos = cv.layout(w)
    assert min(x for x, _ in pos.values()) >= cv.MARGIN and min(y for _, y in pos.values()) >= cv.MARGIN
    boxes = sorted(pos.values())  # no two nodes overlap
    assert all(abs(a[0] - b[0]) >= cv.NODE_W or abs(a[1] - b[1]) >= cv.NODE_H
               for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_the_counters_see_a_crossing_and_an_edge_behind_a_node():
    w = parse("flowchart TD\nA-->D\nB-->C\nA-->X\nX-->Y\nA-->Y\n")
    pos = {"A": (0, 0), "B": (600, 0), "C": (0, 300), "D": (600, 300), "X": (0, 150), "Y": (0, 450)}
    assert cv.crossings(w, pos, {}) == (1, 10)  # A->D crosses B->C
    assert cv.hidden_edges(w, pos, {}) == 2  # A->Y runs down through X (and C), X->Y through C


def test_a_bent_edge_is_drawn_in_pieces_and_comes_back_whole():
    w = parse(next(t for n, _, t in EXAMPLES if n == "humaneval_case_study"))
    sent = cv.to_canvas(w)
    points, pieces = cv.expand(sent)
    assert points and all(cv.WAYPOINT in p["id"] for p in points)
    back = cv.collapse(sent["nodes"] + [{"id": p["id"]} for p in points], pieces, sent)
    assert sorted(e["id"] for e in back["edges"]) == sorted(e["id"] for e in sent["edges"])
    assert cv.apply_canvas(w, back) == w
    one = next(e["id"] for e in pieces if cv.WAYPOINT in e["id"])  # deleting one piece deletes the edge
    gone = cv.collapse(sent["nodes"], [e for e in pieces if e["id"] != one], sent)
    assert len(gone["edges"]) == len(sent["edges"]) - 1


@pytest.mark.parametrize("name,task,text", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_named_ports_are_ordered_as_their_edges_come_in(name, task, text):
    """A node's port handles (Test: solution, problem, entry_point) are laid out in the order their feeding
    edges arrive, so no two edges cross just above a node; every port is still there."""
    w = parse(text)
    sent = cv.to_canvas(w)
    ordered, plain = cv.named_ports(w, sent), cv.named_ports(w)
    assert {k: sorted(v) for k, v in ordered.items()} == {k: sorted(v) for k, v in plain.items()}
    xs = {n["id"]: n["x"] + cv.NODE_W / 2 for n in sent["nodes"]}
    for nid, names in ordered.items():
        feeds = []
        for i, e in enumerate(w.edges):
            if e.dst == nid:
                bends = sent["bends"].get(f"e{i}")
                feeds.append((names.index(cv.feeds_port(w, nid, e.label).name),
                              bends[-1][0] if bends else xs[e.src]))
        means = [sum(x for p, x in feeds if p == k) / max(1, sum(p == k for p, _ in feeds))
                 for k in sorted({p for p, _ in feeds})]
        assert means == sorted(means), (nid, names, feeds)


ROUTED = ('flowchart TD\nPROBLEM(["Problem"])\nENTRY_POINT(["Entry point"])\nG1["CustomCodeGenerate"]\nT1["Test"]\n'
          'D1{"Decision"}\nV1["Revise"]\nRETURN(["Return"])\nPROBLEM --> G1\nENTRY_POINT -->|entry_point| G1\n'
          'G1 --> T1\nT1 --> D1\nD1 -->|Passed| RETURN\nD1 -->|failed| V1\nV1 --> RETURN\n')


def test_a_decision_has_a_named_handle_per_route_ordered_as_its_edges_go():
    w = parse(ROUTED)
    assert cv.route_handles(w) == {"D1": ["Passed", "Failed"]}  # only the Decision routes; catalogue order
    sent = cv.to_canvas(w)
    x = {n["id"]: n["x"] for n in sent["nodes"]}
    ordered = cv.route_handles(w, sent)["D1"]
    left_first = "Passed" if x["RETURN"] < x["V1"] else "Failed"
    assert ordered[0] == left_first  # the route to the node further left leaves from the left handle
    flipped = {"nodes": [{**n, "x": -n["x"]} for n in sent["nodes"]], "edges": sent["edges"],  # mirrored:
               "bends": {k: [(-x, y) for x, y in v] for k, v in sent["bends"].items()}}  # the other order
    assert cv.route_handles(w, flipped)["D1"] == ordered[::-1]
    points, pieces = cv.expand(sent)
    leaving = cv.edge_routes(w, pieces)
    out_of_d1 = [p for p in pieces if p["source"] == "D1"]
    assert sorted(leaving[p["id"]] for p in out_of_d1) == ["Failed", "Passed"]  # 'failed' -> its handle, Failed
    assert all(p["source"] == "D1" for p in pieces if p["id"] in leaving)
    assert cv.route_of(" PASSED ") == "Passed" and cv.route_of("problem") is None and cv.route_of(None) is None


def test_a_drag_from_a_route_handle_writes_the_route_even_onto_a_named_port():
    w = parse(ROUTED.replace("D1 -->|failed| V1\n", ""))
    sent = cv.to_canvas(w)
    # what the patched canvas sends back for a drag from D1's Failed handle onto V1's 'feedback' handle
    drawn = {**sent, "edges": [*sent["edges"], {"id": "st-flow-edge_D1-V1-Failed-feedback", "source": "D1",
                                                 "target": "V1", "label": "Failed"}]}
    new = cv.apply_canvas(w, drawn)
    assert [(e.src, e.dst, e.label) for e in new.edges if e.src == "D1"] == [("D1", "RETURN", "Passed"),
                                                                             ("D1", "V1", "Failed")]
