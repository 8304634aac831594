"""The operators and the per-problem executor, in one self-contained module (the standard library alone;
the ``openai`` client is used when it is installed, else a plain urllib call to the same endpoint).

The runtime (``flowcore.execution.runtime``) and every compiled workflow (``flowcore.execution.compiler`` pastes this file into
the exported module) run this same code, so for the same LLM replies they give the same answers and make the
same calls. Keep it free of ``flowcore`` imports. Top-level names must not clash with ``flowcore.execution.sandbox``,
which is pasted next to it (the compiler checks).
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import contextlib
import contextvars
import json
import math
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CODE_TIMEOUT = 10.0  # seconds per sandbox run (Programmer, Test)
PROGRAMMER_TRIES = 3
TEST_FIX_LOOPS = 3
GEN_TEMPERATURE = 0.7  # generators: diverse candidates for ensembles
JUDGE_TEMPERATURE = 0.0  # selection, fixing, formatting: the most likely answer
TRACE_CHARS = 400


# -- values flowing along edges ------------------------------------------------------------------------------

@dataclass
class Value:
    """What a node emits. ``kind`` is the port type (Problem, EntryPoint, Text, Code); a TestOp's output also
    carries its verdict ``{"passed": bool, "details": str}``."""

    text: str
    kind: str = "Text"
    verdict: dict | None = None


class _Skipped:
    """The output of a node on a Decision branch that was not taken."""

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED = _Skipped()


@dataclass
class Route:
    """A Decision's outcome: the label taken (Passed/Failed; None when the Decision itself was skipped)
    and the tested solution that travels along that route."""

    taken: str | None
    solution: Value | None = None
    details: str = ""

    def takes(self, label: str) -> bool:
        return self.taken is not None and self.taken.lower() == label.strip().lower()


class Unanswerable(ValueError):
    """The workflow itself left a node nothing to work with (no solution reached an ensemble): its answer to
    this problem is wrong, never an error of the engine or the endpoint."""


# Sandbox runs get threads of their own: a cancelled problem's runs never queue everyone else's work (grading,
# name lookups) behind them in asyncio's default pool, and are killed when their problem is cancelled.
_SANDBOX_THREADS = concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="sandbox-run")


async def _in_sandbox(sandbox: Any, program: str, **kw: Any) -> Any:
    cancel = threading.Event()

    def run() -> Any:
        scope = getattr(sandbox, "cancel_on", None)  # flowcore's sandbox; a caller's own may have none
        with scope(cancel) if scope else contextlib.nullcontext():
            return sandbox.run_untrusted(program, **kw)

    ctx = contextvars.copy_context()  # the problem's clock (flowcore.execution.waits) goes with it
    try:
        return await asyncio.get_running_loop().run_in_executor(_SANDBOX_THREADS, ctx.run, run)
    except asyncio.CancelledError:
        cancel.set()
        raise


class NodeError(RuntimeError):
    """A node failed; the message names the node and its operator. ``by_workflow``: the workflow's own doing
    (its wiring or routing gave the node nothing to work with), so the problem is answered wrong; any other
    failure inside an operator is the engine's (a bug) and leaves the problem errored."""

    def __init__(self, node: str, op: str, cause: BaseException | str) -> None:
        self.node, self.op = node, op
        self.by_workflow = isinstance(cause, (str, Unanswerable))
        why = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
        super().__init__(f"node {node} ({op}) failed: {why}")


# -- text helpers --------------------------------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The program in a reply: the longest fenced Python block (preferring blocks that define entry_point),
    an unclosed trailing fence, or the whole text."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    blocks = [b for lang, b in blocks if lang in ("", "python", "py", "python3")] or [b for _, b in blocks]
    if not blocks:
        m = re.search(r"```[ \t]*(?:python3?|py)?[^\n]*\n(.*)$", text, re.DOTALL)
        return (m.group(1) if m else text).strip("\n")
    if entry_point:
        defining = [b for b in blocks if re.search(rf"def\s+{re.escape(entry_point)}\s*\(", b)]
        blocks = defining or blocks
    best = max(range(len(blocks)), key=lambda k: (len(blocks[k].strip()), k))
    return blocks[best].strip("\n")


def has_program(text: str) -> str | None:
    """A Programmer's reply check: None when it holds a program (a fenced block or a def), else why not."""
    if _FENCE.search(text) or re.search(r"^\s*def\s+\w+\s*\(", text, re.MULTILINE):
        return None
    return "no program (no ```python block and no def) in the reply"


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (braces balanced at any depth). Linear: the braces are paired once
    (a reply of 3,000 unclosed ``\\boxed{`` took seconds of the event loop when each was scanned on)."""
    starts = [m.end() for m in re.finditer(r"\\boxed\s*\{", text)]
    if not starts:
        return None
    closes: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            closes[stack.pop()] = i
    for end in reversed(starts):
        j = closes.get(end - 1)
        if j is not None:
            return text[end:j].strip()
    return None


def guess_entry_point(problem: str) -> str:
    """The function a code problem asks for: the last ``def`` of a stub, else the first call in an assert."""
    defs = re.findall(r"^\s*def\s+([A-Za-z_]\w*)\s*\(", problem, re.MULTILINE)
    if defs:
        return defs[-1]
    m = re.search(r"^\s*assert\s+(?:not\s+)?(?:\w+\s*\(\s*)*?([A-Za-z_]\w*)\s*\(", problem, re.MULTILINE)
    builtins = {"set", "sorted", "list", "tuple", "abs", "round", "len", "str", "int", "float", "isclose"}
    if m and m.group(1) not in builtins:
        return m.group(1)
    return ""


def is_literal(src: str) -> bool:
    """Whether ``src`` is a Python literal (what a doctest's expected line must be to become an assert)."""
    try:
        ast.literal_eval(src)
        return True
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def examples_from_problem(problem: str, entry_point: str) -> str:
    """The public examples written in a problem statement, as assert lines: ``assert ...`` lines as they are,
    and ``>>> f(x)`` doctest lines whose next line is a literal result. Never the hidden benchmark tests."""
    out: list[str] = []
    lines = problem.splitlines()
    for i, raw in enumerate(lines):
        line = raw.strip()
        if line.startswith("assert ") and (not entry_point or entry_point + "(" in line):
            out.append(line)
        elif line.startswith(">>>") and entry_point and entry_point + "(" in line and i + 1 < len(lines):
            call, result = line[3:].strip(), lines[i + 1].strip()
            if result and not result.startswith(">>>") and is_literal(result):
                try:
                    ast.parse(call, mode="eval")
                except SyntaxError:
                    continue
                out.append(f"assert {call} == {result}")
    return "\n".join(dict.fromkeys(out))


def program_for(problem: str, code: str, entry_point: str) -> str:
    """The code to test: a HumanEval-style stub (imports, helpers) goes first when the problem is Python that
    declares the entry point, so the candidate sees the same names the benchmark gives it."""
    if entry_point and re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", problem, re.MULTILINE):
        try:
            ast.parse(problem)
        except SyntaxError:
            return code
        if re.search(r"^(def|class|import|from|async\s+def)\s", code, re.MULTILINE):
            return f"{problem.rstrip()}\n\n\n{code}\n"
        return f"{problem}{code}\n"
    return code


def _norm(text: str) -> str:
    return " ".join(text.split())


def _letters(n: int) -> list[str]:
    return [chr(65 + i) if i < 26 else f"Z{i - 25}" for i in range(n)]


_CHOICE = (
    # "Answer: b" / "**Answer:** (Solution B)": after a colon any case is a label
    re.compile(r"(?i:answer)\s*\**\s*[:：]\s*\**\s*\(?\s*(?i:solution\s+)?([A-Za-z]\d*)\b"),
    # "the answer is B": without a colon only a capital letter counts (not "the answer is a ...")
    re.compile(r"(?i:answer\s+is)\s*\**\s*\(?\s*(?i:solution\s+)?([A-Z]\d*)\b"),
)


def parse_choice(reply: str, labels: Sequence[str]) -> int | None:
    """Index of the solution a reply picks: the last 'Answer: X', else a lone label on the last lines."""
    allowed = {lab: i for i, lab in enumerate(labels)}
    hits = sorted((m.start(), m.group(1).upper()) for rx in _CHOICE for m in rx.finditer(reply))
    for _, hit in reversed(hits):
        if hit in allowed:
            return allowed[hit]
    for line in reversed([ln for ln in reply.strip().splitlines() if ln.strip()][-3:]):
        tokens = [t for t in re.findall(r"\b([A-Z]\d*)\b", line) if t in allowed]
        if tokens:
            return allowed[tokens[-1]]
    return None


def majority(texts: Sequence[str]) -> int:
    """Index of the first member of the largest group of identical answers (the first on a tie)."""
    keys = [_norm(t) for t in texts]
    counts = {k: keys.count(k) for k in keys}
    best = max(counts.values())
    return next(i for i, k in enumerate(keys) if counts[k] == best)


def _section(title: str, text: str) -> str:
    return f"{title}:\n{text.strip()}\n\n" if text.strip() else ""


def _inputs_block(values: Sequence[Value]) -> str:
    if len(values) == 1:
        v = values[0]
        return _section("Problem" if v.kind == "Problem" else "Input", v.text)
    parts, k = [], 0
    for v in values:
        if v.kind == "Problem":
            parts.append(_section("Problem", v.text))
        else:
            k += 1
            parts.append(_section(f"Input {k}", v.text))
    return "".join(parts)


def _failure_text(res: Any) -> str:
    """A sandbox failure for the LLM: the error, then the end of stderr."""
    tail = res.stderr.strip()[-1500:] if (res.stderr or "").strip() else ""
    return (res.error or "failed") + (f"\n{tail}" if tail else "")


def _fence(code: str) -> str:
    return f"```python\n{code.strip()}\n```"


# -- the per-node context ------------------------------------------------------------------------------------

class Ports(dict):
    """Port name -> the values that reached it (skipped ones removed)."""

    def all(self, port: str) -> list[Value]:
        return list(self.get(port, []))

    def one(self, port: str) -> Value | None:
        vals = self.all(port)
        if not vals:
            return None
        if len(vals) == 1:
            return vals[0]
        kind = "Code" if all(v.kind == "Code" for v in vals) else "Text"
        return Value("\n\n".join(v.text for v in vals), kind)

    def text(self, port: str) -> str:
        v = self.one(port)
        return v.text if v is not None else ""


@dataclass
class NodeContext:
    """What an operator sees: its node's prompt and label note, context handed over by a Decision route, and
    the run (problem, entry point, public tests, LLM, sandbox). Counts its own calls and cost."""

    run: Run
    node: str
    op: str
    prompt: str = ""
    note: str = ""
    context: str = ""
    cost: float = 0.0
    calls: int = 0

    async def ask(self, prompt: str, *, temperature: float = JUDGE_TEMPERATURE,
                  accept: Callable[[str], str | None] | None = None) -> str:
        kw = {"accept": accept} if accept is not None else {}  # only a usable reply is cached
        reply = await self.run.llm.chat([{"role": "user", "content": prompt}], role="executor",
                                        temperature=temperature, cache_salt=self.node, **kw)
        cost = float(getattr(reply, "cost", 0.0) or 0.0)
        self.cost += cost
        self.calls += 1
        self.run.cost += cost
        self.run.calls += 1
        return reply.text or ""

    async def run_program(self, program: str) -> Any:
        return await _in_sandbox(self.run.sandbox, program, call_solve=True, timeout=self.run.code_timeout)

    async def run_tests(self, program: str, tests: str, entry_point: str) -> Any:
        return await _in_sandbox(self.run.sandbox, program, tests=tests, entry_point=entry_point,
                                 timeout=self.run.code_timeout)

    @property
    def extra(self) -> str:
        return _section("Context from an earlier step", self.context)


# -- the operators (DESIGN §3) -------------------------------------------------------------------------------

async def op_custom(ctx: NodeContext, p: Ports) -> Value:
    instruction = ctx.prompt or ctx.note
    head = f"{instruction.strip()}\n\n" if instruction.strip() else ""
    prompt = f"{head}{_inputs_block(p.all('input'))}{ctx.extra}".rstrip()
    text = await ctx.ask(prompt, temperature=GEN_TEMPERATURE)
    return Value(text)


async def op_answer_generate(ctx: NodeContext, p: Ports) -> Value:
    approach = _section("Approach", ctx.note)
    text = await ctx.ask(
        "Think through the problem step by step, then state the final answer.\n\n"
        f"{approach}{_inputs_block(p.all('input'))}{ctx.extra}"
        "Write your reasoning first. End with one line 'Final answer: ...'; for a math result put it in "
        "\\boxed{}.", temperature=GEN_TEMPERATURE)
    return Value(text)


async def op_programmer(ctx: NodeContext, p: Ports) -> Value:
    base = ("Write a Python program that solves the problem below.\n"
            "- Define a function solve() that takes no arguments and returns the final answer.\n"
            "- Use only the Python standard library. Do not read input and do not print.\n"
            "- Reply with the whole program in one ```python block.\n\n"
            f"{_section('Approach', ctx.note)}{_section('Problem', p.text('problem'))}"
            f"{_section('Analysis to build on', p.text('analysis'))}{ctx.extra}")
    code, error = "", ""
    for _ in range(PROGRAMMER_TRIES):
        retry = (f"Your previous program failed.\n{_fence(code)}\nError:\n{error}\n\n"
                 "Fix it and reply with the whole corrected program.") if error else ""
        code = extract_code(await ctx.ask((base + retry).rstrip(), temperature=GEN_TEMPERATURE,
                                          accept=has_program), "solve")
        res = await ctx.run_program(code)
        out = (res.stdout or "").strip()
        if res.ok and out and out != "None":
            last = out.splitlines()[-1].strip()
            answer = f"\nFinal answer: \\boxed{{{last}}}" if last and len(last) <= 100 else ""
            return Value(f"{_fence(code)}\nThe program printed: {out}{answer}")
        if res.ok:
            error = "solve() returned None" if out == "None" else "the program defines no solve() function"
        else:
            error = _failure_text(res)
    return Value(f"{_fence(code)}\nThe program failed: {error.splitlines()[0] if error else 'no output'}")


async def op_sc_ensemble(ctx: NodeContext, p: Ports) -> Value:
    sols = p.all("solutions")
    if not sols:
        raise Unanswerable("no solutions reached the ensemble")
    if len({_norm(s.text) for s in sols}) == 1:
        return sols[0]  # nothing to choose between: no call
    labels = _letters(len(sols))
    listing = "".join(_section(f"Solution {lab}", s.text) for lab, s in zip(labels, sols))
    reply = await ctx.ask(
        "Several candidate solutions to the same problem follow, each labelled with a letter. Decide which "
        "one is most consistent with the others: the final answer that most candidates agree on, reached by "
        "sound reasoning.\n\n"
        f"{_section('Problem', p.text('problem'))}{listing}{ctx.extra}"
        "Think briefly, then finish with one line 'Answer: X' where X is the letter "
        f"({', '.join(labels)}) of the chosen solution.")
    pick = parse_choice(reply, labels)
    return sols[majority([s.text for s in sols]) if pick is None else pick]


async def op_custom_code_generate(ctx: NodeContext, p: Ports) -> Value:
    entry = p.text("entry_point") or ctx.run.entry_point
    instruction = (ctx.prompt or ctx.note).strip() or "Write a correct Python implementation for the problem."
    reply = await ctx.ask(
        f"{instruction}\n\n{_section('Problem', p.text('problem'))}{ctx.extra}"
        f"The function must be named {entry}. Reply with the complete code, including the imports it needs, "
        "in one ```python block.", temperature=GEN_TEMPERATURE)
    return Value(extract_code(reply, entry), "Code")


async def op_test(ctx: NodeContext, p: Ports) -> Value:
    sol = p.one("solution")
    code = sol.text if sol is not None else ""
    entry = p.text("entry_point") or ctx.run.entry_point
    tests = ctx.run.tests()
    stub = ctx.run.problem.text
    details = ""
    for loop in range(TEST_FIX_LOOPS + 1):
        res = await ctx.run_tests(program_for(stub, code, entry), tests, entry)
        if res.ok:
            n = len([t for t in tests.splitlines() if t.strip().startswith("assert")])
            defines = f"the code runs and defines {entry or 'its function'}"
            summary = f"passed {n} public example(s)" if n else f"no public examples given; {defines}"
            return Value(code, "Code", {"passed": True, "details": summary, "fixes": loop})
        details = _failure_text(res)
        if loop == TEST_FIX_LOOPS:
            break
        reply = await ctx.ask(
            "The code below fails some of the examples given in the problem statement.\n\n"
            f"{_section('Problem', p.text('problem'))}Code:\n{_fence(code)}\n\n"
            f"{_section('Examples', tests)}{_section('Failure', details)}{ctx.extra}"
            f"Fix the code. The function must be named {entry}. Reply with the complete corrected code in "
            "one ```python block.")
        fixed = extract_code(reply, entry)
        code = fixed if fixed.strip() else code
    return Value(code, "Code", {"passed": False, "details": details, "fixes": TEST_FIX_LOOPS})


async def op_review(ctx: NodeContext, p: Ports) -> Value:
    text = await ctx.ask(
        "Review the solution below. Check each step and the final answer; point out every mistake concretely "
        "and say how to fix it. If it is correct, say so.\n\n"
        f"{_section('Problem', p.text('problem'))}{_section('Solution', p.text('solution'))}{ctx.extra}"
        "End with one line: 'Verdict: correct' or 'Verdict: incorrect'.")
    return Value(text)


async def op_revise(ctx: NodeContext, p: Ports) -> Value:
    sol = p.one("solution") or Value("")
    entry = ctx.run.entry_point
    if sol.kind == "Code":
        tail = ("Reply with the complete revised code in one ```python block"
                + (f"; keep the function name {entry}." if entry else "."))
    else:
        tail = "Give the complete revised solution and end with its final answer."
    reply = await ctx.ask(
        "Revise the solution using the feedback: keep what is right and fix what is wrong.\n\n"
        f"{_section('Problem', p.text('problem'))}{_section('Solution', sol.text)}"
        f"{_section('Feedback', p.text('feedback'))}{ctx.extra}{tail}", temperature=GEN_TEMPERATURE)
    return Value(extract_code(reply, entry or None), "Code") if sol.kind == "Code" else Value(reply)


async def op_format(ctx: NodeContext, p: Ports) -> Value:
    solution = p.text("solution")
    reply = await ctx.ask(
        "Give only the final answer of the solution below, with no explanation, written as "
        "\\boxed{ANSWER}.\n\n"
        f"{_section('Problem', p.text('problem'))}{_section('Solution', solution)}{ctx.extra}".rstrip())
    boxed = last_boxed(reply)
    if boxed is None and not reply.strip():
        boxed = last_boxed(solution)
    return Value(f"\\boxed{{{boxed}}}" if boxed is not None else reply.strip())


Operator = Callable[[NodeContext, Ports], Awaitable[Value]]

# op name -> (implementation, the port names it reads). Must match flowcore.catalogue (checked on import).
OPERATORS: dict[str, tuple[Operator, tuple[str, ...]]] = {
    "CustomOp": (op_custom, ("input",)),
    "AnswerGenerateOp": (op_answer_generate, ("input",)),
    "ProgrammerOp": (op_programmer, ("problem", "analysis")),
    "ScEnsembleOp": (op_sc_ensemble, ("solutions", "problem")),
    "CustomCodeGenerateOp": (op_custom_code_generate, ("problem", "entry_point")),
    "TestOp": (op_test, ("solution", "problem", "entry_point")),
    "ReviewOp": (op_review, ("solution", "problem")),
    "ReviseOp": (op_revise, ("solution", "feedback", "problem")),
    "FormatOp": (op_format, ("solution", "problem")),
}
NOTE_OPS = frozenset({"CustomOp", "AnswerGenerateOp", "ProgrammerOp", "CustomCodeGenerateOp"})


# -- one execution of a workflow on one problem --------------------------------------------------------------

class Run:
    """Executes nodes for one problem. Both the runtime and compiled modules call ``node`` / ``decide`` /
    ``finish`` with the same arguments in a dependency order, so both behave identically.

    llm: anything with ``async chat(messages, *, role, temperature, cache_salt) -> reply(.text, .cost)``.
    sandbox: anything with ``run_untrusted(code, *, call_solve=, tests=, entry_point=, timeout=)`` (flowcore's
    sandbox module) returning results with ``ok, stdout, stderr, error``; it raises when it cannot confine.
    required: op name -> its required port names (from the catalogue); a node whose required port receives
    only skipped values is skipped.
    passthrough: exception types raised as they are (e.g. a budget stop) instead of wrapped in NodeError.
    """

    def __init__(self, llm: Any, problem: str, entry_point: str | None = None, *, sandbox: Any,
                 required: Mapping[str, Sequence[str]], public_tests: str = "",
                 passthrough: tuple[type[BaseException], ...] = (),
                 code_timeout: float = CODE_TIMEOUT) -> None:
        self.llm, self.sandbox = llm, sandbox
        self.required = {k: tuple(v) for k, v in required.items()}
        self.passthrough = passthrough
        self.code_timeout = code_timeout
        self.problem = Value(str(problem), "Problem")
        self.entry_point = (entry_point or "").strip() or guess_entry_point(self.problem.text)
        self.entry = Value(self.entry_point, "EntryPoint")
        self._public_tests = public_tests
        self.cost = 0.0
        self.calls = 0
        self.trace: list[dict] = []

    def tests(self) -> str:
        """The public examples a TestOp may run: those given with the problem, else those in its text."""
        return self._public_tests or examples_from_problem(self.problem.text, self.entry_point)

    # -- skipping ----------------------------------------------------------------------------------------
    def _skip_reason(self, op: str, ports: Mapping[str, Sequence[Any]],
                     routes: Sequence[tuple[Route, str]]) -> str | None:
        if routes and not any(r.takes(label) for r, label in routes):
            return "its Decision route was not taken"
        values = [v for vs in ports.values() for v in vs]
        if not any(v is SKIPPED for v in values):
            return None
        upstream = [v for v in values if v is SKIPPED or v.kind not in ("Problem", "EntryPoint")]
        if not routes and all(v is SKIPPED for v in upstream):
            return "everything feeding it was skipped"
        for port in self.required.get(op, ()):
            vs = ports.get(port, [])
            if vs and all(v is SKIPPED for v in vs):
                return f"its '{port}' input was skipped"
        return None

    def _record(self, node: str, op: str, out: Any, *, cost: float = 0.0, calls: int = 0,
                latency: float = 0.0, reason: str | None = None) -> None:
        rec: dict[str, Any] = {"node": node, "op": op, "skipped": reason is not None, "cost": cost,
                               "calls": calls, "latency": round(latency, 4)}
        if reason is not None:
            rec["reason"] = reason
            rec["output"] = ""
        elif isinstance(out, Route):
            rec["output"] = out.taken or ""
            rec["route"] = out.taken
        else:
            text = out.text
            short = text[:TRACE_CHARS] + f"... [{len(text)} chars]"
            rec["output"] = text if len(text) <= TRACE_CHARS else short
            if out.verdict is not None:
                rec["verdict"] = dict(out.verdict)
        self.trace.append(rec)

    # -- the three steps -------------------------------------------------------------------------------
    async def node(self, node: str, op: str, ports: Mapping[str, Sequence[Any]], *, prompt: str = "",
                   note: str = "", routes: Sequence[tuple[Route, str]] = ()) -> Value | _Skipped:
        """Run one operator node. ``ports``: port -> values in edge order; ``routes``: Decision routes
        into it."""
        reason = self._skip_reason(op, ports, routes)
        if reason is not None:
            self._record(node, op, None, reason=reason)
            return SKIPPED
        if op not in OPERATORS:
            raise NodeError(node, op, "no implementation for this operator type")
        context = "\n\n".join(_handover(r, label) for r, label in routes if r.takes(label))
        ctx = NodeContext(self, node, op, prompt=prompt or "", note=note or "", context=context)
        live = Ports({k: [v for v in vs if v is not SKIPPED] for k, vs in ports.items()})
        start = time.perf_counter()
        try:
            out = await OPERATORS[op][0](ctx, live)
        except (NodeError, asyncio.CancelledError):
            raise
        except self.passthrough:
            raise
        except Exception as exc:  # any operator failure is this node's failure
            raise NodeError(node, op, exc) from exc
        self._record(node, op, out, cost=ctx.cost, calls=ctx.calls, latency=time.perf_counter() - start)
        return out

    def decide(self, node: str, ports: Mapping[str, Sequence[Any]]) -> Route:
        """A Decision: route the tested solution along Passed or Failed by its TestOp's verdict."""
        live = [v for v in ports.get("verdict", []) if v is not SKIPPED]
        if not live:
            self._record(node, "Decision", None, reason="everything feeding it was skipped")
            return Route(None)
        v = live[0]
        if v.verdict is None:
            raise NodeError(node, "Decision", "its input carries no verdict (connect it to a TestOp)")
        route = Route("Passed" if v.verdict.get("passed") else "Failed", Value(v.text, v.kind),
                      str(v.verdict.get("details", "")))
        self._record(node, "Decision", route)
        return route

    def finish(self, inputs: Sequence[Any]) -> str:
        """RETURN: the one input that was not skipped (values, or (route, label) pairs for routes)."""
        for item in inputs:
            if isinstance(item, tuple):
                route, label = item
                if route.takes(label) and route.solution is not None:
                    return route.solution.text
            elif item is not SKIPPED:
                return item.text
        raise NodeError("RETURN", "Interface", "no branch reached RETURN (every input was skipped)")


def _handover(route: Route, label: str) -> str:
    sol = route.solution.text if route.solution is not None else ""
    code = _fence(sol) if route.solution is not None and route.solution.kind == "Code" else sol
    status = "did not pass its tests" if route.taken == "Failed" else "passed its tests"
    report = f"\nTest report: {route.details.strip()}" if route.details.strip() else ""
    return f"A previous attempt {status}:\n{code}{report}"


# -- a minimal OpenAI-compatible client for exported workflows ----------------------------------------------

@dataclass
class ChatReply:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost: float
    latency: float
    cached: bool = False
    estimated: bool = False  # the endpoint reported no token counts: they and the cost are estimates


def estimate_tokens(text: str) -> int:
    """A token count the endpoint did not report: ~4 characters a token, rounded up (as flowcore's client)."""
    return -(-len(text) // 4)


def _reported(n: Any, text: str) -> int | None:
    """A token count a reply reports, else None (to be estimated): missing, not a count a call can have, or 0 for a
    text that is there (a server that leaves usage out, or sends zeros, must not make calls free)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 2 ** 31 or (n == 0 and text):
        return None
    return n


def hidden_text(message: Any) -> list[str]:
    """The text a message (or a streamed delta) carries outside ``content``: a reasoning model's thinking
    (``reasoning_content``, ``reasoning``), tool calls' names and arguments. Not the answer, but tokens the model made
    and the server bills: counting ``content`` only charged a reasoning model's reply without usage 0 tokens (flowcore's
    client reads it too)."""
    if message is None:
        return []

    def get(obj: Any, key: str) -> Any:
        return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)

    out = [t for t in (get(message, k) for k in ("reasoning_content", "reasoning")) if isinstance(t, str) and t]
    calls = get(message, "tool_calls")
    for call in calls if isinstance(calls, list) else []:
        fn = get(call, "function")
        out += [t for t in (get(fn, "name"), get(fn, "arguments")) if fn is not None and isinstance(t, str) and t]
    return out


def openai_installed() -> bool:
    try:
        import openai  # noqa: F401
    except ImportError:
        return False
    return True


RETRY_STATUS = (408, 409, 429)  # and every 5xx: worth another try; any other 4xx is final
# An LLM reply (the HTTP body, decompressed) larger than this is refused as it streams in: never read whole, never
# stored. A 50 MB completion was once accepted and cached. MERMAIDFLOW_MAX_REPLY_MB sets it.
MAX_REPLY_MB = 1.0


def max_reply_bytes(env: Mapping[str, str] | None = None) -> int:
    return int(_env_number(os.environ if env is None else env, "MERMAIDFLOW_MAX_REPLY_MB", float, MAX_REPLY_MB,
                           low=0.0) * 1024 * 1024)


_too_large: Any = None


def reply_too_large() -> type:
    """The error of a reply over the cap: an ``openai.OpenAIError``, so that the client neither retries it nor
    wraps it as a connection error (the same server would send the same flood again)."""
    global _too_large
    if _too_large is None:
        import openai

        class ReplyTooLarge(openai.OpenAIError):
            """The endpoint's reply passed the size cap; reading stopped there."""

        _too_large = ReplyTooLarge
    return _too_large


def reply_cap_hooks(limit: int, *, sync: bool = False) -> dict:
    """``event_hooks`` for the openai client's HTTP client: every response body is counted as it is read,
    after decompression (gzip and deflate are decoded here, within the cap; other encodings are refused), and
    reading stops with ``reply_too_large()`` once it passes ``limit`` bytes."""
    import zlib

    try:  # the HTTP library the openai client runs on (openai 3.x: httpx2)
        import httpx2 as httpx
    except ImportError:  # pragma: no cover - older openai releases
        import httpx  # type: ignore[no-redef]
    error = reply_too_large()
    cap = f"{limit / (1024 * 1024):g} MB"

    def refuse(what: str) -> None:
        raise error(f"the endpoint's reply {what} the {cap} cap for an LLM reply (MERMAIDFLOW_MAX_REPLY_MB); it "
                    "was not read further and nothing of it was kept")

    class Counter:
        def __init__(self, encoding: str) -> None:
            self.seen = 0
            self.unzip = zlib.decompressobj(31 if encoding == "gzip" else 15) if encoding else None

        def take(self, chunk: bytes) -> bytes:
            if self.unzip is not None:
                chunk = self.unzip.decompress(chunk, limit + 1 - self.seen)
            self.seen += len(chunk)
            if self.seen > limit:
                refuse("passed")
            return chunk

    def check(response: Any) -> Counter:
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            refuse(f"announced {int(length):,} bytes, over")
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity", "gzip", "deflate"):
            raise error(f"the endpoint's reply is {encoding}-compressed, which was not asked for")
        if encoding in ("gzip", "deflate"):
            del response.headers["content-encoding"]  # decoded here, within the cap; httpx passes it through
        return Counter(encoding if encoding in ("gzip", "deflate") else "")

    class Capped(httpx.AsyncByteStream):
        def __init__(self, inner: Any, counter: Counter) -> None:
            self.inner, self.counter = inner, counter

        async def __aiter__(self):  # type: ignore[override]
            async for chunk in self.inner:
                yield self.counter.take(chunk)

        async def aclose(self) -> None:
            await self.inner.aclose()

    class CappedSync(httpx.SyncByteStream):
        def __init__(self, inner: Any, counter: Counter) -> None:
            self.inner, self.counter = inner, counter

        def __iter__(self):  # type: ignore[override]
            for chunk in self.inner:
                yield self.counter.take(chunk)

        def close(self) -> None:
            self.inner.close()

    async def hook(response: Any) -> None:
        response.stream = Capped(response.stream, check(response))

    def hook_sync(response: Any) -> None:
        response.stream = CappedSync(response.stream, check(response))

    return {"response": [hook_sync if sync else hook]}


def _env_number(env: Mapping[str, str], name: str, kind: type, default: Any, low: float) -> Any:
    """The variable as a number above ``low``; ValueError naming the variable (nan and inf are refused: nan
    passes every comparison, so a nan timeout meant none)."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= low:
        least = "above 0" if low == 0 else f"of at least {low + 1:g}"
        raise ValueError(f"{name}={raw!r} must be a {'whole ' * (kind is int)}number {least}")
    return value


def price_lookup(prices: dict[str, tuple[float, float]], model: str) -> tuple[float, float]:
    """USD per 1M (input, output) tokens of ``model``: its exact name, else the longest known prefix
    (``gpt-4o-mini-2024-07-18``), also without a provider prefix (``openai/gpt-4o``); unknown models cost 0."""
    for name in (model, model.rsplit("/", 1)[-1]):
        if name in prices:
            return prices[name]
        prefixes = [k for k in prices if name.startswith(k)]
        if prefixes:
            return prices[max(prefixes, key=len)]
    return (0.0, 0.0)


@dataclass
class OpenAIChat:
    """The environment an exported workflow reads, the same as flowcore's: OPENAI_BASE_URL, OPENAI_API_KEY,
    MERMAIDFLOW_MODEL_<ROLE> (else OPENAI_MODEL, else gpt-4o-mini), MERMAIDFLOW_TIMEOUT,
    MERMAIDFLOW_MAX_RETRIES, MERMAIDFLOW_CONCURRENCY, MERMAIDFLOW_PRICES (JSON, USD per 1M tokens),
    MERMAIDFLOW_MAX_REPLY_MB (a larger reply is refused as it streams in).

    With the ``openai`` package installed its client makes the calls; without it (plain ``python3``) the same
    OpenAI-compatible request goes through ``urllib``, with the same timeout and retries.
    MERMAIDFLOW_HTTP=urllib chooses urllib even when ``openai`` is there."""

    prices: dict = field(default_factory=dict)
    env: Mapping[str, str] | None = None
    calls: int = 0
    cost: float = 0.0

    def __post_init__(self) -> None:
        env = os.environ if self.env is None else self.env
        self.base_url = (env.get("OPENAI_BASE_URL") or "").strip() or None
        self._key = (env.get("OPENAI_API_KEY") or "").strip() or None
        self._fallback = (env.get("OPENAI_MODEL") or "").strip() or "gpt-4o-mini"
        self._models = {r: (env.get(f"MERMAIDFLOW_MODEL_{r.upper()}") or "").strip() or self._fallback
                        for r in ("optimizer", "judge", "executor")}
        self.timeout = _env_number(env, "MERMAIDFLOW_TIMEOUT", float, 60.0, low=0.0)
        self.max_retries = _env_number(env, "MERMAIDFLOW_MAX_RETRIES", int, 2, low=-1)
        self.concurrency = _env_number(env, "MERMAIDFLOW_CONCURRENCY", int, 8, low=0)
        self.max_reply = max_reply_bytes(env)
        self.prices = {k: tuple(v) for k, v in self.prices.items()}
        if (env.get("MERMAIDFLOW_PRICES") or "").strip():
            try:
                extra = json.loads(env["MERMAIDFLOW_PRICES"])
                self.prices.update({k: tuple(float(x) for x in v) for k, v in extra.items()})
            except (ValueError, TypeError, AttributeError) as exc:
                raise ValueError("MERMAIDFLOW_PRICES must be JSON {model: [input, output]} in USD per 1M tokens "
                                 f"({exc})") from None
        self._per_loop: dict[Any, tuple[Any, asyncio.Semaphore]] = {}
        self.transport = "urllib" if (env.get("MERMAIDFLOW_HTTP") or "").strip().lower() == "urllib" or \
            not openai_installed() else "openai"

    @property
    def configured(self) -> bool:
        return bool(self.base_url or self._key)

    def _price(self, model: str) -> tuple[float, float]:
        return price_lookup(self.prices, model)

    def _client(self) -> tuple[Any, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        pair = self._per_loop.get(loop)
        if pair is None and self.transport == "urllib":
            pair = self._per_loop[loop] = (None, asyncio.Semaphore(self.concurrency))
        if pair is None:
            import openai  # only needed when a call is made

            http = openai.DefaultAsyncHttpxClient(event_hooks=reply_cap_hooks(self.max_reply))
            client = openai.AsyncOpenAI(base_url=self.base_url or "https://api.openai.com/v1",
                                        api_key=self._key or "not-needed", timeout=self.timeout,
                                        max_retries=self.max_retries, http_client=http)
            pair = self._per_loop[loop] = (client, asyncio.Semaphore(self.concurrency))
        return pair

    async def chat(self, messages: list[dict] | str, *, role: str = "executor", temperature: float = 0.0,
                   json_mode: bool = False, max_tokens: int | None = None, cache_salt: str = "",
                   accept: Callable[[str], str | None] | None = None) -> ChatReply:
        if not self.configured:
            raise RuntimeError("no LLM endpoint configured: set OPENAI_BASE_URL and/or OPENAI_API_KEY")
        msgs = [{"role": "user", "content": messages}] if isinstance(messages, str) else messages
        model = self._models.get(role, self._fallback)
        kwargs: dict[str, Any] = {"model": model, "messages": msgs, "temperature": temperature}
        if json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        client, sem = self._client()
        async with sem:
            start = time.perf_counter()
            try:
                if client is None:
                    resp = _as_reply(await asyncio.to_thread(self._post, kwargs))
                else:
                    resp = await client.chat.completions.create(**kwargs)
            except Exception as exc:  # noqa: BLE001 - openai's errors, OSError, ValueError: said without the key
                msg = str(exc).replace(self._key, "***") if self._key else str(exc)
                why = f"{type(exc).__name__}: {msg}"
                raise RuntimeError(f"LLM call failed (model {model!r}): {why}") from None
            latency = time.perf_counter() - start
        choices = getattr(resp, "choices", None)
        message = getattr(choices[0], "message", None) if isinstance(choices, list) and choices else None
        text = getattr(message, "content", None)
        # what the model made is billed, the answer or not: its reasoning and tool calls too, and a reply without
        # content (charged $0 before, even when its usage said 500 tokens)
        made = (text if isinstance(text, str) else "") + "".join(hidden_text(message))
        usage = getattr(resp, "usage", None)
        prompt = "\n".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
        pt = _reported(getattr(usage, "prompt_tokens", None), prompt)
        ct = _reported(getattr(usage, "completion_tokens", None), made)
        estimated = pt is None or ct is None
        pt = estimate_tokens(prompt) if pt is None else pt
        ct = min(estimate_tokens(made), max_tokens or 2**31) if ct is None else ct  # no reply passes max_tokens
        pin, pout = self._price(model)
        cost = (pt * pin + ct * pout) / 1_000_000
        self.calls += 1
        self.cost += cost
        text = text if isinstance(text, str) else None  # (a number or a list in content is no text either)
        if text is None:
            raise RuntimeError(f"LLM call failed (model {model!r}): the reply has no message content "
                               f"(it was charged ${cost:.6f})")
        return ChatReply(text, model, pt, ct, cost, latency, estimated=estimated)

    def _post(self, body: dict) -> dict:
        """POST /chat/completions with urllib (no ``openai`` installed): retries on timeouts, connection
        errors, 408/409/429 and 5xx, with exponential backoff; OSError naming the last failure."""
        import urllib.error
        import urllib.request

        url = (self.base_url or "https://api.openai.com/v1").rstrip("/") + "/chat/completions"
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self._key or 'not-needed'}"}
        failure = "no attempt made"
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)))
            req = urllib.request.Request(url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    raw = r.read(self.max_reply + 1)  # no Accept-Encoding is sent: these bytes are the reply
                if len(raw) > self.max_reply:
                    raise ValueError(f"the reply from {url} passed the {self.max_reply / 2**20:g} MB cap for an LLM "
                                     "reply (MERMAIDFLOW_MAX_REPLY_MB); it was refused unread")
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:300].decode("utf-8", "replace").strip()
                failure = f"HTTP {exc.code} from {url}: {detail}"
                if exc.code in RETRY_STATUS or exc.code >= 500:
                    continue
                break
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                failure = f"cannot reach {url}: {getattr(exc, 'reason', exc)}"
                continue
            try:
                reply = json.loads(raw.decode("utf-8"))
            except ValueError:
                raise ValueError(f"the reply from {url} is not JSON: {raw[:200]!r}") from None
            if not isinstance(reply, dict):
                raise TypeError(f"the reply from {url} is not a JSON object")
            return reply
        raise OSError(failure)


def _as_reply(d: dict) -> Any:
    """An OpenAI-style reply object (``.choices[0].message.content``, ``.usage``) from its JSON."""
    from types import SimpleNamespace as NS

    choices = [NS(message=c["message"] if isinstance(c.get("message"), dict) else {})
               for c in d.get("choices") or [] if isinstance(c, dict)]
    for c in choices:  # the message as sent (hidden_text reads its reasoning and tool calls), its content an attribute
        c.message = NS(content=c.message.get("content"), **{k: c.message.get(k) for k in
                                                            ("reasoning_content", "reasoning", "tool_calls")})
    u = d.get("usage") if isinstance(d.get("usage"), dict) else {}
    return NS(choices=choices, usage=NS(prompt_tokens=u.get("prompt_tokens"),  # None: not reported, estimated
                                        completion_tokens=u.get("completion_tokens")))
