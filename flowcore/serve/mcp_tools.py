"""MCP tools over the official SDK (``mcp``'s MCPServer): a coding agent checks, formats, runs and evaluates
workflows, lists and publishes versions, starts an evolution and reads its progress.

The same server object is served over streamable HTTP at /mcp (flowcore.serve.app, behind the key guard) and
over stdio (``python -m flowcore mcp``). Every tool calls the library functions the command line calls; a bad
input is a tool error naming what is wrong (``ToolError``), never a traceback.
"""

from __future__ import annotations

import asyncio

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from flowcore import catalogue as cat
from flowcore.checker.check import check, is_valid
from flowcore.mermaid.reader import WorkflowSyntaxError, parse, to_mermaid
from flowcore.serve.engine import Engine, ServeError, kind_of
from flowcore.serve.publish import describe, publish_workflow
from flowcore.workspace import published
from flowcore.workspace.keys import verify_key

INSTRUCTIONS = ("MermaidFlow Studio: workflows are Mermaid flowcharts of typed LLM operators. Check and format "
                "them, run one on a problem, evaluate it on a benchmark, publish it as NAME@vN, list the published "
                "versions, start an evolution run and read its progress.")


def _owner(ctx: Context | None, engine: Engine) -> str:
    """The caller: the owner of the bearer key the HTTP request carried (the guard verified it), else 'local'."""
    try:
        headers = ctx.headers if ctx is not None else None
    except ValueError:  # no request (stdio)
        headers = None
    auth = (headers or {}).get("authorization") or ""
    scheme, _, key = auth.partition(" ")
    if scheme.lower() == "bearer" and (rec := verify_key(engine.ws, key.strip(), touch=False)) is not None:
        return rec.owner
    return "local"


def _task(task: str | None) -> str | None:
    if task is not None and task not in cat.TASKS:
        raise ToolError(f"task must be one of {', '.join(cat.TASKS)}, got {task!r}")
    return task


def build_mcp(engine: Engine) -> MCPServer:
    server = MCPServer("mermaidflow", instructions=INSTRUCTIONS, log_level="WARNING")

    def owner(ctx: Context | None) -> str:
        return _owner(ctx, engine)

    @server.tool()
    def check_workflow(workflow: str, task: str | None = None) -> dict:
        """Check a workflow's Mermaid text (task: math or code). Returns {valid, diagnostics: [{code, severity,
        message, line, column, node}]}."""
        diags = check(workflow, _task(task))
        return {"valid": is_valid(diags), "diagnostics": [d.to_dict() for d in diags]}

    @server.tool()
    def format_workflow(workflow: str) -> str:
        """The canonical text of a workflow (as `python -m flowcore fmt` prints it)."""
        try:
            return to_mermaid(parse(workflow))
        except WorkflowSyntaxError as exc:
            raise ToolError("; ".join(str(d) for d in exc.diagnostics)) from None

    @server.tool()
    async def run_workflow(problem: str, model: str | None = None, workflow: str | None = None,
                           task: str | None = None, entry_point: str | None = None,
                           ctx: Context | None = None) -> dict:
        """Run a published workflow (model: NAME or NAME@vN) or a workflow's text on one problem. Returns
        {answer, cost, calls, version, trace_id}; the run's trace is stored in the workspace."""
        who = owner(ctx)
        if (model is None) == (workflow is None):
            raise ToolError("give either model (a published NAME or NAME@vN) or workflow (Mermaid text)")
        try:
            if model is not None:
                a = await engine.run(model, problem, entry_point=entry_point, source="mcp", created_by=who)
            else:
                a = await engine.run_text(workflow or "", _task(task), problem, entry_point=entry_point,
                                          source="mcp", created_by=who)
        except ServeError as exc:
            raise ToolError(exc.message) from None
        return {"answer": a.text, "cost": a.cost, "calls": a.calls, "version": a.version, "trace_id": a.trace_id}

    @server.tool()
    async def evaluate_workflow(benchmark: str, model: str | None = None, workflow: str | None = None,
                                split: str = "validation", limit: int = 5) -> dict:
        """Evaluate a published workflow (model) or a workflow's text on a benchmark (gsm8k, math, humaneval,
        mbpp), split validation or test, the first `limit` problems. Returns {score, n, errors, cost, ci}."""
        from flowcore.evaluation.evaluate import evaluate_workflow as evaluate
        from flowcore.tasks import TASK_OF, kind_of, load

        if kind_of(benchmark, engine.ws) is None:  # built in, or a task saved in the served workspace
            raise ToolError(f"benchmark must be one of {', '.join(TASK_OF)} or a task saved in the workspace, "
                            f"got {benchmark!r}")
        if split not in ("validation", "test") or not 1 <= limit <= 500:
            raise ToolError("split must be validation or test, and limit between 1 and 500")
        text = _text_of(engine, model, workflow)
        try:
            w = parse(text)
            problems = load(benchmark, split, limit=limit)
            report = await evaluate(w, benchmark, problems, llm=engine.llm().child(), concurrency=4)
        except (WorkflowSyntaxError, ValueError) as exc:
            raise ToolError(str(exc)) from None
        out = report.to_json()
        out.pop("results")
        return out

    @server.tool()
    def list_versions(name: str | None = None) -> list[dict]:
        """Published versions (of one name, or all), newest first within a name: model id, who, when, from which
        run and round, note, validation and test scores."""
        return [describe(p) for p in published.list_published(engine.ws, name)]

    @server.tool()
    def publish(workflow: str, task: str, name: str, note: str | None = None, ctx: Context | None = None) -> dict:
        """Publish a workflow's text as the next immutable version NAME@vN (checked first)."""
        try:
            p = publish_workflow(engine.ws, name, workflow, task, created_by=owner(ctx), note=note)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        return describe(p)

    @server.tool()
    def evolve_start(benchmark: str, rounds: int = 3, candidates: int = 2, workflow: str | None = None,
                     limit: int | None = 5, mode: str = "programmatic", ctx: Context | None = None) -> dict:
        """Start an evolution run in the background (mode programmatic or llm; workflow: the seed's text, else
        the benchmark's seed). Returns {run_id}; read its progress with evolve_progress."""
        from flowcore.evolution.loop import EvolutionConfig
        from flowcore.evolution.session import start_run

        cfg = EvolutionConfig(benchmark=benchmark, rounds=rounds, candidates=candidates, workflow=workflow,
                              limit=limit, mode=mode)
        try:
            cfg.validate()
            job = start_run(engine.ws, engine.llm().settings, cfg, created_by=owner(ctx))
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        return {"run_id": job.meta.get("run_id"), "job": job.id}

    @server.tool()
    def evolve_progress(run_id: int) -> dict:
        """An evolution run's status and rounds so far: {status, rounds: [{round, status, score, operator}],
        best}."""
        from flowcore.evolution.history import History
        from flowcore.evolution.session import run_status

        h = History(engine.ws)
        try:
            info = h.run(run_id)
        except (KeyError, ValueError, LookupError) as exc:
            raise ToolError(f"no evolution run {run_id}: {exc}") from None
        rows = h.summaries(run_id)
        scores = [r["score"] for r in rows if r.get("score") is not None]
        return {"run_id": run_id, "status": run_status(info, engine.ws), "benchmark": info.benchmark,
                "planned": int(info.config.get("rounds", 0)) + 1,
                "rounds": [{"round": r["round"], "status": r["status"], "score": r["score"],
                            "operator": r["operator"]} for r in rows],
                "best": max(scores) if scores else None}

    return server


def _text_of(engine: Engine, model: str | None, workflow: str | None) -> str:
    if (model is None) == (workflow is None):
        raise ToolError("give either model (a published NAME or NAME@vN) or workflow (Mermaid text)")
    if workflow is not None:
        return workflow
    try:
        return engine.resolve(model).text
    except ServeError as exc:
        raise ToolError(exc.message) from None


async def serve_stdio(engine: Engine) -> None:
    await build_mcp(engine).run_stdio_async()


def run_stdio(engine: Engine) -> None:
    asyncio.run(serve_stdio(engine))


__all__ = ["build_mcp", "kind_of", "run_stdio"]
