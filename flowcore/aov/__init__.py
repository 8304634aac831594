"""Flow: AOV graphs of subtasks, their modularity metrics, selection, execution, inspection and repair."""

from __future__ import annotations

from .execute import EchoAgent, Execution, LLMAgent, ManualAgent, MissingOutput, StepReport, run_sync
from .generate import Candidate, generate_candidates, select
from .inspector import LLMInspector, RuleInspector, Verdict
from .metrics import Metrics, c_dependency, choose, compute, p_avg, rank, steps
from .model import STATUSES, Agent, AOVError, AOVGraph, Subtask
from .render import to_mermaid
from .repair import Diff, Op, Proposal, RepairSet, apply_ops, diff, propose_repairs
from .store import ExecutionStore, load_execution, save_execution

__all__ = ["STATUSES", "AOVError", "AOVGraph", "Agent", "Candidate", "Diff", "EchoAgent", "Execution",
           "ExecutionStore", "LLMAgent", "LLMInspector", "ManualAgent", "Metrics", "MissingOutput", "Op",
           "Proposal", "RepairSet", "RuleInspector", "StepReport", "Subtask", "Verdict", "apply_ops",
           "c_dependency", "choose", "compute", "diff", "generate_candidates", "load_execution", "p_avg",
           "propose_repairs", "rank", "run_sync", "save_execution", "select", "steps", "to_mermaid"]
