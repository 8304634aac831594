"""Pathological shapes (issue 25.5): reading stays linear in the text's size, whatever its shape.

A 570-character link expanded to 13,000 nested subgraphs sharing one id; the subgraph rename made reading it
quadratic (12 s at 13,000, 55 s at 26,000), and a chain of links on one line or a long `&` group copied a growing
list at every step. Each family here is a generator of one shape at a given size (hypothesis draws its details);
the checker's CPU time at 4x the size must stay within ~4x (6x allowed for noise on a shared machine), and the
checker must answer, never raise."""

from __future__ import annotations

import gc
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowcore import check, parse_lenient


def nested(n: int, sid: str = "a", body: str = "") -> str:
    """n subgraphs, each inside the last, all with the same id."""
    return "flowchart TD\n" + f"subgraph {sid}\n{body}" * n + "end\n" * n


def shared_ids(n: int, sid: str = "a", body: str = "x") -> str:
    """n flat subgraphs with one id (each renamed id#2, id#3...)."""
    return "flowchart TD\n" + f"subgraph {sid}\n{body}\nend\n" * n


def long_line(n: int, node: str = "A", arrow: str = "-->") -> str:
    """One statement of n links on one line."""
    return "flowchart TD\n" + f"{node}{arrow}" * n + "B\n"


def many_amps(n: int, node: str = "A") -> str:
    """One `&` group of n nodes."""
    return "flowchart TD\n" + node + f" & {node}" * n + " --> B\n"


def deep_and_wide(n: int, sid: str = "a") -> str:
    """Nested subgraphs sharing an id, each holding an `&` chain: the shapes at once."""
    return nested(n, sid, body="P & Q --> R\n")


def members_naming_subgraphs(n: int, sid: str = "a") -> str:
    """n nested subgraphs of one id, then n groups each naming that id as a member (all already placed)."""
    return nested(n, sid) + f"subgraph c\n{sid}\nend\n" * n


def front_matter_list(n: int, sid: str = "a") -> str:
    """A front matter holding a flow list of n items (PyYAML read 400 KB of it in 9-17 s)."""
    return f"---\nconfig: [{'1,' * n}1]\n---\nflowchart TD\n{sid} --> B\n"


def data_on_every_node(n: int, sid: str = "a") -> str:
    """n nodes each with a list in its `@{ }` data (1 MB of it, 8 KB a node, was 26 s)."""
    return "flowchart TD\n" + "".join(f"{sid}{i}@{{ x: [1,2,3,4,5,6,7,8] }}\n" for i in range(n))


def nested_yaml(n: int, sid: str = "a") -> str:
    """A node's data nested n levels deep (PyYAML's scanner is quadratic in the depth: 10 KB was 3 s)."""
    return f"flowchart TD\n{sid}@{{ x: {'[' * n}{']' * n} }}\n"


def block_nested_front_matter(n: int, sid: str = "a") -> str:
    """A front matter of n mappings, each indented under the last."""
    return "---\nc:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(n)) + f"---\nflowchart TD\n{sid}\n"


YAML_FAMILIES = {"front matter list": front_matter_list, "data on every node": data_on_every_node,
                 "nested yaml": nested_yaml, "block-nested front matter": block_nested_front_matter}
FAMILIES = {"deep nesting": nested, "members naming placed subgraphs": members_naming_subgraphs, "shared ids": shared_ids, "long lines": long_line, "many &": many_amps,
            "nesting with & chains": deep_and_wide, "front matter list": front_matter_list,
            "data on every node": data_on_every_node, "nested yaml": nested_yaml}
BASE = {"deep nesting": 2500, "members naming placed subgraphs": 1500, "shared ids": 2500, "long lines": 6000, "many &": 6000,
        "nesting with & chains": 1200, "front matter list": 2000, "data on every node": 800, "nested yaml": 1000}


def _cpu(text: str) -> float:
    """The least CPU time of three checks (CPU, not wall: other work on the machine does not count)."""
    best = float("inf")
    for _ in range(3):
        gc.collect()
        t = time.process_time()
        check(text, "math")
        best = min(best, time.process_time() - t)
    return best


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_reading_time_grows_linearly_with_the_size(family):
    make, n = FAMILIES[family], BASE[family]
    small, big = make(n), make(4 * n)
    a, b = _cpu(small), _cpu(big)
    print(f"{family}: {len(small):,} chars {a * 1000:.0f} ms, {len(big):,} chars {b * 1000:.0f} ms, x{b / a:.1f}")
    assert b <= 6 * a + 0.05, f"{family}: x{b / a:.1f} for 4x the size ({a:.3f} s -> {b:.3f} s)"


def _renamed_the_old_way(sids: list[str]) -> list[str]:
    """The reader's keys as the quadratic loop made them: id, then id#2, id#3... the first one free."""
    taken: set[str] = set()
    out = []
    for sid in sids:
        k, n = sid, 1
        while k in taken:
            n += 1
            k = f"{sid}#{n}"
        taken.add(k)
        out.append(k)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "a#2", "a#3", "b", "a#2#2"]), st.booleans()), min_size=1,
                max_size=12))
def test_shared_id_subgraphs_get_the_keys_they_always_got(spec):
    # each subgraph either closes at once or stays open around the next ones: flat and nested mixed
    text, open_ = "flowchart TD\n", 0
    for i, (sid, nest) in enumerate(spec):
        text += f"subgraph {sid}\nx{i}\n"
        if nest:
            open_ += 1
        else:
            text += "end\n"
    text += "end\n" * open_
    w, diags = parse_lenient(text)
    assert not [d for d in diags if d.code == "M001"], diags
    assert list(w.subgraphs) == _renamed_the_old_way([sg.id for sg in w.subgraphs.values()])


ids = st.sampled_from(["a", "S1", "x_y", "end1", "é", "id-1", "n1"])


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(FAMILIES)), st.integers(1, 400), ids)
def test_every_pathological_shape_is_checked_without_raising(family, n, sid):
    text = FAMILIES[family](n, sid)
    diags = check(text, "math")
    assert all(d.code.startswith("M") for d in diags)
    w, _ = parse_lenient(text)
    if family in ("deep nesting", "shared ids", "nesting with & chains"):
        assert len(w.subgraphs) == n
    if family == "members naming placed subgraphs":
        assert len(w.subgraphs) == 2 * n


# Each YAML shape at about 1 MB (the served body cap) is a few hundred thousand times what Mermaid's real data and
# configs hold: the size, depth and per-text bounds (flowcore.mermaid.yamldata) refuse it before PyYAML reads it.
YAML_AT_1MB = {"front matter list": 500_000, "data on every node": 30_000, "nested yaml": 500_000,
               "block-nested front matter": 1_400}


@pytest.mark.parametrize("family", sorted(YAML_FAMILIES))
def test_pathological_yaml_of_a_megabyte_is_checked_within_a_cpu_bound(family):
    text = YAML_FAMILIES[family](YAML_AT_1MB[family])
    assert 0.9e6 <= len(text) <= 2.1e6, len(text)
    cpu = _cpu(text)
    # 30,000 nodes with data: past the text's YAML bound each one is an error, which costs the reader what any
    # statement in error costs; the anchor is as many statements in error with no YAML at all
    lines = text.count("\n")
    anchor = _cpu("flowchart TD\n" + "".join(f"a{i} --> ))) x\n" for i in range(lines))) if lines > 1000 else 0.0
    print(f"{family}: {len(text):,} chars, {cpu:.2f} s of CPU (anchor: {lines:,} statements in error, "
          f"{anchor:.2f} s)")
    assert cpu < 1.5 * anchor + 2.0, f"{family}: {cpu:.2f} s of CPU for {len(text):,} characters of YAML"
    w, diags = parse_lenient(text)
    assert [d for d in diags if d.code == "M001"], "a megabyte of YAML is refused, naming the bound"
