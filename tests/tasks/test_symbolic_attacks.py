"""Attacks on the symbolic scoring pool (flowcore/tasks/symbolic.py, _symbolic_worker.py): the text compared is a
candidate's answer, so it may be anything. Whatever it is, it gets its own verdict and no other: it cannot run code
in a worker, kill or stall the workers that compare other answers, hang the scorer or leave processes and
descriptors behind; and a failure of the pool itself (a killed or stopped process, no descriptors left) is an
error, never a wrong answer."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from flowcore.tasks import scoring, symbolic

ROOT = Path(__file__).resolve().parents[2]
# found by path, as the zygote runs it (not on sys.path: flowcore/tasks' modules would shadow others)
_spec = importlib.util.spec_from_file_location("_symbolic_worker", ROOT / "flowcore" / "tasks" / "_symbolic_worker.py")
worker_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker_module)

# ---------------------------------------------------------------- code in the compared text

CODE = [  # each would run in the worker if the text reached sympy's parser (it evaluates Python)
    "x+0*__import__('os').system('touch {flag}')",
    "x+0*eval(chr(95)*2+'import'+chr(95)*2+'(\"os\").system(\"touch {flag}\")')",
    "x+0*exec('open(\"{flag}\",\"w\")')",
]


@pytest.mark.parametrize("code", CODE)
def test_code_in_the_compared_text_never_runs_in_the_worker(tmp_path, code):
    """parse_expr evaluates Python: `__import__('os').system(...)` compared with `x` ran, and said True."""
    flag = tmp_path / "ran"
    assert symbolic.equal(code.format(flag=flag), "x") is None
    assert not flag.exists()
    assert symbolic.equal("x+1", "1+x") is True


def test_the_worker_refuses_exactly_what_the_scorer_refuses():
    """The worker's own check names the same functions as the LaTeX translator: no answer the scorer lets through
    is refused, and no name the scorer refuses reaches the parser."""
    assert worker_module.NAMES == scoring._NAMES
    for ok in ["sqrt(2)*x", "((1)/(2))", "x**(2)", "2.5 * pi", "log(x) + E + I*oo"]:
        worker_module.check(ok)
    for bad in ["srepr(x)", "x.name", "x_1", "'a'", "x[0]", "x,y", "lambda: 1", "x;y", "Symbol(x)"]:
        with pytest.raises(ValueError):
            worker_module.check(bad)


@pytest.mark.parametrize("answer", [r"\boxed{__import__('os').system('touch {flag}')}",
                                    r"\boxed{x+0\cdot eval(chr(95))}", r"\boxed{x.__class__}"])
def test_code_in_an_answer_is_a_wrong_answer_through_the_scorer(tmp_path, answer):
    flag = tmp_path / "ran"
    res = scoring.score("math", answer.replace("{flag}", str(flag)), r"\boxed{x}")
    assert (res.correct, res.errored) == (False, False) and not flag.exists()
