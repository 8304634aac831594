"""Flow: AOV graphs of subtasks, their modularity metrics, selection, event-driven execution, inspection,
localized repairs, periodic refinement, and a task set with checkable acceptance."""

from __future__ import annotations

from flowcore.aov.execute import (
    SCHEDULES,
    EchoAgent,
    Execution,
    LLMAgent,
    ManualAgent,
    MissingOutput,
    StepReport,
    run_sync,
    step_view,
)
from flowcore.aov.generate import Candidate, generate_candidates, select
from flowcore.aov.inspector import LLMInspector, RuleInspector, Verdict
from flowcore.aov.metrics import Metrics, c_dependency, choose, compute, p_avg, rank, steps
from flowcore.aov.model import STATUSES, Agent, AOVError, AOVGraph, Subtask
from flowcore.aov.refine import merge_update, propose_refinements
from flowcore.aov.render import to_mermaid
from flowcore.aov.repair import Diff, Op, Proposal, RepairSet, apply_ops, diff, propose_repairs
from flowcore.aov.settings import FlowSettings
from flowcore.aov.store import ExecutionStore, load_execution, save_execution

__all__ = ["SCHEDULES", "STATUSES", "AOVError", "AOVGraph", "Agent", "Candidate", "Diff", "EchoAgent", "Execution",
           "ExecutionStore", "FlowSettings", "LLMAgent", "LLMInspector", "ManualAgent", "Metrics", "MissingOutput",
           "Op", "Proposal", "RepairSet", "RuleInspector", "StepReport", "Subtask", "Verdict", "apply_ops",
           "c_dependency", "choose", "compute", "diff", "generate_candidates", "load_execution", "merge_update",
           "p_avg", "propose_refinements", "propose_repairs", "rank", "run_sync", "save_execution", "select",
           "step_view", "steps", "to_mermaid"]
