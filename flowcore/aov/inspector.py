"""The global inspector: after each result, passed or failed with a reason.

``RuleInspector`` needs no LLM: it fails an empty output, an error marker (a line starting with ERROR or
FAILED, ``ERROR:``/``FAILED:`` anywhere, a Python traceback) or a missing ``expect`` keyword.
``LLMInspector`` asks the judge model for ``{"passed": bool, "reason": str}`` and falls back to the rules
when the model cannot be reached or answers something unreadable. The rules' failures stand whatever the
model says (a weak model passes everything), and a verdict that only echoes the prompt's template
(``"reason": "one short sentence"``) is no verdict.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from flowcore.aov.model import AOVGraph, Subtask

_MARKERS = re.compile(r"(?m)^\s*(ERROR|FAILED)\b|\b(ERROR|FAILED):|Traceback \(most recent call last\)")


@dataclass
class Verdict:
    passed: bool
    reason: str
    source: str = "rules"  # rules | llm | agent (it raised) | inspector (it raised)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "reason": self.reason, "source": self.source}


class Inspector(Protocol):
    async def inspect(self, graph: AOVGraph, subtask: Subtask, output: str) -> Verdict: ...


def rule_verdict(subtask: Subtask, output: str) -> Verdict:
    if not output or not output.strip():
        return Verdict(False, "empty output")
    m = _MARKERS.search(output)
    if m:
        line = output[m.start():].strip().splitlines()[0][:120]
        return Verdict(False, f"error marker in output: {line}")
    low = output.lower()
    missing = [k for k in subtask.expect if k.lower() not in low]
    if missing:
        return Verdict(False, "missing expected keyword(s): " + ", ".join(repr(k) for k in missing))
    return Verdict(True, "no error marker" + ("; expected keywords present" if subtask.expect else ""))


class RuleInspector:
    async def inspect(self, graph: AOVGraph, subtask: Subtask, output: str) -> Verdict:
        return rule_verdict(subtask, output)


JUDGE_PROMPT = """You are the global inspector of a multi-agent workflow.
Overall goal: {goal}
Subtask {sid} (agent {agent}) had to do: {req}
{expect}
Its output:
<<<
{output}
>>>
Does the output fulfil the subtask so that later subtasks can build on it? Answer with JSON only:
{{"passed": true or false, "reason": "one short sentence"}}"""


TEMPLATE_REASONS = {"one short sentence", "one short sentence.", "true or false", "reason", "..."}


def echoes_template(doc: dict) -> bool:
    return str(doc.get("reason") or "").strip().lower() in TEMPLATE_REASONS


def parse_verdict(text: str) -> Verdict | None:
    """Read the judge's JSON verdict leniently (code fences, prose around the object)."""
    m = re.search(r"\{.*\}", text, re.DOTALL)
    if not m:
        return None
    try:
        doc = json.loads(m.group(0))
    except json.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("passed"), bool) or echoes_template(doc):
        return None
    return Verdict(doc["passed"], str(doc.get("reason") or ("passed" if doc["passed"] else "failed")), "llm")


class LLMInspector:
    def __init__(self, llm: Any, temperature: float = 0.0) -> None:
        self.llm = llm
        self.temperature = temperature

    async def inspect(self, graph: AOVGraph, subtask: Subtask, output: str) -> Verdict:
        if not output or not output.strip():
            return Verdict(False, "empty output")  # nothing to ask about
        rules = rule_verdict(subtask, output)
        if not rules.passed:
            return rules  # an error marker or a missing keyword fails whatever a model would say
        expect = ("It must mention: " + ", ".join(subtask.expect)) if subtask.expect else ""
        prompt = JUDGE_PROMPT.format(goal=graph.goal, sid=subtask.id, agent=subtask.agent,
                                     req=subtask.subtask_requirement, expect=expect, output=output[:6000])
        try:
            reply = await self.llm.chat(prompt, role="judge", temperature=self.temperature, json_mode=True,
                                        accept=lambda t: None if parse_verdict(t) else "no usable verdict")
        except Exception as e:  # noqa: BLE001 - LLMError, NotConfigured: fall back to the rules
            v = rule_verdict(subtask, output)
            return Verdict(v.passed, f"{v.reason} (judge unavailable: {e})", "rules")
        verdict = parse_verdict(reply.text)
        if verdict is None:
            why = "echoed the template" if "one short sentence" in reply.text.lower() else "reply unreadable"
            return Verdict(rules.passed, f"{rules.reason} (judge {why}: no verdict)", "rules")
        return verdict
