"""What one caller of the server may ask for: the size of a workflow that arrives through the MCP tools, and the
per-owner bounds on the work a call sets going (evaluations, evolution runs, publishes, LLM slots, MCP sessions). Each is a setting
(``MERMAIDFLOW_SERVE_*`` / ``MERMAIDFLOW_MCP_*``, docs/serve.md); ``Limits.from_env`` reads them once per server.

A workflow's size is judged in two steps, so that a huge text is refused without reading it:

1. ``quick_bound``: an upper bound on its nodes and edges from a few counts of substrings (C speed: ~1 ms for
   1 MiB), never under what Mermaid's reader builds from the text. Over the limits by more than ``SLACK`` times,
   the text is refused here (a 50,000-node text took the reader 0.5 s and the checker seconds).
2. Otherwise, when the bound is over the limits at all, the text is parsed (in a worker thread: at most
   ``SLACK`` times the limits' worth of statements) and its real counts decide.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields

# A bound over the limits by more than this factor is refused without parsing. Real workflows count 3.5 to 4.7
# times their nodes (class and style lines, the two ends of each link): a dense one at the limits stays under it.
SLACK = 10
# Mermaid's comment lines (its cleanupComments: ``^\s*%%(?!{)[^\n]+\n?``, multiline) are never read as code: a
# prompt lives in one. Blanks narrower than JavaScript's \s strip no more than Mermaid does (the bound stays one).
_COMMENT = re.compile(r"^[ \t]*%%(?!\{)[^\n]+\n?", re.MULTILINE)
# Every link token of Mermaid's flowchart lexer holds one of these (--> --- -- text --> ==> -.-> -.- ~~~ <-->)
_LINKS = ("--", "==", ".-", "~~")


@dataclass(frozen=True)
class Limits:
    max_nodes: int = 500  # MERMAIDFLOW_SERVE_MAX_NODES: nodes of a workflow a tool accepts
    max_edges: int = 2000  # MERMAIDFLOW_SERVE_MAX_EDGES: edges (links) of one
    evals_per_owner: int = 2  # MERMAIDFLOW_MCP_EVALS_PER_OWNER: evaluate_workflow calls going at once per owner
    evals: int = 8  # MERMAIDFLOW_MCP_EVALS: ... and on the whole server
    runs_per_owner: int = 2  # MERMAIDFLOW_MCP_RUNS_PER_OWNER: evolution runs evolve_start set going, per owner
    runs: int = 4  # MERMAIDFLOW_MCP_RUNS: ... and on the whole server
    publish_per_hour: int = 20  # MERMAIDFLOW_MCP_PUBLISH_PER_HOUR: versions one owner publishes over MCP an hour
    publish_chars: int = 256 * 1024  # MERMAIDFLOW_MCP_PUBLISH_MAX_CHARS: characters of one published version
    # LLM call slots (the executor's `concurrency`) one key owner's served calls hold at once; None: all but a
    # quarter of them (6 of 8), so that another owner's call always finds one free (owner_share)
    owner_slots: int | None = None  # MERMAIDFLOW_SERVE_OWNER_SLOTS
    sessions_per_owner: int = 16  # MERMAIDFLOW_MCP_SESSIONS_PER_OWNER: MCP sessions one owner keeps open
    sessions: int = 1000  # MERMAIDFLOW_MCP_SESSIONS: ... and the whole server (~40 KB each)
    session_idle: int = 600  # MERMAIDFLOW_MCP_SESSION_IDLE_SECONDS: an MCP session unused this long is closed

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Limits:
        """The limits with the settings set in ``env`` (os.environ); ValueError naming a bad one."""
        env = dict(os.environ) if env is None else env
        values = {}
        for f in fields(cls):
            var = ENV[f.name]
            raw = (env.get(var) or "").strip()
            if not raw:
                continue
            if not raw.isdigit() or int(raw) < 1:
                raise ValueError(f"{var} must be a whole number of at least 1, got {raw!r}")
            values[f.name] = int(raw)
        return cls(**values)


ENV = {"max_nodes": "MERMAIDFLOW_SERVE_MAX_NODES", "max_edges": "MERMAIDFLOW_SERVE_MAX_EDGES",
       "evals_per_owner": "MERMAIDFLOW_MCP_EVALS_PER_OWNER", "evals": "MERMAIDFLOW_MCP_EVALS",
       "runs_per_owner": "MERMAIDFLOW_MCP_RUNS_PER_OWNER", "runs": "MERMAIDFLOW_MCP_RUNS",
       "publish_per_hour": "MERMAIDFLOW_MCP_PUBLISH_PER_HOUR", "publish_chars": "MERMAIDFLOW_MCP_PUBLISH_MAX_CHARS",
       "owner_slots": "MERMAIDFLOW_SERVE_OWNER_SLOTS", "sessions_per_owner": "MERMAIDFLOW_MCP_SESSIONS_PER_OWNER",
       "sessions": "MERMAIDFLOW_MCP_SESSIONS", "session_idle": "MERMAIDFLOW_MCP_SESSION_IDLE_SECONDS"}


def owner_share(concurrency: int, owner_slots: int | None) -> int:
    """The LLM slots one owner may hold of ``concurrency``: the setting (at most all of them), else all but a
    quarter (at least one is left for the others whenever there are two)."""
    if owner_slots is not None:
        return max(1, min(owner_slots, concurrency))
    return max(1, concurrency - max(1, concurrency // 4))


def quick_bound(text: str) -> tuple[int, int]:
    """(nodes, edges) that Mermaid's reader builds from ``text`` at most. A statement ``G0 --> G1 ... --> Gr`` of
    groups ``a & b & ...`` with ``a`` ampersands names at most ``a + r + 1`` vertices and makes at most
    ``r + 2a + a*a/4`` edges; summed over the statements (at most one a line or per ``;``), with every ``&`` and
    every substring a link holds counted, labels and all."""
    code = text.replace("\r\n", "\n").replace("\r", "\n")  # Mermaid reads a lone CR as a line's end too
    if "%%" in code:
        code = _COMMENT.sub("", code)
    amps = code.count("&")
    links = sum(code.count(s) for s in _LINKS)
    statements = code.count("\n") + code.count(";") + 1
    return amps + links + statements, links + 2 * amps + amps * amps // 4


def too_big(nodes: int, edges: int, limits: Limits, *, exact: bool) -> str | None:
    """The refusal for a workflow of ``nodes`` nodes and ``edges`` edges (``exact``: counted by the reader, else
    the quick bound), or None when it is within the limits."""
    if nodes <= limits.max_nodes and edges <= limits.max_edges:
        return None
    how = "has" if exact else "may have (by a quick count of its text) up to"
    return (f"the workflow {how} {nodes:,} nodes and {edges:,} edges; at most {limits.max_nodes:,} nodes and "
            f"{limits.max_edges:,} edges are accepted (MERMAIDFLOW_SERVE_MAX_NODES, MERMAIDFLOW_SERVE_MAX_EDGES)")


def screen(text: str, limits: Limits) -> tuple[str | None, bool]:
    """(refusal, need_count): a refusal when the quick bound is over the limits by more than SLACK; else whether
    the text must be parsed and counted (its bound is over the limits) before it is checked or run."""
    nodes, edges = quick_bound(text)
    if nodes > SLACK * limits.max_nodes or edges > SLACK * limits.max_edges:
        return too_big(nodes, edges, limits, exact=False), False
    return None, nodes > limits.max_nodes or edges > limits.max_edges
