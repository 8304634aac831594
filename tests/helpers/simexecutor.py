"""A simulated executor: an OpenAI-compatible server on 127.0.0.1 (fakellm's machinery) on which the value of
a workflow's structure is known from theory, so the search itself can be measured (issue 31).

It behaves as a model of accuracy ``p`` would:

- every answer to a benchmark problem is a *sample*, right with probability ``p``, drawn independently for each
  distinct call and for each repeat of an identical call (a model at temperature > 0), yet deterministic given
  the seed: the k-th time the same request arrives gets the k-th draw of that request's own stream (so requests
  made one after another repeat exactly; which of two identical *concurrent* requests, e.g. two samples of one
  prompt, gets which draw is up to their arrival order, as nothing a model sees tells them apart);
- wrong answers scatter (a math answer is the reference moved by ±1..±``spread``; broken code raises, each with
  its own attempt number), so a wrong majority is rare;
- asked by ScEnsemble to pick among lettered solutions it votes for the answer most of them share (a tie is a
  draw among the tied answers, keyed on the answers and not their order);
- Review judges the solution correctly with probability ``p``; Revise and a Custom fed by earlier answers keep
  the answer they were given when it is judged right (probability ``p`` of judging right) and otherwise draw a
  new sample; Format copies the answer; a Test's fix request and a Programmer's retry are new samples;
- for code a sample is the canonical solution or a broken one; a share ``overfit`` of the broken ones return
  the expected outputs of the problem's public examples (so a Test passes them) and fail everything else;
- a task of your own of kind ``text`` (flowcore.tasks.task) is answered as its prompts ask, ending with a line
  ``Answer: ...``: the row's reference, or a made-up word that neither holds the reference nor is held by it (so it
  is wrong under exact, contains and f1 alike), scattered over thousands of such words. A task of kind math is
  answered as a benchmark's math problem.

Theory then orders the structures: one sample is right with p; k samples voted are right when the right answer
is the plurality (≈ P(Binomial(k, p) ≥ 2) at this scatter: 0.97 for k = 5, p = 0.7), a 2-sample vote no better
than one; Review + Revise gives p² + 2p²(1−p) (0.78 at 0.7); Test with fix retries almost always ends on code
that passes the public examples. See ``expected`` for the closed forms the yardstick test checks against.

It recognises which problem a prompt is about by the problem text the prompt contains (the longest one that
occurs; for a task, the row's problem as its template renders it), and uses nothing else of the benchmark or
task than the reference it needs to be right with probability p.
A prompt with no known problem gets an answer without a number (a generator) or keeps its input (a refiner).

    with simulated_server(problems, p=0.7, seed=1) as srv:  # a FakeLLMServer; srv.sim has the counters
        ...
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.helpers.fakellm import FakeLLMServer, message_text

# What each operator's request starts with or contains (flowcore/execution/_standalone_ops.py writes them).
ENSEMBLE = "Several candidate solutions to the same problem follow"
REVIEW = "Review the solution below."
REVISE = "Revise the solution using the feedback"
FORMAT = "Give only the final answer of the solution below"
TEST_FIX = "The code below fails some of the examples"
PROGRAMMER = "Write a Python program that solves the problem below."
CODEGEN = "Reply with the complete code, including the imports it needs"
OPTIMIZER = "workflow optimizer of MermaidFlow"
JUDGE = "judge of MermaidFlow"
PLAN_ONLY = ("do not solve", "do not write code")  # the prompt library's planners: no answer of their own

_BOXED = re.compile(r"\\boxed\{([^{}]+)\}")
# A text answer's last line, as the text prompts ask for it ("Answer: ...", also "Final answer:", "**Answer:**").
_STATED = re.compile(r"\\boxed\{([^{}]+)\}|^[ \t*]*(?:final\s+)?answer[ \t*]*:[ \t*]*(.+?)[ \t*]*$",
                     re.IGNORECASE | re.MULTILINE)
_PLACEHOLDERS = {"answer", "...", "x", "…"}
_SYLLABLES = ("ka", "lo", "mi", "ren", "tu", "vas", "pe", "dor", "zi", "shu", "ben", "ola", "qui", "fa", "nes", "gy")
_SOLUTION = re.compile(r"^Solution ([A-Z]\d*):\n(.*?)(?=^Solution [A-Z]\d*:\n|\Z)", re.MULTILINE | re.DOTALL)
_ATTEMPT = re.compile(r"attempt (\d+): misread")
CANONICAL = "canonical"  # the token of the canonical solution among code candidates


def _norm(text: str) -> str:
    return " ".join(text.split())


@dataclass
class _Problem:
    id: str
    question: str
    reference: str
    code: bool
    entry_point: str = ""
    canonical: str = ""  # the whole solution
    body: str = ""  # what of it the problem statement does not already hold
    examples: dict[str, Any] = field(default_factory=dict)  # repr(args) -> expected, from the public tests
    text: bool = False  # a task of kind text: answered with an "Answer: ..." line, wrong answers are made-up words


class SimulatedExecutor:
    """The responder (``FakeLLMServer(SimulatedExecutor(...))``). ``calls`` counts requests by kind."""

    def __init__(self, problems: Iterable[Any], p: float, *, seed: int = 0, spread: int = 40,
                 overfit: float = 0.2, meta: Callable[[dict, str], str | None] | None = None) -> None:
        if not 0 <= p <= 1:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.p, self.seed, self.spread, self.overfit, self.meta = p, seed, spread, overfit, meta
        self.problems: list[_Problem] = []
        for pr in problems:
            code = bool(getattr(pr, "entry_point", None)) and pr.benchmark in ("humaneval", "mbpp")
            text = getattr(getattr(pr, "metric", None), "kind", None) == "text"
            sim = _Problem(pr.id, pr.question.strip(), str(pr.reference), code, pr.entry_point or "", text=text)
            if code:
                sim.canonical = (pr.question + pr.reference) if pr.benchmark == "humaneval" else pr.reference
                sim.body = pr.reference
                sim.examples = _examples(pr.public_tests or "", sim.entry_point)
            self.problems.append(sim)
        self.problems.sort(key=lambda x: -len(x.question))  # the longest question that occurs wins
        self._first_line = {}
        for sim in self.problems:
            self._first_line.setdefault(sim.question.splitlines()[0].strip(), []).append(sim)
        self._asked: Counter = Counter()
        self._broken: dict[int, str] = {}  # attempt number -> the broken code it sent
        self._lock = threading.Lock()
        self.calls: Counter = Counter()
        self.unknown = 0  # requests about no known problem

    # -- the request --------------------------------------------------------------------------------------
    def __call__(self, request: dict) -> str:
        text = message_text(request)
        if self.meta is not None and (OPTIMIZER in text or JUDGE in text):
            reply = self.meta(request, text)
            if reply is not None:
                self._count("meta")
                return reply
        prob = self.problem_of(text)
        if prob is None:
            with self._lock:
                self.unknown += 1
        if ENSEMBLE in text:
            return self._ensemble(text, prob)
        if text.startswith(REVIEW):
            return self._review(text, prob)
        if text.startswith(REVISE):
            return self._revise(text, prob)
        if text.startswith(FORMAT):
            return self._format(text, prob)
        if text.startswith(TEST_FIX):
            self._count("test_fix")
            return self._answer(prob, self._rng(text), "code")
        if text.startswith(PROGRAMMER):
            self._count("programmer")
            return self._answer(prob, self._rng(text), "program")
        if CODEGEN in text:
            self._count("generate")
            return self._answer(prob, self._rng(text), "code")
        return self._generic(text, prob)

    def problem_of(self, text: str) -> _Problem | None:
        """The problem whose text the prompt contains (its first line looked up first, then every problem)."""
        for line in text.splitlines():
            for sim in self._first_line.get(line.strip(), ()):
                if sim.question in text:
                    return sim
        return next((sim for sim in self.problems if sim.question in text), None)

    def _count(self, kind: str) -> None:
        with self._lock:
            self.calls[kind] += 1

    def _rng(self, key: str) -> random.Random:
        """The next draw of this request's own stream: the k-th identical request gets the k-th draw."""
        digest = hashlib.sha256(key.encode()).hexdigest()
        with self._lock:
            k = self._asked[digest]
            self._asked[digest] += 1
        return random.Random(f"{self.seed}:{digest}:{k}")

    # -- samples ------------------------------------------------------------------------------------------
    def _answer(self, prob: _Problem | None, rng: random.Random, form: str) -> str:
        """A fresh sample: right with probability p. ``form``: text (math reasoning), program or code."""
        if prob is None:
            return "I cannot tell which problem this is about; please state the problem."
        right = rng.random() < self.p
        if prob.code:
            return f"```python\n{self._code(prob, right, rng)}\n```"
        if prob.text:
            value = prob.reference if right else self._wrong_text(prob, rng)
            return f"Reading the task closely, the answer follows from what it asks.\nAnswer: {value}"
        value = prob.reference if right else self._wrong(prob, rng)
        if form == "program":
            return f"```python\ndef solve():\n    return {json.dumps(value)}\n```"
        return ("Working through the problem step by step, the given quantities combine into the result.\n"
                f"The final answer is \\boxed{{{value}}}.")

    def _wrong(self, prob: _Problem, rng: random.Random) -> str:
        offset = rng.choice([d for d in range(-self.spread, self.spread + 1) if d])
        try:
            ref = float(prob.reference)
        except ValueError:
            return f"{prob.reference}+{offset}"
        value = ref + offset
        return str(int(value)) if value == int(value) and "." not in prob.reference else f"{value:g}"

    def _wrong_text(self, prob: _Problem, rng: random.Random) -> str:
        """A made-up word (16³ of them): neither holds the reference nor is held by it, whatever the metric."""
        ref = _fold(prob.reference)
        for _ in range(50):
            word = "".join(rng.choice(_SYLLABLES) for _ in range(3)).capitalize()
            if ref not in _fold(word) and _fold(word) not in ref:
                return word
        return f"#{rng.randrange(10**9)}"

    def _code(self, prob: _Problem, right: bool, rng: random.Random) -> str:
        if right:
            return prob.canonical.strip("\n")
        attempt = rng.randrange(10**9)
        name = prob.entry_point or "solution"
        if prob.examples and rng.random() < self.overfit:  # passes the public examples, nothing else
            table = ", ".join(f"{k!r}: {v!r}" for k, v in prob.examples.items())
            code = (f"_SEEN = {{{table}}}\n\n\ndef {name}(*args):\n    # attempt {attempt}\n"
                    f"    if repr(args) in _SEEN:\n        return _SEEN[repr(args)]\n"
                    f"    raise ValueError('attempt {attempt}: misread the problem')")
        else:
            code = f"def {name}(*args, **kwargs):\n    raise ValueError('attempt {attempt}: misread the problem')"
        with self._lock:
            self._broken[attempt] = code  # its own output, to hand back when a refiner keeps it
        return code

    def _correct(self, prob: _Problem, answer: str) -> bool:
        if prob.code:
            return answer == CANONICAL
        if prob.text:
            return _fold(answer) == _fold(prob.reference)
        try:
            return abs(float(answer) - float(prob.reference)) <= 1e-6
        except ValueError:
            return answer.strip() == prob.reference.strip()

    def _candidates(self, text: str, prob: _Problem) -> list[str]:
        """The answers earlier nodes handed to this call, in the order they appear: math answers (\\boxed{}
        outside the problem statement); for code CANONICAL for each copy of the canonical solution and
        'attempt N' for each broken one."""
        if prob.text:
            return _stated(text.replace(prob.question, " "))
        if not prob.code:
            rest = text.replace(prob.question, " ")
            return [m.strip() for m in _BOXED.findall(rest) if m.strip() and m.strip() != "ANSWER"]
        flat = _norm(text)
        body = _norm(prob.body)
        found = [(m.start(), CANONICAL) for m in re.finditer(re.escape(body), flat)] if body else []
        found += [(m.start(), f"attempt {m.group(1)}") for m in _ATTEMPT.finditer(flat)]
        return [tok for _, tok in sorted(dict.fromkeys(found))]

    def _judged_right(self, prob: _Problem, answer: str, rng: random.Random) -> bool:
        """Whether the model (right with probability p) judges ``answer`` correct."""
        truth = self._correct(prob, answer)
        return truth if rng.random() < self.p else not truth

    def _keep(self, prob: _Problem, answer: str) -> str:
        if prob.code:
            if answer == CANONICAL:
                return f"```python\n{prob.canonical.strip(chr(10))}\n```"
            code = self._broken.get(int(answer.split()[1]), "def broken():\n    raise ValueError('lost')")
            return f"```python\n{code}\n```"
        if prob.text:
            return f"Checking the answer against the task, it stands.\nAnswer: {answer}"
        return f"Checking the solution, its result stands.\nThe final answer is \\boxed{{{answer}}}."

    # -- operators ----------------------------------------------------------------------------------------
    def _vote_key(self, body: str, prob: _Problem | None) -> str:
        """What a solution answers: its last \\boxed{} (math) or which code it is (code)."""
        if prob is not None and prob.code:
            toks = self._candidates(body, prob)
            return toks[0] if toks else _norm(body)
        if prob is not None and prob.text:
            stated = _stated(body)
            return _fold(stated[-1]) if stated else ""
        boxed = [b for b in _BOXED.findall(body) if b.strip()]
        return _norm(boxed[-1]) if boxed else ""

    def _ensemble(self, text: str, prob: _Problem | None) -> str:
        self._count("ensemble")
        listing = text.split(ENSEMBLE, 1)[1].split("Think briefly, then finish", 1)[0]
        keys = [(label, self._vote_key(body, prob)) for label, body in _SOLUTION.findall(listing)]
        counts = Counter(k for _, k in keys if k)
        if not counts:
            return "None of the solutions states an answer.\nAnswer: A"
        top = max(counts.values())
        tied = sorted(k for k, c in counts.items() if c == top)
        rng = self._rng("ensemble:" + json.dumps(sorted(k for _, k in keys)))  # not the order they were listed in
        chosen = tied[0] if len(tied) == 1 else rng.choice(tied)
        label = next(lab for lab, k in keys if k == chosen)
        return f"Most of the solutions agree on the same result; solution {label} reaches it soundly.\nAnswer: {label}"

    def _base(self, text: str, prob: _Problem | None, section: str | None = None) -> str | None:
        """The answer a refiner starts from: the plurality among the answers it was given (the first on a tie)."""
        if prob is None:
            return None
        part = "\n".join(_sections(text, (section,))) if section else text
        cands = self._candidates(part or text, prob)
        if not cands:
            return None
        counts = Counter(cands)
        top = max(counts.values())
        return next(c for c in cands if counts[c] == top)

    def _review(self, text: str, prob: _Problem | None) -> str:
        self._count("review")
        base = self._base(text, prob, "Solution")
        if prob is None or base is None:
            return "I cannot check this solution against the problem.\nVerdict: correct"
        if self._judged_right(prob, base, self._rng(text)):
            return "Each step follows from the previous one and the result answers the question.\nVerdict: correct"
        return "One step misreads the problem, so the result is off; redo that step.\nVerdict: incorrect"

    def _revise(self, text: str, prob: _Problem | None) -> str:
        self._count("revise")
        base = self._base(text, prob, "Solution")
        if prob is None or base is None:
            sol = _sections(text, ("Solution",))
            return sol[0] if sol else "There is no solution to revise."
        feedback = "\n".join(_sections(text, ("Feedback",))).lower()
        if "verdict: incorrect" in feedback:
            return self._answer(prob, self._rng(text), "text")
        return self._keep(prob, base)

    def _format(self, text: str, prob: _Problem | None) -> str:
        self._count("format")
        sol = "\n".join(_sections(text, ("Solution",))) or text
        boxed = _stated(sol) if prob is not None and prob.text else [b for b in _BOXED.findall(sol) if b.strip()]
        return f"\\boxed{{{boxed[-1]}}}" if boxed else "The solution states no final answer."

    def _generic(self, text: str, prob: _Problem | None) -> str:
        """Custom / AnswerGenerate: a fresh sample, or (fed earlier answers) keep the plurality answer when it
        is judged right and draw a new sample otherwise."""
        head = text.split("\n\n", 1)[0].lower()
        if any(k in head for k in PLAN_ONLY):
            self._count("plan")
            return "Plan: 1. Name the quantities given. 2. Relate them as the question asks. 3. Combine them."
        rng = self._rng(text)
        if prob is None:  # no problem to solve: keep an answer it was handed, if any
            self._count("generate")
            given = [m for m in _BOXED.findall(text) if m.strip() and m.strip() != "ANSWER"]
            if given:
                return f"Keeping the answer given.\nThe final answer is \\boxed{{{given[-1]}}}."
            return self._answer(None, rng, "text")
        base = self._base(text, prob)
        if base is None:
            self._count("generate")
            return self._answer(prob, rng, "text")
        self._count("refine")
        if self._judged_right(prob, base, rng):
            return self._keep(prob, base)
        return self._answer(prob, rng, "text")

    # -- theory ---------------------------------------------------------------------------------------------
    def expected(self, structure: str, k: int = 5) -> float:
        """Closed-form accuracy of a structure on this server (math, scatter ignored): 'io', 'vote' (k samples),
        'review_revise'."""
        p = self.p
        if structure == "io":
            return p
        if structure == "review_revise":
            return p * p + 2 * p * p * (1 - p)
        if structure == "vote":  # the right answer wins with >= 2 votes (wrong ones scatter), or 1 vote in a tie
            from math import comb

            two = sum(comb(k, j) * p**j * (1 - p) ** (k - j) for j in range(2, k + 1))
            one = k * p * (1 - p) ** (k - 1) / k
            return two + one
        raise ValueError(f"unknown structure '{structure}'")


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def _stated(text: str) -> list[str]:
    """The answers a text states, in order: each \\boxed{} and each "Answer: ..." line (placeholders such as
    a prompt's "Answer: ..." left out)."""
    found = [(m.group(1) or m.group(2) or "").strip() for m in _STATED.finditer(text)]
    return [a for a in found if a and a.casefold().strip("'\"") not in _PLACEHOLDERS]


def _sections(text: str, titles: tuple[str, ...]) -> list[str]:
    """The bodies of ``Title:\\n...`` sections (as _standalone_ops writes them), in order."""
    out = []
    pattern = re.compile(r"^(" + "|".join(re.escape(t) for t in titles) + r"):\n(.*?)(?=\n\n[A-Z][\w ]*:\n|\n\n[A-Z][^\n]*$|\Z)",
                         re.MULTILINE | re.DOTALL)
    for m in pattern.finditer(text):
        out.append(m.group(2))
    return out


def _examples(tests: str, entry: str) -> dict[str, Any]:
    """``assert entry(literal args) == literal`` lines of the public tests, as repr(args) -> expected."""
    out: dict[str, Any] = {}
    for line in tests.splitlines():
        try:
            node = ast.parse(line.strip()).body[0]
        except (SyntaxError, IndexError):
            continue
        if not isinstance(node, ast.Assert) or not isinstance(node.test, ast.Compare):
            continue
        cmp = node.test
        call = cmp.left
        if (len(cmp.ops) != 1 or not isinstance(cmp.ops[0], ast.Eq) or not isinstance(call, ast.Call)
                or not isinstance(call.func, ast.Name) or call.func.id != entry or call.keywords):
            continue
        try:
            args = tuple(ast.literal_eval(a) for a in call.args)
            expected = ast.literal_eval(cmp.comparators[0])
            ast.literal_eval(repr(expected))  # it can be written back into the broken code
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        out[repr(args)] = expected
    return out


def simulated_server(problems: Iterable[Any], p: float, *, seed: int = 0, **kw: Any) -> FakeLLMServer:
    """A FakeLLMServer answering as ``SimulatedExecutor`` (``with`` starts it); ``server.sim`` is the responder."""
    sim = SimulatedExecutor(problems, p, seed=seed, **kw)
    server = FakeLLMServer(sim)
    server.sim = sim  # type: ignore[attr-defined]
    return server


# -- the LLM optimizer path on the same yardstick ---------------------------------------------------------------

KNOWN_EDITS = ("cot_sc", "review_revise", "prompt")  # what the scripted optimizer proposes, in turn
_PARENT = re.compile(r"Parent 1 \(validation score [^)]*\):\n```mermaid\n(.*?)```", re.DOTALL)
_CANDIDATE = re.compile(r"^Candidate (\d+) \([^\n]*\n```mermaid\n(.*?)```", re.DOTALL | re.MULTILINE)


def scripted_optimizer(task: str) -> Callable[[dict, str], str | None]:
    """A ``meta`` responder for SimulatedExecutor: the optimizer proposes one of a few known edits of its first
    parent, in turn (a 5-sample CoT-SC ensemble, review + revise, a prompt rewrite), written as the optimizer's
    reply is (a sentence, then the workflow in a ```mermaid block); the judge scores each candidate by how many
    independent samples it votes over, as a judge that knows self-consistency would. Both go through the real
    optimizer and judge code (parsing, checking, repair, JSON scores)."""
    import random as _random

    from flowcore.evolution import ops
    from flowcore.mermaid.reader import parse

    turn = [0]
    lock = threading.Lock()

    def edit(parent_text: str, kind: str) -> tuple[str, str]:
        w = parse(parent_text)
        if kind == "cot_sc":
            for seed in range(50):  # the macro picks k at random: the seed that gives five samples
                child = ops.apply("ensemble", [w], task, _random.Random(seed))
                if isinstance(child, ops.Child) and child.detail.startswith("5-sample"):
                    return "Sample the solver five times and let an ensemble vote (CoT-SC).", child.text
        op = "review_revise" if kind == "review_revise" else "prompt"
        child = ops.apply(op, [w], task, _random.Random(1))
        if isinstance(child, ops.Child):
            return f"Apply {op} to the answer.", child.text
        return "Keep the workflow.", parent_text

    def samples(text: str) -> int:
        w = parse(text)
        return sum(1 for n in w.nodes.values() if n.op in ops.SAMPLERS)

    def respond(request: dict, text: str) -> str | None:
        if OPTIMIZER in text and "Parent 1" in text:
            m = _PARENT.search(text)
            if m is None:
                return None
            with lock:
                kind = KNOWN_EDITS[turn[0] % len(KNOWN_EDITS)]
                turn[0] += 1
            why, proposal = edit(m.group(1), kind)
            return f"{why}\n```mermaid\n{proposal}```"
        if JUDGE in text:
            cands = [(int(i), samples(body)) for i, body in _CANDIDATE.findall(text)]
            return json.dumps({"scores": [{"candidate": i, "coherence": 8, "innovation": min(10, 2 * k),
                                           "complexity_balance": 7, "prompt_quality": 7, "rationale": min(10, 2 * k)}
                                          for i, k in cands]})
        return None

    return respond
