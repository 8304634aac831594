"""Mermaid 11's live verdict for the Editor: never blocks, debounced, added only when the soft reader accepts."""

from __future__ import annotations

import time

from flowcore import check
from flowcore.mermaid.engines.js import MAX_CHECK_CHARS
from flowcore.mermaid.live import verdict, wait, with_mermaid

OK = "flowchart TD\n  PROBLEM([Problem]) --> C1[\"Custom\"] --> RETURN([Return])\n"


def test_verdict_does_not_block_and_arrives():
    text = OK + f"%% {time.time()}\n"
    t0 = time.perf_counter()
    first = verdict(text)
    assert time.perf_counter() - t0 < 0.05  # the typing path only schedules the check
    assert first is None
    v = wait(text, timeout=60)
    assert v is not None and v.ok


def test_mermaids_error_joins_the_diagnostics_when_the_soft_reader_accepts():
    # a text too large for the hard check: the soft reader accepts it, Mermaid's check refuses it
    big = "flowchart TD\n" + "".join(f"  N{i} --> N{i + 1}\n" for i in range(MAX_CHECK_CHARS // 12))
    soft = check(big)
    assert not any(d.code == "M001" for d in soft)
    assert wait(big, timeout=60) is not None
    diags, pending = with_mermaid(big, soft)
    assert not pending
    assert any(d.code == "M001" and "Mermaid 11" in d.message and "too large" in d.message for d in diags)


def test_a_soft_syntax_error_is_not_sent_to_mermaid():
    bad = "flowchart TD\n  A -->\n"
    diags, pending = with_mermaid(bad, check(bad))
    assert not pending and [d.code for d in diags if d.code == "M001"]
