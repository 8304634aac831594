"""Evolution engine (DESIGN §5): safety-constrained graph operators, the history buffer and parent sampling,
judges, the optimizer LLM and the resumable round loop."""

from __future__ import annotations

from flowcore.evolution.history import History, sample_parents, selection_probabilities, top_k
from flowcore.evolution.judge import Candidate, LLMJudge, RuleJudge, Verdict
from flowcore.evolution.loop import Evolution, EvolutionConfig, Review
from flowcore.evolution.ops import MUTATIONS, OPERATORS, Child, Declined, apply, crossover
from flowcore.evolution.optimizer import Optimizer, Proposal, extract_mermaid, guidance

__all__ = ["MUTATIONS", "OPERATORS", "Candidate", "Child", "Declined", "Evolution", "EvolutionConfig",
           "History", "LLMJudge", "Optimizer", "Proposal", "Review", "RuleJudge", "Verdict", "apply",
           "crossover", "extract_mermaid", "guidance", "sample_parents", "selection_probabilities", "top_k"]
