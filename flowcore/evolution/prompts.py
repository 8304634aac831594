"""The prompt library: task-specific instruction variants for new or rewritten nodes, and the templates the
optimizer and judge LLMs are given.

Offline, the prompt operator draws from these variants; online, the optimizer LLM writes prompts itself.
"""

from __future__ import annotations

import random

# Instruction variants per task and per node role. "solve": a node fed by the problem; "refine": a node
# fed by an earlier answer; "plan": a node whose output guides another; "generate": code generation.
INSTRUCTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "math": {
        "solve": (
            "Solve the problem step by step, justifying each step. Put the final answer in \\boxed{}.",
            ("Restate what is asked, list the given quantities, then solve carefully. "
             "Give the final answer in \\boxed{}."),
            ("Solve the problem with a different method than the most obvious one, then verify the result. "
             "Put the final answer in \\boxed{}."),
            ("Break the problem into small sub-problems, solve each one, and combine them. "
             "Put the final answer in \\boxed{}."),
            ("Solve the problem, then check the answer by substituting it back or by estimation. "
             "Put the final answer in \\boxed{}."),
        ),
        "refine": (
            "Check the given solution against the problem, fix any error, and give the final answer in \\boxed{}.",
            ("Recompute every step of the solution above; if anything is wrong, correct it. "
             "End with the final answer in \\boxed{}."),
            ("Compare the candidate solution with the problem statement, make sure it answers exactly what is "
             "asked (units, rounding, form), and give the final answer in \\boxed{}."),
        ),
        "plan": (
            ("Do not solve yet: write a short numbered plan for solving the problem, naming the quantities and "
             "formulas to use."),
            "List the key facts of the problem and the method that will find the answer, in at most five steps.",
        ),
    },
    "code": {
        "generate": (
            ("Write a correct, complete Python function for the problem. Keep the exact function name and "
             "signature from the entry point and include the imports it needs."),
            ("Implement the function with special care for edge cases (empty inputs, zero, negatives, "
             "duplicates). Keep the exact function name."),
            ("Write a simple, readable implementation; before finishing, trace the examples in the docstring "
             "through your code. Keep the exact function name."),
            ("Implement the function efficiently using only the standard library; keep the exact name and "
             "signature and add the imports it needs."),
        ),
        "refine": (
            ("Review the code above against the problem and return the corrected, complete Python function in a "
             "```python block, keeping the function name."),
            ("Check the function above on the examples in the problem; fix any failure and return the whole "
             "function in a ```python block with the same name."),
        ),
        "plan": (
            ("Describe, in a few numbered steps, an algorithm for the function, including its edge cases. "
             "Do not write code."),
        ),
    },
}
# A task of your own (kind "text"): the metric compares what follows the last "Answer:" line.
INSTRUCTIONS["text"] = {
    "solve": (
        "Read the task carefully and answer it. End with one line 'Answer: ...' giving only the answer.",
        ("Restate what the task asks for and in what form, then answer. End with one line 'Answer: ...' "
         "giving only the answer."),
        ("Think step by step about the task, check your answer against what was asked, then end with one line "
         "'Answer: ...' giving only the answer."),
    ),
    "refine": (
        ("Check the answer above against the task; correct it if needed. End with one line 'Answer: ...' giving "
         "only the answer."),
        ("Make sure the answer above is in exactly the form the task asks for (no extra words). End with one line "
         "'Answer: ...'."),
    ),
    "plan": ("Do not answer yet: list what the task asks for, the form of the answer and how to find it.",),
}
INSTRUCTIONS["code"]["solve"] = INSTRUCTIONS["code"]["generate"]

# Sentences appended by the "mutate" flavour of prompt rewriting.
MODIFIERS: dict[str, tuple[str, ...]] = {
    "math": (
        "Double-check the arithmetic before answering.",
        "Watch units and rounding.",
        "If several cases arise, handle each one explicitly.",
        "Keep the reasoning concise.",
    ),
    "text": (
        "Give only the answer on the last line, with no extra words.",
        "Follow the form the task asks for exactly.",
        "Keep the reasoning short.",
    ),
    "code": (
        "Consider empty and single-element inputs.",
        "Do not print anything; return the result.",
        "Prefer clear variable names.",
        "Handle large inputs efficiently.",
    ),
}

# Prompt names given to new prompts of each kind.
NAMES = {"solve": "solver", "refine": "refine", "plan": "plan", "generate": "coder"}


def instruction(task: str, kind: str, rng: random.Random, exclude: tuple[str, ...] = ()) -> str:
    """A library instruction for (task, kind) that differs from everything in ``exclude`` when possible."""
    pool = INSTRUCTIONS.get(task, INSTRUCTIONS["math"]).get(kind) or INSTRUCTIONS["math"]["solve"]
    fresh = [p for p in pool if p not in exclude]
    return rng.choice(fresh or list(pool))


def mutate(text: str, task: str, rng: random.Random) -> str | None:
    """``text`` plus one modifier sentence it does not contain yet (None when all are there)."""
    fresh = [m for m in MODIFIERS.get(task, MODIFIERS["math"]) if m not in text]
    if not fresh:
        return None
    return f"{text.rstrip()} {rng.choice(fresh)}"


# ----------------------------------------------------------------------------------- optimizer templates

OPTIMIZER_SYSTEM = """You are the workflow optimizer of MermaidFlow. A workflow is a Mermaid flowchart whose \
nodes are typed operators and whose edges carry named inputs; prompts travel as `%% @prompt name: text` \
comments. You improve workflows for {task} problems by one focused modification: crossover of the parents, \
node substitution, insertion, deletion, rewiring, subgraph mutation (e.g. one solver -> an ensemble), or a \
better prompt. The result must stay a valid workflow.

{guidance}"""

OPTIMIZER_USER = """Parent workflow(s), best first:

{parents}

What was tried from these parents before and whether it helped:
{experience}

Problems the first parent got wrong:
{failures}

Propose ONE improved workflow. First say in one or two sentences what you change and why, then give the \
complete workflow (all prompts included) in a single ```mermaid block."""

OPTIMIZER_REPAIR = """The workflow you proposed is invalid. The checker reports:
{diagnostics}

Fix exactly these problems and reply with the complete corrected workflow in a single ```mermaid block."""

PROMPT_REWRITE = """You improve one instruction of a workflow for {task} problems.
Node {node} ({op}) currently uses the instruction:
{current}

The workflow:
```mermaid
{workflow}
```

Reply with only the new instruction text (one paragraph, no quotes, no Mermaid)."""

# --------------------------------------------------------------------------------------- judge templates

JUDGE_SYSTEM = """You are the judge of MermaidFlow's workflow evolution. You score candidate workflows for \
{task} problems before any of them is run. Score each candidate from 0 to 10 on:
- coherence: the data flow makes sense; every node contributes to the answer; no structural defects;
- innovation: a meaningful change from the parent and from workflows already tried;
- complexity_balance: enough structure to help, not so much that it costs without benefit;
- prompt_quality: prompts are defined, specific to the task and clear;
- rationale: the modification is likely to fix the parent's failures given the history.
Reply with JSON only: {{"scores": [{{"candidate": 0, "coherence": n, "innovation": n, \
"complexity_balance": n, "prompt_quality": n, "rationale": n}}, ...]}} with one entry per candidate."""

JUDGE_USER = """Parent workflow (validation score {score}):
```mermaid
{parent}
```

History of modifications and their effect:
{experience}

Candidates:
{candidates}"""
