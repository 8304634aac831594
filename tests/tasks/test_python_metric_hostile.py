"""Issue 25's verdict rule for the python metric, on the real sandbox: an answer cannot make its own row errored
(left out of the score) nor take honest rows down with it. Before, one answer that made the metric print 3 MB,
loop, crash the interpreter or print garbage left its whole batch of up to 250 rows errored."""
from __future__ import annotations

import asyncio
import json

from flowcore.tasks.metrics import make_metric
from flowcore.tasks.pymetric import PythonBatcher, run_python

# An honest metric with the weaknesses a real one has: it prints what it grades, parses numbers, uses C code.
METRIC = '''
import collections, itertools, os

def metric(prediction, row):
    print("grading", prediction[:20])
    if prediction == "PRINT":
        print("x" * 3_000_000)  # 3 MB through the metric's own print
    if prediction == "GARBAGE":
        print(row["fake"])  # lines shaped like results
    if prediction == "LOOP":
        while True:
            pass
    if prediction == "CLOOP":  # stuck in C: no Python signal handler can run
        collections.deque(itertools.count(), maxlen=0)
    if prediction == "CRASH":
        os._exit(3)
    if prediction == "MEMORY":
        _ = "x" * (2 << 30)
    if prediction.startswith("NUMBER"):
        return float(prediction.split()[1]) / 10  # ValueError on a non-number, 1.5 on 15
    return float(prediction.strip() == row["answer"])
'''


def metric(source: str = METRIC):
    return make_metric("python", {"file": "metric.py"}, where="t.toml", source=source)


FAKE = "\n".join(["[" + ",".join(['{"value": 1.0}'] * 9) + "]", '@@mf0000000000000000@@0 {"value": 1.0}'])
HOSTILE = ["PRINT", "GARBAGE", "LOOP", "CLOOP", "CRASH", "MEMORY", "NUMBER abc", "NUMBER 15"]


def test_hostile_answers_in_a_batch_are_wrong_and_honest_rows_keep_their_grades(monkeypatch):
    from flowcore.tasks import pymetric

    runs = []
    real = pymetric._run_once
    monkeypatch.setattr(pymetric, "_run_once", lambda *a: runs.append(real(*a)) or runs[-1])
    items, expect = [], []
    for hostile in HOSTILE:
        items += [("Paris", {"answer": "Paris", "fake": FAKE}), ("Lyon", {"answer": "Paris", "fake": FAKE}),
                  (hostile, {"answer": "Paris", "fake": FAKE})]
        expect += [1.0, 0.0, 0.0]
    items.append(("NUMBER 7", {"answer": "NUMBER 7", "fake": FAKE}))  # an honest fractional grade
    expect.append(0.7)
    grades = run_python(metric(), items, references=[r["answer"] for _, r in items])
    assert [g.score for g in grades] == expect, [(g.score, g.detail) for g in grades]
    assert not any(g.errored for g in grades)
    by = {p: g.detail for (p, _), g in zip(items, grades)}
    assert "took more than 5 s of CPU" in by["LOOP"] and "took more than 5 s of CPU" in by["CLOOP"]
    assert "exit code 3" in by["CRASH"] and "MemoryError" in by["MEMORY"]
    assert "ValueError" in by["NUMBER abc"] and "returned 1.5" in by["NUMBER 15"]
    assert all("graded wrong" in by[h] for h in HOSTILE if h not in ("PRINT", "GARBAGE"))
    # The loops cost their CPU budget once each (no batch timeout is waited out), the crash one run alone:
    # to CLOOP, on to CRASH, CRASH alone, the rest, then one run of the six failed rows' controls.
    assert len(runs) == 5 and not [r.why for r in runs if r.why.startswith("took longer")], [r.why for r in runs]


def test_a_metric_that_fails_on_every_row_is_errored_naming_file_function_and_row():
    broken = metric("def metric(prediction, row):\n    return row['missing']\n")
    batcher = PythonBatcher(broken)

    async def go():
        return await asyncio.gather(*(batcher.grade(p, {"answer": "Paris"}, "Paris", f"capitals/{i}")
                                      for i, p in enumerate(["Paris", "CRASH", "Lyon"])))

    grades = asyncio.run(go())
    assert all(g.errored for g in grades)  # the metric's own bug: never "wrong", never a silent batch failure
    assert grades[1].detail == ("metric.py: metric() raised KeyError: 'missing' at line 2 on row capitals/1 (and "
                                "with the reference as the answer too: the metric's own error)")
    unloadable = metric("import sys\nsys.exit(4)\ndef metric(p, r):\n    return 1\n")
    grades = run_python(unloadable, [("a", {}), ("b", {})], references=["a", "b"])
    assert [g.detail for g in grades] == ["metric.py: metric() could not be loaded (exit code 4): fix "
                                          "the metric file"] * 2


def test_a_row_whose_metric_fails_only_on_its_reference_stays_errored():
    """The control is what makes a failure the answer's: here the metric fails on the reference too."""
    m = metric("def metric(prediction, row):\n    return float(prediction) == float(row['answer'])\n")
    grades = run_python(m, [("4", {"answer": "4"}), ("four", {"answer": "x"}), ("four", {"answer": "4"})],
                        references=["4", "x", "4"])
    assert grades[0].score == 1.0 and grades[1].errored and grades[2].score == 0.0
    no_controls = run_python(m, [("four", {"answer": "4"})])  # e.g. task check's self-score: nothing to compare
    assert no_controls[0].errored and "ValueError" in no_controls[0].detail


def test_through_evaluate_the_hostile_answer_is_a_wrong_row_of_the_score():
    from flowcore.tasks.harness import evaluate
    from flowcore.tasks.problem import Problem

    m = metric()
    answers = {"t/0": "Paris", "t/1": "PRINT", "t/2": "CRASH", "t/3": "Paris"}
    problems = [Problem(pid, "t", "Capital of France?", "Paris", meta={"row": {"answer": "Paris", "fake": FAKE}},
                        metric=m) for pid in answers]

    async def runner(p):
        return answers[p.id], 0.0

    rep = asyncio.run(evaluate(runner, problems, concurrency=4))
    assert (rep.n, rep.errors, rep.score) == (4, 0, 0.5), json.dumps(rep.to_json()["results"])[:800]


def test_big_answers_are_split_across_runs_by_size(monkeypatch):
    from flowcore.tasks import pymetric

    sizes = []
    real = pymetric._run_once
    monkeypatch.setattr(pymetric, "_run_once", lambda m, items, t: sizes.append(len(items)) or real(m, items, t))
    big = "Paris" + " " * (3 << 20)  # 3 MB: three fit in no 8 MB run
    items = [(big, {"answer": "Paris"}), ("Lyon", {"answer": "Paris"}), (big, {"answer": "Paris"}),
             (big, {"answer": "Paris"}), ("Paris", {"answer": "Paris"})]
    m = metric("def metric(prediction, row):\n    return float(prediction.strip() == row['answer'])\n")
    assert [g.score for g in run_python(m, items, references=["Paris"] * 5)] == [1.0, 0.0, 1.0, 1.0, 1.0]
    assert sizes == [3, 2]
