"""Time and size budgets for what a link, a paste or a check hands the server (issue 25.5).

The attack: a 570-character `?code=` link expanding to 13,000 nested subgraphs that share one id cost ~80 s of
server CPU every time it was opened (12 s in the reader's rename loop, ~54 s in Mermaid 11 in V8), and it stays in
the victim's draft. Now: the reader is linear (0.6 s), Mermaid 11 runs in a child process killed at its budget,
the link's expansion is capped, and a long pasted text is checked in a process that is stopped at its budget."""

from __future__ import annotations

import os
import time

import pytest

from flowcore import check
from flowcore.checker import bounded
from flowcore.mermaid.engines import js as mermaid_js
from flowcore.mermaid.engines.process import check_seconds
from flowcore.workspace import drafts
from flowcore.workspace.drafts import DraftError

NESTED = "flowchart TD\n" + "subgraph a\n" * 13_000 + "end\n" * 13_000


def test_the_570_character_link_costs_seconds_not_minutes():
    code = drafts.encode_text(NESTED)
    assert len(code) < 700  # the link: 570 characters
    text = drafts.decode_text(code)
    assert text == NESTED and len(text) == 195_013
    t = time.process_time()
    diags = check(text, "math")
    soft = time.process_time() - t
    assert {d.code for d in diags} == {"M004"} and soft < 4, soft  # was 12 s of CPU in the rename loop alone
    engine = mermaid_js._engine("parse")
    mermaid_js.parse_check("flowchart TD\n  warm --> up\n")
    pid, kills = engine.pid(), engine.kills
    unique = text + "%% budget test\n"  # not in the verdict cache
    t = time.monotonic()
    err = mermaid_js.parse_check(unique)
    wall = time.monotonic() - t
    print(f"soft check {soft:.2f} s CPU; Mermaid 11 stopped after {wall:.2f} s")
    assert err is not None and "did not finish within its" in err.message, err
    assert wall < 3 * check_seconds() + 1 and engine.kills == kills + 1
    assert not os.path.exists(f"/proc/{pid}")  # the core is free: the child that ran it is gone
    assert mermaid_js.parse_check(unique) is err  # said once per text: reopening the link costs nothing more
    assert mermaid_js.parse_check("flowchart TD\n  after --> kill\n") is None  # a fresh engine checks the next


def test_a_link_that_expands_past_the_cap_is_refused_naming_it():
    code = drafts.encode_text("flowchart TD\n" + "subgraph a\n" * 26_000 + "end\n" * 26_000)
    assert len(code) < 1_200
    with pytest.raises(DraftError, match=r"larger than 256 KB once expanded \(the limit for a workflow in a link"):
        drafts.decode_text(code)


def test_a_long_paste_past_the_budget_is_stopped_and_said(monkeypatch):
    monkeypatch.setenv("MERMAIDFLOW_CHECK_SECONDS", "0.5")
    text = "flowchart TD\n" + "A" + " & A" * 400_000 + " --> B\n"  # 1.6 MB, ~10 s to read: over 0.5 s
    assert bounded.INLINE_CHARS < len(text) <= bounded.MAX_CHARS
    bounded.read("flowchart TD\n" + "%% boot the checker's process\n" * 3_000)
    worker = bounded._get()
    pid, kills = worker.pid(), worker.kills
    t = time.monotonic()
    diags, w, parse_diags = bounded.read(text, "math")
    wall = time.monotonic() - t
    assert [d.code for d in diags] == ["M001"] and diags == parse_diags and not w.nodes
    assert "the checker stopped at its budget (0.5 s of CPU time) on this text (1,600,021 characters)" in \
        diags[0].message
    assert wall < 0.5 * 3 + 1 and worker.kills == kills + 1 and not os.path.exists(f"/proc/{pid}")


def test_a_long_text_within_the_budget_reads_as_it_does_in_process():
    body = "".join(f'    N{i}["Custom<br/>(role: solver)"]\n    N{i} --> N{i + 1}\n' for i in range(2_500))
    text = ("flowchart TD\n    %% @prompt solver: Solve it.\n    PROBLEM([\"Problem\"])\n    RETURN([\"Return\"])\n"
            "    class PROBLEM,RETURN Interface\n    PROBLEM --> N0\n" + body + "    N2500 --> RETURN\n")
    assert len(text) > bounded.INLINE_CHARS
    diags, w, _ = bounded.read(text, "math")
    assert diags == check(text, "math") and len(w.nodes) == 2_503


def test_a_text_past_the_size_limit_is_not_read_at_all():
    t = time.monotonic()
    diags = bounded.check("flowchart TD\n" + "A --> B\n" * 300_000, "math")
    assert [d.code for d in diags] == ["M001"] and "too large to check here (2,400,013 characters" in \
        diags[0].message and time.monotonic() - t < 0.5
