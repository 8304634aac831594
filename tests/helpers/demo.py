"""A workspace with something on every page, for the page-speed benchmark and for looking at the pages by hand:
a finished evaluation, an evolution run, a comparison and an AOV execution, all measured against a scripted
OpenAI-compatible server on 127.0.0.1 (tests/helpers/fakellm.py) that answers a GSM8K problem right when a
hash of the problem and the prompt says so (about 60% of the time, the same reply for the same request).

    .venv/bin/python -m tests.helpers.demo /tmp/demo.db      # then: MERMAIDFLOW_DB=/tmp/demo.db make run
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

from flowcore.tasks import load, split_info

from .fakellm import FakeLLMServer, message_text

ANSWERS = {p.question: p.reference for p in load("gsm8k", "validation") + load("gsm8k", "test")}


def respond(request: dict) -> str:
    """Right for ~60% of (problem, prompt) pairs; ensembles pick the first solution; judges and optimizers
    get a plain reply (the rule-based fallbacks then decide)."""
    text = message_text(request)
    if "most consistent" in text or "lettered" in text:
        return "The most consistent solution is A.\nA"
    for question, reference in ANSWERS.items():
        if question in text:
            h = int(hashlib.sha1(text.encode()).hexdigest()[:8], 16)
            wrong = re.sub(r"\d", lambda m: str((int(m.group()) + 3) % 10), reference)
            return f"Working through it step by step, the answer is {reference if h % 10 < 6 else wrong}."
    return "Done: the subtask is complete."


def seed(db: str | Path, server: FakeLLMServer) -> dict:
    """Fill the workspace at ``db`` (made when missing); returns what was made."""
    from flowcore.aov import session as aov
    from flowcore.evaluation import store as es
    from flowcore.evaluation.compare import baselines, start_comparison
    from flowcore.evolution import EvolutionConfig
    from flowcore.evolution import session as evs
    from flowcore.llm.client import LLMSettings
    from flowcore.workspace import library
    from flowcore.workspace.store import Workspace

    ws = Workspace(str(db))
    settings = LLMSettings(base_url=server.base_url, api_key="demo", max_retries=0, timeout=30)
    name, task, text = next(e for e in library.examples() if e[1] == "math")
    job = es.start_evaluation(ws, settings, workflow_text=text, benchmark="gsm8k", split="validation",
                              problems=load("gsm8k", "validation", limit=8), workflow_name=name, concurrency=4)
    job.wait(300)
    run = evs.start_run(ws, settings, EvolutionConfig(benchmark="gsm8k", rounds=3, candidates=3, seed=1,
                                                      workflow=text, limit=5, mode="programmatic"))
    run.wait(600)
    entries = [(n, t) for n, _, t in baselines("math")[:3]] + [(name, text)]
    cmp = start_comparison(ws, settings, entries, "gsm8k", load("gsm8k", "test", limit=8),
                           split_info("gsm8k", "test", limit=8), concurrency=4)
    cmp.wait(600)
    graph = aov.candidates_from_texts([(n, aov.example_text(n)) for n in aov.examples()[:1]])[0].candidate.graph
    agent, inspector, _ = aov.backends("echo", False, False, None)
    ex = aov.start(ws, graph, agent, inspector)
    aov.run_in_background(ex)
    aov.wait(ex.id, 120)
    return {"evaluation": job.meta["eval_id"], "run": run.meta["run_id"],
            "comparison": cmp.meta["comparison_id"], "aov": ex.id}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    server = FakeLLMServer(respond).start()
    try:
        print(seed(argv[0], server))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
