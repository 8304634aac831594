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


FAMILIES = {"deep nesting": nested, "members naming placed subgraphs": members_naming_subgraphs, "shared ids": shared_ids, "long lines": long_line, "many &": many_amps,
            "nesting with & chains": deep_and_wide}
BASE = {"deep nesting": 2500, "members naming placed subgraphs": 1500, "shared ids": 2500, "long lines": 6000, "many &": 6000,
        "nesting with & chains": 1200}


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
