"""LLM-proposed candidates (MermaidFlow §4.2, A.3): the optimizer model sees the parent graph(s) with their
prompts and scores, what was tried from them before, a few failed problems and operator guidance generated
from the catalogue, and answers with a Mermaid workflow. An invalid proposal goes back with the checker's
exact diagnostics, up to ``max_repairs`` times; one still invalid after that is dropped with the reason.
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import dataclass, field

from flowcore import catalogue as cat
from flowcore.checker.check import check
from flowcore.evolution import ops
from flowcore.evolution import prompts as lib
from flowcore.evolution.judge import format_experience
from flowcore.mermaid.reader import parse, to_mermaid
from flowcore.model import Diagnostic, Workflow

_FENCE = re.compile(r"```[ \t]*(mermaid)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_HEADER = re.compile(r"^\s*(flowchart|graph)\b", re.MULTILINE)


@dataclass
class Proposal:
    workflow: Workflow | None  # None when dropped
    text: str  # the last Mermaid text proposed ("" if none was found)
    rationale: str
    attempts: int
    diagnostics: list[Diagnostic] = field(default_factory=list)  # errors of the last attempt
    reason: str | None = None  # why it was dropped
    cost: float = 0.0


def extract_mermaid(reply: str) -> str | None:
    """The workflow in a reply: a ```mermaid fence, else any fence holding a flowchart, else a bare one."""
    fences = _FENCE.findall(reply or "")
    for lang, body in fences:
        if lang:
            return body.strip() + "\n"
    for _, body in fences:
        if _HEADER.search(body):
            return body.strip() + "\n"
    m = _HEADER.search(reply or "")
    return reply[m.start():].strip() + "\n" if m else None


def rationale_of(reply: str) -> str:
    head = (reply or "").split("```", 1)[0].strip()
    return re.sub(r"\s+", " ", head)[:400]


def _ports(spec_inputs: tuple[cat.Port, ...]) -> str:
    parts = []
    for p in spec_inputs:
        flags = "*" if p.default else ""
        extra = " (required)" if p.required and not p.default else ""
        extra += f" (at least {p.min_inputs})" if p.min_inputs > 1 else ""
        parts.append(f"{p.name}{flags}: {'/'.join(p.types)}{extra}")
    return ", ".join(parts) or "none"


def guidance(task: str) -> str:
    """Operator guidance for the optimizer, generated from the catalogue (types, ports, task limits)."""
    lines = [f"Operators for {task} workflows (type: inputs -> output; * marks the default port):"]
    for name in cat.operators_for(task):
        s = cat.CATALOGUE[name]
        out = s.output if isinstance(s.output, str) else "/".join(s.output) or "routes"
        out = {cat.SAME_AS_SOLUTIONS: "same type as its solutions",
               cat.SAME_AS_SOLUTION: "same type as its solution"}.get(out, out)
        prompt = " Its prompt is named in the label: (role: name)." if s.uses_prompt else ""
        lines.append(f"- {name} ({ops.short(name)}): {_ports(s.inputs)} -> {out}. {s.description}{prompt}")
    banned = [n for n in cat.CATALOGUE if n not in cat.operators_for(task) and n != cat.INTERFACE]
    ifaces = [f"{nid} ({'emits ' + '/'.join(outs) if outs else 'takes ' + _ports(ins)})"
              for nid, (ins, outs, tasks) in cat.INTERFACE_NODES.items() if task in tasks]
    lines += [
        f"Interfaces (class Interface): {', '.join(ifaces)}.",
        "Rules:",
        '- Declare each node once, e.g. C1["Custom<br/>(role: solver)"], and type it: `class C1 CustomOp`, '
        "`class PROBLEM,RETURN Interface`.",
        "- An edge label names the target's input port (PROBLEM -->|input| C1); an unlabelled edge feeds the "
        "default port.",
        "- A Code is also a Text; a Problem is not a Text.",
        "- Every node lies on a path from PROBLEM to RETURN; no cycles; RETURN takes exactly one edge (except "
        "the exclusive Passed/Failed routes of one Decision).",
        "- ScEnsemble needs at least two solutions. Define every prompt a node names: `%% @prompt name: text`.",
    ]
    if banned:
        lines.append(f"- Not allowed in {task} workflows: {', '.join(banned)}.")
    if task == "code":
        lines.append('- A Decision D1{"Decision"} takes a Test\'s verdict (T1 -->|verdict| D1) and routes the '
                     "tested solution with D1 -->|Passed| X and D1 -->|Failed| Y.")
    return "\n".join(lines)


def _parents_block(parents: list[tuple[Workflow, float | None]]) -> str:
    blocks = []
    for i, (w, score) in enumerate(parents):
        s = "not evaluated" if score is None else f"{100 * score:.1f}%"
        blocks.append(f"Parent {i + 1} (validation score {s}):\n```mermaid\n{to_mermaid(w)}```")
    return "\n\n".join(blocks)


def _failures_block(failures: list[dict]) -> str:
    out = []
    for f in failures:
        q = str(f.get("question", ""))[:800]
        p = str(f.get("prediction", ""))[:400]
        out.append(f"- Question: {q}\n  Wrong answer given: {p}")
    return "\n".join(out) or "- none recorded"


def _diag_lines(diags: list[Diagnostic]) -> str:
    return "\n".join(f"- {d}" for d in diags)


class Optimizer:
    def __init__(self, llm: object, task: str, *, max_repairs: int = 3, hard: bool = True):
        self.llm, self.task, self.max_repairs, self.hard = llm, task, max_repairs, hard

    def validate(self, text: str) -> list[Diagnostic]:
        return [d for d in check(text, self.task, hard=self.hard) if d.severity == "error"]

    async def propose(self, parents: list[tuple[Workflow, float | None]], *,
                      experience: list[dict] | None = None, failures: list[dict] | None = None, salt: str = "",
                      temperature: float = 0.7) -> Proposal:
        system = lib.OPTIMIZER_SYSTEM.format(task=self.task, guidance=guidance(self.task))
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": lib.OPTIMIZER_USER.format(
                parents=_parents_block(parents), experience=format_experience(experience or []),
                failures=_failures_block(failures or []))},
        ]
        from flowcore.llm.client import ContextOverflow, Refused

        cost, text, rationale, errors = 0.0, "", "", []
        task = messages[:2]  # a repair turn carries only the latest reply and its diagnostics (bounded context)
        for attempt in range(1, self.max_repairs + 2):
            try:
                reply = await self.llm.chat(  # type: ignore[attr-defined]
                    messages, role="optimizer", temperature=temperature, cache_salt=f"{salt}:{attempt}")
            except ContextOverflow as exc:  # too long for this model: an invalid proposal, never a lost round
                return Proposal(None, text, rationale, attempt, errors, f"the prompt does not fit the optimizer "
                                f"model's context ({exc})", cost)
            except Refused as exc:  # the optimizer model refused this prompt: an invalid proposal as well
                return Proposal(None, text, rationale, attempt, errors, str(exc), cost)
            cost += reply.cost
            if attempt == 1:
                rationale = rationale_of(reply.text)
            found = extract_mermaid(reply.text)
            if found is None:
                errors = [Diagnostic("M001", "error",
                                     "no ```mermaid block with a flowchart was found in the reply")]
            else:
                text = found
                errors = self.validate(found)
                if not errors:
                    return Proposal(parse(found), found, rationale, attempt, [], None, cost)
            if attempt <= self.max_repairs:
                repair = lib.OPTIMIZER_REPAIR.format(diagnostics=_diag_lines(errors))
                messages = [*task, {"role": "assistant", "content": reply.text},
                            {"role": "user", "content": repair}]
        listed = "; ".join(str(d) for d in errors[:3])
        reason = f"still invalid after {self.max_repairs} repair(s): {listed}" if errors else \
            "no valid proposal"
        return Proposal(None, text, rationale, self.max_repairs + 1, errors, reason, cost)

    async def propose_many(self, parents: list[tuple[Workflow, float | None]], k: int,
                           **kw: object) -> list[Proposal]:
        """K independent proposals (separate conversations, run concurrently)."""
        salt = str(kw.pop("salt", ""))
        jobs = (self.propose(parents, salt=f"{salt}#{i}", **kw) for i in range(k))  # type: ignore[arg-type]
        results = await asyncio.gather(*jobs, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors and len(errors) == len(results):
            raise errors[0]  # nothing came back: the round fails with the endpoint's error
        away = [r for r in errors if getattr(r, "transient", False)]
        if away:  # the endpoint failed some of them: fewer candidates would change the round, so retry it
            raise away[0]
        return [r if isinstance(r, Proposal) else Proposal(None, "", "", 0, [], f"{type(r).__name__}: {r}")
                for r in results]


_MERMAID_LINE = re.compile(r"^\s*(flowchart|graph)\s|-->|==>|-\.->|%%\s*@prompt|^\s*class(Def)?\s+\w", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{[A-Za-z_]\w*\}")


def instruction_problem(reply: str, current: str) -> str | None:
    """Why a rewritten instruction cannot be used (None when it can): it must be plain instruction text of a
    sane length that keeps the placeholders and the answer format the current one asks for. A weak model
    answers with a whole workflow, a code block, or a line of word soup; none of these is stored."""
    text = (reply or "").strip().strip('"').strip()
    if not text:
        return "the reply is empty"
    if "```" in text or _MERMAID_LINE.search(text):
        return "it is a workflow or a code block, not instruction text"
    words = text.split()
    if len(text) < 20 or len(words) < 4:
        return f"too short ({len(words)} word(s))"
    limit = max(1200, 4 * len(current or ""))
    if len(text) > limit:
        return f"too long ({len(text)} characters, at most {limit})"
    letters = sum(ch.isalpha() or ch.isspace() for ch in text) / len(text)
    if letters < 0.7:
        return "mostly symbols, not prose"
    top = max(words.count(w) for w in set(words))
    if len(words) >= 8 and top / len(words) > 0.3:
        return "the same word over and over"
    lost = sorted(set(_PLACEHOLDER.findall(current or "")) - set(_PLACEHOLDER.findall(text)))
    if lost:
        return f"it drops the placeholder(s) {', '.join(lost)}"
    low, cur = text.lower(), (current or "").lower()
    for marker, name in (("\\boxed", "\\boxed{} answer format"), ("final answer:", "'Final answer:' line")):
        if marker in cur and marker not in low:
            return f"it drops the {name} the node's output is read by"
    return None


async def rewrite_prompt(llm: object, workflow: Workflow, task: str, rng: random.Random, *,
                         salt: str = "") -> ops.Child:
    """The online prompt operator: the optimizer LLM rewrites one node's instruction."""
    nodes = [n for n in workflow.nodes.values() if n.op in cat.CATALOGUE and cat.CATALOGUE[n.op].uses_prompt]
    if not nodes:
        raise ops.Declined("prompt: no node has a prompt to rewrite")
    node = rng.choice(nodes)
    current = workflow.prompts.get(node.prompt or "", "(none)")
    reply = await llm.chat(lib.PROMPT_REWRITE.format(  # type: ignore[attr-defined]
        task=task, node=node.id, op=node.op, current=current, workflow=to_mermaid(workflow)),
        role="optimizer", temperature=0.7, cache_salt=salt)
    why = instruction_problem(reply.text, current)
    if why is not None:
        raise ops.Declined(f"prompt: the optimizer's rewrite of {node.id} was declined: {why}")
    new = " ".join(reply.text.split()).strip().strip('"')
    if new == current:
        raise ops.Declined(f"prompt: the optimizer gave no new instruction for {node.id}")
    w = ops.clone(workflow)
    users = [n for n in w.nodes.values() if n.prompt and n.prompt == node.prompt]
    if node.prompt and len(users) == 1:
        w.prompts[node.prompt] = new
        name = node.prompt
    else:
        name = ops.add_prompt(w, node.prompt or lib.NAMES[ops.prompt_kind(w, node.id, task)], new)
        ops.set_prompt(w.nodes[node.id], name)
    return ops.finish(workflow, w, task, "prompt",
                      f"{node.id} prompt '{name}' rewritten by the optimizer: {new[:60]}")
