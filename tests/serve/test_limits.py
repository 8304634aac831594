"""flowcore.serve.limits: the quick count of a workflow's nodes and edges is never under what Mermaid's reader
builds from the text (else a huge text would slip through to the reader), is near it for real workflows (else
one would be refused), and costs next to nothing on a 1 MiB text. The settings are read and checked."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from flowcore.mermaid.grammar import parse_flowchart
from flowcore.mermaid.reader import WorkflowSyntaxError, parse
from flowcore.serve.limits import SLACK, Limits, quick_bound, screen

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "assets" / "examples").glob("*.mmd"))
LINKS = ["-->", "---", "-.->", "-.-", "==>", "===", "~~~", "<-->", "--o", "--x", "-- a label -->", "-->|label|",
         "-. dotted .->", "== thick ==>", "---->", "o--o", "x--x", "e1@-->"]


def _counts(text: str) -> tuple[int, int] | None:
    try:
        w = parse(text)
    except WorkflowSyntaxError:
        return None
    return len(w.nodes), len(w.edges)


def _graph(text: str) -> tuple[int, int, bool]:
    """What Mermaid's grammar builds from the text, reading on after a bad line as the checker does: (vertices,
    edges, whether it read without an error)."""
    fp = parse_flowchart(text, recover=True)
    return len(fp.db.vertices), len(fp.db.edges), not fp.errors


def _random_flowchart(rng: random.Random) -> str:
    lines = ["flowchart TD"]
    for _ in range(rng.randint(1, 30)):
        groups = [" & ".join(f"n{rng.randint(0, 40)}" for _ in range(rng.randint(1, 4)))
                  for _ in range(rng.randint(1, 4))]
        stmt = groups[0]
        for g in groups[1:]:
            stmt += f" {rng.choice(LINKS).replace('e1@', f'e{rng.randint(0, 9**6)}@')} {g}"
        lines.append(("    " if rng.random() < 0.5 else "") + stmt + (";" if rng.random() < 0.2 else ""))
        if rng.random() < 0.2:
            lines.append("    %% @prompt p: a comment line --> with & arrows & ampersands")
    return "\r\n".join(lines) if rng.random() < 0.2 else "\n".join(lines)


def test_the_quick_count_is_never_under_the_readers_own():
    rng = random.Random(27)
    texts = [p.read_text() for p in EXAMPLES] + [_random_flowchart(rng) for _ in range(300)]
    texts += ["flowchart TD\n" + " & ".join(f"A{i}" for i in range(40)) + " --> " +
              " & ".join(f"B{i}" for i in range(40)),
              "flowchart TD\nA-->B-->C-->D;E-->F\nG\nH\n%%x\rI-->J-->K"]  # a lone CR ends a comment line
    clean = 0
    for text in texts:
        vertices, edges, ok = _graph(text)
        clean += ok
        assert quick_bound(text) >= (vertices, edges) or \
            (quick_bound(text)[0] >= vertices and quick_bound(text)[1] >= edges), (text, vertices, edges)
        counts = _counts(text)
        if counts is not None:  # the workflow model's nodes and edges are the graph's
            assert quick_bound(text)[0] >= counts[0] and quick_bound(text)[1] >= counts[1]
    assert clean >= 200  # most of the random texts read without an error


def test_a_real_workflow_is_counted_near_what_it_is():
    for path in EXAMPLES:
        counts = _counts(path.read_text())
        if counts is None:
            continue
        nodes, edges = quick_bound(path.read_text())
        # at most half the slack: a workflow twice as dense at the limits is still counted by the reader, not refused
        assert nodes <= SLACK / 2 * counts[0] and edges <= SLACK / 2 * max(counts[1], 1), (path.name, counts, nodes)
        assert screen(path.read_text(), Limits()) == (None, False), path.name


def test_a_huge_text_is_refused_by_the_quick_count_within_milliseconds():
    chain = "flowchart TD\n" + "-->".join(f"N{i}" for i in range(50_000))
    amps = "flowchart TD\n" + " & ".join(f"A{i}" for i in range(300)) + " --> " + \
        " & ".join(f"B{i}" for i in range(300))
    prompts = "flowchart TD\n" + "%% @prompt p: words & --> words\n" * 30_000 + "A --> B\n"  # ~1 MiB of comments
    for text in (chain, amps):
        start = time.perf_counter()
        refusal, _ = screen(text, Limits())
        took = time.perf_counter() - start
        assert refusal is not None and "at most 500 nodes and 2,000 edges" in refusal, refusal
        assert took < 0.05, f"the quick count took {took * 1000:.0f} ms"
    start = time.perf_counter()
    assert screen(prompts, Limits()) == (None, False)  # comment lines are never counted
    assert time.perf_counter() - start < 0.05


def test_a_text_near_the_limits_is_left_to_the_readers_count():
    text = "flowchart TD\n" + "-->".join(f"N{i}" for i in range(600))  # 600 nodes: over 500, within the slack
    refusal, need = screen(text, Limits())
    assert refusal is None and need is True
    assert quick_bound(text)[0] < SLACK * Limits().max_nodes


def test_the_settings_are_read_and_a_bad_one_is_named():
    lim = Limits.from_env({"MERMAIDFLOW_SERVE_MAX_NODES": "50", "MERMAIDFLOW_MCP_EVALS_PER_OWNER": " 3 "})
    assert (lim.max_nodes, lim.evals_per_owner, lim.max_edges) == (50, 3, Limits().max_edges)
    for bad in ("0", "-1", "lots", "2.5"):
        with pytest.raises(ValueError, match="MERMAIDFLOW_MCP_RUNS must be a whole number"):
            Limits.from_env({"MERMAIDFLOW_MCP_RUNS": bad})
