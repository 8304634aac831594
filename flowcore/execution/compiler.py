"""Compile a workflow into one standalone Python module (DESIGN §6). Deterministic: no LLM, no clock, no
randomness, so the same workflow always gives byte-identical source.

The module holds the prompts, the graph (as canonical Mermaid), an async ``Workflow`` whose ``__call__`` calls
the operators step by step (the independent nodes of a step concurrently, with ``asyncio.gather``), and a
``__main__``. It runs without flowcore: the operator implementations (``_standalone_ops``) and the sandbox are
pasted in, the same code the runtime runs, so both behave alike for the same LLM replies.
"""

from __future__ import annotations

import ast
import builtins
import keyword
from pathlib import Path

from flowcore import catalogue as cat
from flowcore.execution.operators import required_ports
from flowcore.execution.runtime import NodePlan, Plan, prepare
from flowcore.llm.client import DEFAULT_PRICES
from flowcore.mermaid.reader import to_mermaid
from flowcore.model import Workflow

__all__ = ["CompileError", "compile_workflow"]

_HERE = Path(__file__).resolve().parent
SUPPORT = (("flowcore/execution/_standalone_ops.py", _HERE / "_standalone_ops.py"),
           ("flowcore/execution/sandbox.py", _HERE / "sandbox.py"))
# Names the generated part defines or uses in Workflow.__call__; node variables must not shadow them.
_OWN = ("TASK", "MERMAID", "PROMPTS", "REQUIRED_PORTS", "PRICES", "Workflow", "main")
_RESERVED = {"run", "self", "problem", "entry_point", "public_tests", "answer", "asyncio", "Run",
             "OpenAIChat", "SimpleNamespace", "Any", *_OWN}
_HEADER_IMPORTS = {("argparse", None), ("asyncio", None), ("json", None), ("sys", None)}
_HEADER_FROM = {("types", "SimpleNamespace", None), ("typing", "Any", None)}


class CompileError(RuntimeError):
    """The module cannot be written: support code that clashes (a bug in flowcore) or a workflow the printer
    cannot write out (subgraphs nested too deeply)."""


def compile_workflow(workflow: Workflow, task: str | None = None) -> str:
    """Python source of a standalone module that runs ``workflow``; WorkflowInvalid for an invalid one."""
    plan = prepare(workflow, task)
    names = _variables(plan)
    support, imports, support_names = _support()
    clash = support_names & set(_OWN)
    if clash:
        names_ = ", ".join(sorted(clash))
        raise CompileError(f"support code defines names the compiled module needs: {names_}")
    parts = [
        _docstring(plan),
        "from __future__ import annotations\n",
        _imports(imports),
        "",
        _constants(plan),
        "",
        _workflow_class(plan, names),
        "",
        "# " + "=" * 106,
        "# Support code pasted from flowcore: the operators and the sandbox the runtime uses.",
        "# " + "=" * 106,
        "",
        support,
        "",
        _MAIN,
    ]
    text = "\n".join(parts)
    while "\n\n\n\n" in text:
        text = text.replace("\n\n\n\n", "\n\n\n")
    return text.rstrip("\n") + "\n"


# -- pieces --------------------------------------------------------------------------------------------------

def _lit(text: str, indent: str = "    ", width: int = 90) -> str:
    """A Python literal for ``text``: one repr when short, else a parenthesised concatenation of reprs cut at
    line ends and, for long lines, between words (so the generated lines stay short)."""
    pieces: list[str] = []
    for line in text.splitlines(keepends=True) or [""]:
        while len(line) > width:
            cut = line.rfind(" ", 0, width)
            cut = cut + 1 if cut > 0 else width
            pieces.append(line[:cut])
            line = line[cut:]
        pieces.append(line)
    if len(pieces) == 1:
        return repr(text)
    return "(\n" + "".join(f"{indent}{p!r}\n" for p in pieces) + indent[:-4] + ")"


def _docstring(plan: Plan) -> str:
    ops = ", ".join(plan.ops)
    steps = len(plan.steps)
    entry = " [--entry-point NAME]" if plan.uses("ENTRY_POINT") else ""
    nodes = len(plan.nodes)
    return (f'"""A MermaidFlow workflow compiled by flowcore: {nodes} node{"s" * (nodes != 1)} in {steps} '
            f'step{"s" * (steps != 1)}.\n\n'
            f"Operators: {ops}.\n"
            "Generated deterministically from the Mermaid text in MERMAID below; no LLM was involved.\n"
            "Requires only Python 3 (3.11 tested) and its standard library: no flowcore, no pip install.\n"
            "When the `openai` package is installed it makes the LLM calls; otherwise urllib sends the\n"
            "same OpenAI-compatible request (MERMAIDFLOW_HTTP=urllib chooses urllib either way).\n"
            "Run it against any OpenAI-compatible endpoint:\n\n"
            "    OPENAI_BASE_URL=... OPENAI_API_KEY=... \\\n"
            f'        python workflow.py --problem "..."{entry} [--json]\n\n'
            "or from Python: ``answer, cost = await Workflow()(problem, entry_point)``.\n"
            '"""\n')


def _imports(collected: tuple[set, set]) -> str:
    plain, froms = collected
    plain = plain | _HEADER_IMPORTS
    froms = froms | _HEADER_FROM
    ordered = sorted(plain, key=lambda x: (x[0], x[1] or ""))
    lines = [f"import {m}" + (f" as {a}" if a else "") for m, a in ordered]
    by_mod: dict[str, list[str]] = {}
    for mod, name, alias in sorted(froms, key=lambda x: (x[0], x[1], x[2] or "")):
        by_mod.setdefault(mod, []).append(name + (f" as {alias}" if alias else ""))
    lines += [f"from {mod} import {', '.join(names)}" for mod, names in sorted(by_mod.items())]
    return "\n".join(lines)


def _constants(plan: Plan) -> str:
    w = plan.workflow
    prompts = "".join(f"    {k!r}: {_lit(v, '        ')},\n" for k, v in w.prompts.items())
    required = required_ports(plan.ops)
    req = "".join(f"    {op!r}: {ports!r},\n" for op, ports in required.items())
    prices = "".join(f"    {m!r}: {tuple(p)!r},\n" for m, p in DEFAULT_PRICES.items())
    try:
        text = to_mermaid(w)
    except RecursionError:  # the printer recurses per subgraph level; say so in one line, not a traceback
        raise CompileError(f"subgraphs are nested {_nesting(w)} levels deep, too deep to write out as "
                           "Mermaid; flatten some of them") from None
    return (f"TASK = {plan.task!r}\n"
            f"MERMAID = {_lit(text)}\n"
            f"PROMPTS = {{\n{prompts}}}\n"
            "# Required ports per operator (from flowcore's catalogue): a node whose required input comes\n"
            "# only from skipped nodes (a Decision branch not taken) is skipped too.\n"
            f"REQUIRED_PORTS = {{\n{req}}}\n"
            "# USD per 1M (input, output) tokens; MERMAIDFLOW_PRICES (JSON) adds or overrides.\n"
            f"PRICES = {{\n{prices}}}\n")


def _nesting(w: Workflow) -> int:
    """The deepest subgraph nesting, walking parent links (no recursion)."""
    deepest = 0
    for sg in w.subgraphs.values():
        depth, seen, cur = 1, {sg.id}, sg.parent
        while cur is not None and cur in w.subgraphs and cur not in seen:
            seen.add(cur)
            depth, cur = depth + 1, w.subgraphs[cur].parent
        deepest = max(deepest, depth)
    return deepest


def _variables(plan: Plan) -> dict[str, str]:
    """A Python variable per node id: the id itself when it is an ASCII identifier, else an ASCII name mangled
    from it. Python folds identifiers with NFKC (fullwidth ``Ｃ1`` *is* ``C1`` to the compiler), so a non-ASCII id
    used as a name could merge two nodes into one variable; ASCII names are never folded, so distinct names
    stay distinct (``taken`` compares them exactly)."""
    taken = set(_RESERVED) | set(dir(builtins))
    out = {"PROBLEM": "PROBLEM", "ENTRY_POINT": "ENTRY_POINT"}
    taken |= set(out.values())
    for n in plan.nodes:
        name = n.id
        if not (name.isascii() and name.isidentifier()) or keyword.iskeyword(name) or name in taken:
            base = "n_" + "".join(c if c.isascii() and (c.isalnum() or c == "_") else f"_u{ord(c):04x}_"
                                  for c in name)
            name, k = base, 2
            while name in taken or not name.isidentifier():
                name, k = f"{base}_{k}", k + 1
        taken.add(name)
        out[n.id] = name
    return out


def _call(np: NodePlan, var: dict[str, str], indent: str, lead: str = "", trail: str = "") -> list[str]:
    """The call for one node, on one line when it fits in 110 columns, else one argument per line."""
    ports = "{" + ", ".join(f"{p!r}: [{', '.join(var[s] for s in srcs)}]" for p, srcs in np.ports) + "}"
    if np.op == cat.DECISION:
        func, args = "run.decide", [repr(np.id), ports]
    else:
        func, args = "run.node", [repr(np.id), repr(np.op), ports]
        if np.prompt_name is not None:
            args.append(f"prompt=PROMPTS[{np.prompt_name!r}]")
        if np.note:
            args.append(f"note={np.note!r}")
        if np.routes:
            args.append("routes=[" + ", ".join(f"({var[d]}, {label!r})" for d, label in np.routes) + "]")
    one = f"{indent}{lead}{func}({', '.join(args)}){trail}"
    if len(one) <= 110:
        return [one]
    return [f"{indent}{lead}{func}("] + [f"{indent}    {a}," for a in args] + [f"{indent}){trail}"]


def _workflow_class(plan: Plan, var: dict[str, str]) -> str:
    ind = " " * 8
    body = [f"{ind}run = Run(self.llm, problem, entry_point, sandbox=self.sandbox, required=REQUIRED_PORTS,",
            f"{ind}          public_tests=public_tests)"]
    if plan.uses("PROBLEM"):
        body.append(f"{ind}PROBLEM = run.problem")
    if plan.uses("ENTRY_POINT"):
        body.append(f"{ind}ENTRY_POINT = run.entry")
    for i, step in enumerate(plan.steps, 1):
        decisions = [n for n in step if n.op == cat.DECISION]
        nodes = [n for n in step if n.op != cat.DECISION]
        what = "runs" if len(step) == 1 else "run concurrently"
        body.append(f"{ind}# step {i}: {', '.join(n.id for n in step)} {what}")
        for n in step:
            if n.routes:
                via = " or ".join(f"{d} {label}" for d, label in n.routes)
                body.append(f"{ind}# {n.id} runs only on the route {via}; otherwise it is skipped")
        for d in decisions:
            body += _call(d, var, ind, f"{var[d.id]} = ")
        if len(nodes) == 1:
            body += _call(nodes[0], var, ind, f"{var[nodes[0].id]} = await ")
        elif nodes:
            body.append(f"{ind}{', '.join(var[n.id] for n in nodes)} = await asyncio.gather(")
            for n in nodes:
                body += _call(n, var, ind + "    ", trail=",")
            body.append(f"{ind})")
    inputs = ", ".join(f"({var[s]}, {label!r})" if label else var[s] for s, label in plan.returns)
    body += [f"{ind}answer = run.finish([{inputs}])",
             f"{ind}self.calls, self.trace = run.calls, run.trace",
             f"{ind}return answer, run.cost"]
    return _CLASS_HEAD + "\n".join(body) + "\n"


_CLASS_HEAD = '''class Workflow:
    """The workflow as a callable: ``answer, cost = await Workflow()(problem, entry_point)``.

    llm: any object with ``async chat(messages, *, role, temperature, cache_salt)`` returning a reply with
    ``.text`` and ``.cost`` (default: an OpenAI-compatible client configured from the environment).
    After a call, ``calls`` is the number of LLM calls it made and ``trace`` has one record per node.
    """

    def __init__(self, llm: Any = None, sandbox: Any = None) -> None:
        self.llm = llm if llm is not None else OpenAIChat(prices=PRICES)
        # Generated code runs only inside bubblewrap; without it the run stops with SandboxUnavailable.
        self.sandbox = sandbox if sandbox is not None else SimpleNamespace(run_untrusted=run_untrusted,
                                                                           cancel_on=cancel_on)
        self.calls = 0
        self.trace: list[dict] = []

    async def __call__(self, problem: str, entry_point: str | None = None,
                       public_tests: str = "") -> tuple[str, float]:
'''

_MAIN = '''def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run this MermaidFlow workflow on one problem against any "
                                 "OpenAI-compatible endpoint (OPENAI_BASE_URL, OPENAI_API_KEY). Needs only "
                                 "Python 3 and its standard library; uses the openai package when it is "
                                 "installed.")
    ap.add_argument("--problem", required=True, help="the problem text, or @FILE to read it from a file")
    ap.add_argument("--entry-point", default=None, help="function name (code tasks)")
    ap.add_argument("--public-tests", default="", help="assert lines a TestOp may run (default: the examples "
                    "in the problem text)")
    ap.add_argument("--json", action="store_true", help='print {"answer", "cost", "calls"} as JSON')
    args = ap.parse_args(argv)
    problem = args.problem
    if problem.startswith("@"):
        try:
            with open(problem[1:], encoding="utf-8") as fh:
                problem = fh.read()
        except OSError as exc:
            print(f"error: cannot read {problem[1:]}: {exc}", file=sys.stderr)
            return 2
    try:
        llm = OpenAIChat(prices=PRICES)
    except ValueError as exc:
        print(f"error: bad LLM setting in the environment: {exc}", file=sys.stderr)
        return 2
    if not llm.configured:
        print("error: no LLM endpoint configured: set OPENAI_BASE_URL (any OpenAI-compatible server) and/or "
              "OPENAI_API_KEY", file=sys.stderr)
        return 1
    workflow = Workflow(llm)
    try:
        answer, cost = asyncio.run(workflow(problem, args.entry_point, args.public_tests))
    except (NodeError, RuntimeError) as exc:  # SandboxUnavailable too: code is never run unconfined
        print(f"error: {exc}", file=sys.stderr)
        if llm.calls:  # what was paid for before it failed is still paid for
            print(f"cost so far: ${llm.cost:.6f}, LLM calls: {llm.calls}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"answer": answer, "cost": round(cost, 8), "calls": workflow.calls},  # USD, no float noise
                         ensure_ascii=False))
    else:
        print(answer)
        print(f"cost: ${cost:.6f}, LLM calls: {workflow.calls}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


# -- pasting the support modules -----------------------------------------------------------------------------

def _support() -> tuple[str, tuple[set, set], set[str]]:
    """The support sources without docstrings and imports, their merged imports, and their top-level names.
    Read on every call (a few ms), so an export always carries the code the runtime runs now."""
    chunks, plain, froms = [], set(), set()
    defined: dict[str, str] = {}
    bound: dict[str, tuple] = {}
    for label, path in SUPPORT:
        body, p, f, names = _strip(path.read_text(encoding="utf-8"))
        for name in names:
            if name in defined or name in bound:
                raise CompileError(f"{label} defines {name!r}, which another pasted module defines too")
            defined[name] = label
        for origin in [(m, a) for m, a in p] + [(m, n, a) for m, n, a in f]:
            key = origin[-1] or (origin[0].split(".")[0] if len(origin) == 2 else origin[1])
            if key in defined or (key in bound and bound[key] != origin):
                raise CompileError(f"{label}: import of {key!r} clashes with another pasted module")
            bound[key] = origin
        plain |= p
        froms |= f
        rule = f"# ---- {label} " + "-" * max(4, 100 - len(label))
        chunks.append(f"{rule}\n\n{body.strip(chr(10))}\n")
    return "\n\n".join(chunks), (plain, froms), set(defined) | set(bound)


def _strip(src: str) -> tuple[str, set, set, set[str]]:
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    drop: set[int] = set()
    plain: set[tuple[str, str | None]] = set()
    froms: set[tuple[str, str, str | None]] = set()
    names: set[str] = set()
    for i, node in enumerate(tree.body):
        span = range(node.lineno - 1, (node.end_lineno or node.lineno))
        if i == 0 and isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant) \
                and isinstance(node.value.value, str):
            drop.update(span)
        elif isinstance(node, ast.Import):
            plain.update((a.name, a.asname) for a in node.names)
            drop.update(span)
        elif isinstance(node, ast.ImportFrom):
            if node.module != "__future__":
                if node.level:
                    raise CompileError("a pasted module must not use relative imports")
                froms.update((node.module or "", a.name, a.asname) for a in node.names)
            drop.update(span)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    body = "".join(line for k, line in enumerate(lines) if k not in drop)
    return body, plain, froms, names
