"""Judges: score candidate workflows on coherence, innovation, complexity balance, prompt quality and
rationale (0-10 each, MermaidFlow's LLM_AS_JUDGE criteria) and pick the highest total.

``RuleJudge`` is a deterministic function of the graphs (used offline and as the fallback);
``LLMJudge`` asks the judge model for the five scores and falls back to the rules on a malformed reply.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from flowcore import catalogue as cat
from flowcore.checker.check import check
from flowcore.evolution import prompts as lib
from flowcore.evolution.ops import SAMPLERS
from flowcore.evolution.search import edit_kind, rationale
from flowcore.mermaid.reader import to_mermaid
from flowcore.model import Workflow

CRITERIA = ("coherence", "innovation", "complexity_balance", "prompt_quality", "rationale")
SIZE_BAND = {"math": (2, 8), "code": (2, 9), "text": (2, 8)}  # non-interface nodes that are "enough but not too much"
KEYWORDS = {"math": ("\\boxed", "step", "answer", "check", "verify", "final"),
            "code": ("function", "name", "edge", "test", "import", "example"),
            "text": ("answer", "step", "form", "check", "only", "task")}


@dataclass
class Candidate:
    workflow: Workflow
    operator: str  # ops operator name, or "optimizer" for LLM proposals
    detail: str
    parents: list[int] = field(default_factory=list)  # round numbers
    source: str = "operator"  # operator | optimizer
    rationale: str = ""
    attempts: int = 1

    @property
    def text(self) -> str:
        return to_mermaid(self.workflow)


@dataclass
class Verdict:
    scores: list[dict[str, float]]  # per candidate: the five criteria and "total"
    chosen: int
    judge: str  # "rule" | "llm" | "rule (fallback: ...)"


def _clamp(x: float) -> float:
    return round(max(0.0, min(10.0, x)), 2)


def signature(w: Workflow) -> Counter:
    """A structural fingerprint: node types, typed edges and prompt texts, as a multiset."""
    sig: Counter = Counter()
    for n in w.nodes.values():
        sig[("node", n.id if n.is_interface else n.op)] += 1
        if n.prompt:
            sig[("prompt", w.prompts.get(n.prompt, ""))] += 1
    for e in w.edges:
        a, b = w.nodes[e.src], w.nodes[e.dst]
        kinds = (a.id if a.is_interface else a.op, b.id if b.is_interface else b.op)
        sig[("edge", *kinds, (e.label or "").lower())] += 1
    return sig


def distance(a: Counter, b: Counter) -> int:
    return sum(((a - b) + (b - a)).values())


class RuleJudge:
    name = "rule"

    def __init__(self, task: str):
        self.task = task

    def score(self, candidates: list[Candidate], parent: Workflow, *, history: Iterable[Workflow] = (),
              operator_record: dict[str, list[float]] | None = None) -> Verdict:
        if not candidates:
            raise ValueError("the judge needs at least one candidate")
        psig = signature(parent)
        hsigs = [signature(h) for h in history]
        scores = []
        for c in candidates:
            s = {"coherence": self.coherence(c.workflow),
                 "innovation": self.innovation(signature(c.workflow), psig, hsigs),
                 "complexity_balance": self.complexity(c.workflow),
                 "prompt_quality": self.prompt_quality(c.workflow),
                 "rationale": self.rationale(c.operator, operator_record or {})}
            s["total"] = round(sum(s[k] for k in CRITERIA), 2)
            scores.append(s)
        return Verdict(scores, pick(scores), self.name)

    async def ascore(self, candidates: list[Candidate], parent: Workflow, **kw: object) -> Verdict:
        kw = {k: v for k, v in kw.items() if k in ("history", "operator_record")}
        return self.score(candidates, parent, **kw)  # type: ignore[arg-type]

    samples_differ = False  # whether parallel copies of a generator count as independent samples

    def coherence(self, w: Workflow) -> float:
        diags = check(w, self.task)
        errors = sum(d.severity == "error" for d in diags)
        x = 10.0 - 5 * errors - 1.5 * (len(diags) - errors)
        # identical parallel nodes (same type, prompt and inputs) add cost but no information
        seen: Counter = Counter()
        for n in w.nodes.values():
            if self.samples_differ and n.op in SAMPLERS:
                continue  # a generator samples at temperature > 0: its copies are what self-consistency votes on
            if not n.is_interface:
                ins = tuple(sorted((e.src, e.label or "") for e in w.in_edges(n.id)))
                seen[(n.op, w.prompts.get(n.prompt or "", n.prompt), ins)] += 1
        x -= sum(v - 1 for v in seen.values())
        return _clamp(x)

    @staticmethod
    def innovation(sig: Counter, parent: Counter, history: list[Counter]) -> float:
        d_parent = distance(sig, parent)
        d_hist = min((distance(sig, h) for h in history), default=d_parent)
        if d_parent == 0 or d_hist == 0:
            return 0.0  # nothing new: the parent, or a workflow already tried
        return _clamp(10 * (0.6 * min(1.0, d_parent / 6) + 0.4 * min(1.0, d_hist / 6)))

    def complexity(self, w: Workflow) -> float:
        n = sum(1 for x in w.nodes.values() if not x.is_interface)
        lo, hi = SIZE_BAND.get(self.task, (2, 8))
        if n < lo:
            return _clamp(10 - 3 * (lo - n))
        return _clamp(10 - 1.5 * max(0, n - hi))

    def prompt_quality(self, w: Workflow) -> float:
        users = [n for n in w.nodes.values() if n.op in cat.CATALOGUE and cat.CATALOGUE[n.op].uses_prompt]
        if not users:
            return 6.0
        total = 0.0
        for n in users:
            text = w.prompts.get(n.prompt or "")
            if not text:
                continue
            hits = sum(k.lower() in text.lower() for k in KEYWORDS.get(self.task, ()))
            total += 4 + 3 * (40 <= len(text) <= 400) + 3 * min(1.0, hits / 2)
        return _clamp(total / len(users))

    @staticmethod
    def rationale(operator: str, record: dict[str, list[float]]) -> float:
        deltas = record.get(operator) or []
        if not deltas:
            return 5.0
        signs = [(d > 0) - (d < 0) for d in deltas]
        return _clamp(5 + 5 * sum(signs) / len(signs))


class GuidedJudge(RuleJudge):
    """The rule judge of the guided search (flowcore.evolution.search): each candidate is compared with its own
    first parent, its *rationale* is what edits of its kind did in this run's history buffer (untried kinds
    first), and parallel samples of one generator are not duplicates."""

    samples_differ = True

    def score(self, candidates: list[Candidate], parent: Workflow, *, history: Iterable[Workflow] = (),
              operator_record: dict[str, list[float]] | None = None,
              kind_record: dict[str, list[float]] | None = None,
              parents: dict[int, Workflow] | None = None) -> Verdict:
        if not candidates:
            raise ValueError("the judge needs at least one candidate")
        hsigs = [signature(h) for h in history]
        scores = []
        for c in candidates:
            own = (parents or {}).get(c.parents[0]) if c.parents else None
            s = {"coherence": self.coherence(c.workflow),
                 "innovation": self.innovation(signature(c.workflow), signature(own or parent), hsigs),
                 "complexity_balance": self.complexity(c.workflow),
                 "prompt_quality": self.prompt_quality(c.workflow),
                 "rationale": rationale(edit_kind(c.operator, c.detail), kind_record or {})}
            s["total"] = round(sum(s[k] for k in CRITERIA), 2)
            scores.append(s)
        return Verdict(scores, pick(scores), self.name)


def pick(scores: list[dict[str, float]]) -> int:
    """The highest total; ties go to the earlier candidate (deterministic)."""
    return max(range(len(scores)), key=lambda i: (scores[i]["total"], -i))


class LLMJudge:
    name = "llm"

    def __init__(self, llm: object, task: str):
        self.llm, self.task = llm, task
        self.fallback = RuleJudge(task)

    async def ascore(self, candidates: list[Candidate], parent: Workflow, *, parent_score: float | None = None,
                     experience: list[dict] | None = None, history: Iterable[Workflow] = (),
                     operator_record: dict[str, list[float]] | None = None, cache_salt: str = "") -> Verdict:
        history = list(history)
        blocks = "\n\n".join(f"Candidate {i} ({c.operator}: {c.detail}):\n```mermaid\n{c.text}```"
                             for i, c in enumerate(candidates))
        exp = format_experience(experience or [])
        messages = [
            {"role": "system", "content": lib.JUDGE_SYSTEM.format(task=self.task)},
            {"role": "user", "content": lib.JUDGE_USER.format(
                score="not evaluated" if parent_score is None else f"{100 * parent_score:.1f}%",
                parent=to_mermaid(parent), experience=exp, candidates=blocks)},
        ]
        from flowcore.llm.client import LLMError

        try:
            reply = await self.llm.chat(messages, role="judge", json_mode=True,  # type: ignore[attr-defined]
                                        cache_salt=cache_salt, accept=self._accept(len(candidates)))
            scores = parse_scores(reply.text, len(candidates))
            return Verdict(scores, pick(scores), self.name)
        except ValueError as exc:  # a reply that is not the five scores per candidate
            reason = str(exc)
        except LLMError as exc:  # the call itself failed: judging by the rules beats losing the round
            if exc.transient:
                raise  # ... unless the endpoint is away for a while: the round is tried again after a back-off
            reason = str(exc)
        verdict = self.fallback.score(candidates, parent, history=history, operator_record=operator_record)
        verdict.judge = f"rule (fallback: {reason})"
        return verdict

    @staticmethod
    def _accept(n: int):  # noqa: ANN205 - the LLM's reply check: only a usable verdict is cached
        def check(text: str) -> str | None:
            try:
                parse_scores(text, n)
            except ValueError as exc:
                return str(exc)
            return None

        return check


def format_experience(experience: list[dict]) -> str:
    lines = []
    for e in experience:
        effect = "no score" if e.get("delta") is None else f"{100 * e['delta']:+.1f} points"
        if e.get("status") == "failed":
            effect = f"failed ({e.get('reason') or 'no reason'})"
        lines.append(f"- round {e['round']}: {e['operator']} ({e.get('detail') or ''}): {effect}")
    return "\n".join(lines) or "- nothing yet"


def parse_scores(text: str, n: int) -> list[dict[str, float]]:
    """The five scores per candidate from the judge's JSON; ValueError says what is wrong."""
    if re.search(r'"coherence"\s*:\s*n\b', text or ""):
        raise ValueError("the judge echoed the template (no verdict)")
    m = re.search(r"\{.*\}", text or "", re.DOTALL)
    try:
        data = json.loads(m.group(0) if m else text)
    except (ValueError, TypeError):
        raise ValueError("the judge's reply is not JSON") from None
    items = data.get("scores") if isinstance(data, dict) else data
    if not isinstance(items, list) or len(items) != n:
        raise ValueError(f"the judge scored {len(items) if isinstance(items, list) else 'no'} candidates, "
                         f"expected {n}")
    out: list[dict[str, float] | None] = [None] * n
    for pos, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"score entry {pos} is not an object")
        idx = item.get("candidate", pos)
        if not isinstance(idx, int) or not 0 <= idx < n or out[idx] is not None:
            raise ValueError(f"score entry {pos} names candidate {idx!r}")
        s = {}
        for k in CRITERIA:
            v = item.get(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 10:
                raise ValueError(f"candidate {idx}: '{k}' must be a number from 0 to 10 (got {v!r})")
            s[k] = float(v)
        s["total"] = round(sum(s[k] for k in CRITERIA), 2)
        out[idx] = s
    return out  # type: ignore[return-value]
