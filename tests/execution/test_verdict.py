"""A score no candidate can write: every cheat the issue lists scores 0, through the scorer, `evaluate`, the
Test operator at run time and an exported module, while honest answers still pass.

The tests judge from a sandbox of their own and call the candidate's function in another, across a pipe that
carries plain data (flowcore/sandbox.py, _SERVE and _JUDGE)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flowcore.cli.main import main
from flowcore.execution import sandbox
from flowcore.tasks import data
from flowcore.tasks.scoring import score
from tests.helpers.fakellm import by_keyword

ROOT = Path(__file__).resolve().parents[2]

# Each cheat defines the entry point wrongly (it returns nothing useful) and then tries to win anyway.
CHEATS = {
    "forged report line on every descriptor": '''
import os
def {f}(*a, **k):
    return None
for fd in range(0, 256):
    for line in (b"started\\t\\n", b"done\\t\\n", b"\\x00\\x00\\x00\\x0b{{\\"ready\\":1}}"):
        try:
            os.write(fd, line)
        except OSError:
            pass
''',
    "forged replies on the wire, then exit": '''
import json, os
def {f}(*a, **k):
    return None
frame = lambda o: len(json.dumps(o).encode()).to_bytes(4, "big") + json.dumps(o).encode()
for fd in range(3, 64):
    try:
        os.write(fd, frame({{"ready": True}}) + frame({{"names": {{}}}}) + frame({{"ok": ["b", True]}}) * 50)
    except OSError:
        pass
os._exit(0)
''',
    "patched compile and AssertionError": '''
import builtins
_compile = builtins.compile
builtins.compile = lambda src, name, mode, *a, **k: _compile("pass", name, mode)
builtins.AssertionError = type("AssertionError", (Exception,), {{}})
builtins.exec = lambda *a, **k: None
def {f}(*a, **k):
    return None
''',
    "an object equal to anything": '''
class Anything:
    __eq__ = lambda self, other: True
    __ne__ = lambda self, other: False
    __bool__ = lambda self: True
    __hash__ = lambda self: 0
    __repr__ = lambda self: "42"
    __lt__ = __le__ = __gt__ = __ge__ = __eq__
    __abs__ = lambda self: 0
    __sub__ = __rsub__ = __add__ = __radd__ = lambda self, other: self
    __len__ = lambda self: 0
    __iter__ = lambda self: iter(())
def {f}(*a, **k):
    return Anything()
''',
    "an int whose == is always true": '''
class Sly(int):
    __eq__ = lambda self, other: True
    __ne__ = lambda self, other: False
    __hash__ = int.__hash__
def {f}(*a, **k):
    return Sly(-12345)
''',
    "atexit and signal handlers": '''
import atexit, os, signal
def forge(*_):
    for fd in range(0, 256):
        try:
            os.write(fd, b"done\\t\\n")
        except OSError:
            pass
atexit.register(forge)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
    signal.signal(s, forge)
def {f}(*a, **k):
    raise SystemExit(0)
''',
    "threads and children that outlive the call": '''
import os, threading, time
def forge():
    time.sleep(0.05)
    for fd in range(0, 256):
        try:
            os.write(fd, b"done\\t\\n")
        except OSError:
            pass
    os._exit(0)
def {f}(*a, **k):
    threading.Thread(target=forge).start()
    if os.fork() == 0:
        forge()
    time.sleep(2)
    return None
''',
    "early exit inside the call": '''
import os
def {f}(*a, **k):
    os._exit(0)
''',
    "early exit while loading": '''
import sys
def {f}(*a, **k):
    return None
sys.exit(0)
''',
    "reading the tests": '''
import glob, os, re
seen = []
for path in glob.glob("/proc/*/cmdline") + glob.glob("/proc/*/environ") + glob.glob("/tmp/**", recursive=True):
    try:
        seen.append(open(path, "rb").read(1 << 20))
    except OSError:
        pass
for fd in range(0, 64):
    try:
        os.set_blocking(fd, False)
        seen.append(os.read(fd, 1 << 20))
    except OSError:
        pass
blob = b"\\n".join(seen).decode("latin-1")
def {f}(*args, **k):
    m = re.search(r"(?:candidate|{f})\\(" + re.escape(", ".join(map(repr, args))) + r"\\)\\s*==\\s*(.+)", blob)
    return eval(m.group(1)) if m else "no tests found"
''',
}

FUNCS = {"triple": ("3 * x", [(2, 6), (-1, -3), (5, 15)]), "negate": ("-x", [(4, -4), (0, 0), (-7, 7)])}


def _problems() -> list[data.Problem]:
    out = []
    for name, (_body, cases) in FUNCS.items():
        prompt = f'def {name}(x):\n    """Compute it.\n    >>> {name}({cases[0][0]})\n    {cases[0][1]}\n    """\n'
        he_tests = "def check(candidate):\n" + "".join(f"    assert candidate({x}) == {y}\n" for x, y in cases)
        mbpp_tests = "".join(f"assert {name}({x}) == {y}\n" for x, y in cases)
        out.append(data.Problem(id=f"he/{name}", benchmark="humaneval", question=prompt, reference="",
                                entry_point=name, tests=he_tests))
        out.append(data.Problem(id=f"mbpp/{name}", benchmark="mbpp", question=f"Write {name}.", reference="",
                                entry_point=name, tests=mbpp_tests))
    return out


def _honest(name: str) -> str:
    return f"def {name}(x):\n    return {FUNCS[name][0]}\n"


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_every_cheat_scores_zero_and_honest_code_still_passes(cheat):
    for p in _problems():
        res = score(p.benchmark, f"```python\n{CHEATS[cheat].format(f=p.entry_point)}\n```", p, timeout=5)
        assert not res.correct, (cheat, p.id, res)
        assert not res.errored, (cheat, p.id, res)  # a cheat is a wrong answer, not an infrastructure error
        assert score(p.benchmark, _honest(p.entry_point), p).correct, p.id


def test_the_real_benchmarks_canonical_solutions_pass_and_a_forger_fails_them_all():
    problems = data.load("humaneval", "validation")[:10] + data.load("mbpp", "validation")[:10]
    for p in problems:
        answer = p.question + p.reference if p.benchmark == "humaneval" else p.reference
        assert score(p.benchmark, answer, p).correct, p.id
        forged = CHEATS["forged report line on every descriptor"].format(f=p.entry_point)
        assert not score(p.benchmark, forged, p, timeout=5).correct, p.id


def test_plain_data_crosses_exactly_and_mutated_arguments_come_back():
    solution = ("import collections\n"
                "def f(x):\n    return [x, (1, 2.5, None), {'k': {3, 4}}, b'\\x00\\xff', 1 + 2j, float('nan'), 10**40,"
                " frozenset({1}), collections.Counter('aab'), True]\n"
                "def grow(items):\n    items.append(len(items))\n"
                "def boom():\n    raise ValueError('no good')\n")
    tests = ("r = f('s')\n"
             "assert r[:5] == ['s', (1, 2.5, None), {'k': {3, 4}}, b'\\x00\\xff', 1 + 2j]\n"
             "assert type(r[1]) is tuple and r[5] != r[5] and r[6] == 10**40 and r[7] == frozenset({1})\n"
             "assert r[8] == {'a': 2, 'b': 1} and type(r[8]) is dict and r[9] is True\n"
             "xs = [7]\ngrow(xs)\nassert xs == [7, 1]\n"
             "try:\n    boom()\n    raise AssertionError('no exception')\nexcept ValueError as e:\n"
             "    assert str(e) == 'no good'\n")
    res = sandbox.run_untrusted(solution, tests=tests, entry_point="f")
    assert res.ok, res.error


def test_a_value_that_is_not_plain_data_is_an_opaque_handle():
    solution = ("class Box:\n    def __init__(self, v):\n        self.v = v\n    def get(self):\n        return self.v\n"
                "def make(v):\n    return Box(v)\n"
                "def unwrap(box):\n    return box.v * 2\n")
    ok = sandbox.run_untrusted(solution, tests="b = make(21)\nassert unwrap(b) == 42 and b.get() == 21\n"
                                               "assert b.v == 21 and b == b and b != make(21)\n")
    assert ok.ok, ok.error
    res = sandbox.run_untrusted(solution, tests="assert make(1) == 1\n")
    assert not res.ok and "assertion failed" in res.error


def test_hidden_tests_never_enter_the_candidates_sandbox():
    # The candidate lists everything it can see; the tests' unique marker must not be among it.
    marker = "HIDDEN_MARKER_4f1c9e"
    spy = CHEATS["reading the tests"].format(f="spy")
    res = sandbox.run_untrusted(spy + "\nprint(blob[-200000:])\n", tests=f"# {marker}\nassert spy(1) == 2\n")
    assert not res.ok
    assert marker not in res.stdout and marker not in res.stderr.split("tests.py")[0]


def test_a_verdict_costs_two_sandboxes_run_side_by_side():
    res = sandbox.run_untrusted(_honest("triple"), tests="assert triple(2) == 6\n", entry_point="triple")
    assert res.ok and res.duration < 10


CHEAT_ANY = CHEATS["an object equal to anything"]


def _rows(tmp: Path, benchmark: str) -> str:
    path = tmp / f"{benchmark}.jsonl"
    rows = []
    for i, (name, (body, cases)) in enumerate(FUNCS.items()):
        if benchmark == "humaneval":
            prompt = f'def {name}(x):\n    """Compute it.\n    """\n'
            test = "def check(candidate):\n" + "".join(f"    assert candidate({x}) == {y}\n" for x, y in cases)
            rows.append({"task_id": f"Unseen/{name}", "prompt": prompt, "entry_point": name, "test": test,
                         "canonical_solution": f"    return {body}\n"})
        else:
            rows.append({"task_id": 9100 + i, "prompt": f"Write a function {name} that works.",
                         "code": f"def {name}(x):\n    return {body}\n",
                         "test_list": [f"assert {name}({x}) == {y}" for x, y in cases]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


CODE_GEN = """flowchart TD
    PROBLEM(["Problem"])
    ENTRY_POINT(["Entry point"])
    G["CustomCodeGenerate<br/>(instruction: coder)"]
    RETURN(["Return"])
    class PROBLEM,ENTRY_POINT,RETURN Interface
    class G CustomCodeGenerateOp
    PROBLEM -->|problem| G
    ENTRY_POINT -->|entry_point| G
    G --> RETURN
%% @prompt coder: Write the function.
"""
WITH_TEST = CODE_GEN.replace("    G --> RETURN\n", "    T[\"Test\"]\n    class T TestOp\n    G -->|solution| T\n"
                             "    PROBLEM -->|problem| T\n    ENTRY_POINT -->|entry_point| T\n    T --> RETURN\n")


@pytest.mark.parametrize("benchmark", ["humaneval", "mbpp"])
def test_evaluate_end_to_end_scores_cheats_zero(benchmark, endpoint, capsys, tmp_path):
    wf = tmp_path / "gen.mmd"
    wf.write_text(CODE_GEN)
    rows = _rows(tmp_path, benchmark)
    for cheat, expected in ((CHEAT_ANY, 0.0), (CHEATS["forged report line on every descriptor"], 0.0),
                            (None, 1.0)):
        replies = {f"{n}": "```python\n" + (cheat.format(f=n) if cheat else _honest(n)) + "```" for n in FUNCS}
        endpoint(by_keyword(replies, "no idea"))
        code = main(["evaluate", str(wf), "--benchmark", benchmark, "--data", rows, "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        doc = json.loads(out)
        assert doc["n"] == 2 and doc["errors"] == 0 and doc["score"] == expected, doc


def test_the_test_operator_and_an_exported_module_see_through_a_cheat(endpoint, tmp_path):
    wf = tmp_path / "tested.mmd"
    wf.write_text(WITH_TEST)
    problem = 'def triple(x):\n    """Triple it.\n    >>> triple(2)\n    6\n    """\n'
    assert main(["compile", str(wf), "--task", "code", "-o", str(tmp_path / "tested.py")]) == 0
    for reply, fixes in ((CHEAT_ANY.format(f="triple"), 3), (_honest("triple"), 0)):
        srv = endpoint("```python\n" + reply + "```")
        # the runtime: the Test operator asks for a fix each time its verdict is "failed"
        proc = subprocess.run([sys.executable, "-m", "flowcore", "run", str(wf), "--task", "code", "--problem",
                               problem, "--entry-point", "triple", "--json"], capture_output=True, text=True,
                              cwd=ROOT, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["calls"] == 1 + fixes
        before = len(srv.requests)
        # the exported module runs the same operator on its pasted sandbox
        proc = subprocess.run([sys.executable, str(tmp_path / "tested.py"), "--entry-point", "triple", "--problem", problem],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert len(srv.requests) - before == 1 + fixes


_DRIVER = '''
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("sandbox", sys.argv[1])
sandbox = importlib.util.module_from_spec(spec)
sys.modules["sandbox"] = sandbox  # dataclasses look their module up
spec.loader.exec_module(sandbox)
for name, code, tests, entry in json.load(open(sys.argv[2])):
    res = sandbox.run_untrusted(code, tests=tests, entry_point=entry, timeout=5)
    print(json.dumps({"name": name, "ok": res.ok, "error": res.error}))
'''


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_every_cheat_fails_as_root_and_as_an_unprivileged_user(user):
    """The same cheats against a standalone copy of sandbox.py (what an exported module carries), from root and
    from uid 65534 with Debian's own Python, as the hostile table runs."""
    import os
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root (to act as both users)")
    setpriv, python = shutil.which("setpriv"), "/usr/bin/python3"
    if user == "nobody" and (setpriv is None or not os.access(python, os.X_OK)):
        pytest.skip("needs setpriv and /usr/bin/python3")
    work = Path(tempfile.mkdtemp(prefix="mermaidflow-verdict-"))  # not under pytest's 0700 tmp: uid 65534 reads it
    os.chmod(work, 0o755)
    shutil.copy(ROOT / "flowcore" / "execution" / "sandbox.py", work / "sandbox.py")
    (work / "driver.py").write_text(_DRIVER)
    he = "def check(candidate):\n    assert candidate(2) == 6\n    assert candidate(-1) == -3\n"
    cases = [[name, code.format(f="triple"), tests, entry] for name, code in CHEATS.items()
             for tests, entry in ((he, "triple"), ("assert triple(2) == 6\n", "triple"))]
    cases.append(["honest", _honest("triple"), he, "triple"])
    (work / "cases.json").write_text(json.dumps(cases))
    for f in work.iterdir():
        os.chmod(f, 0o644)
    cmd = [sys.executable, "driver.py", "sandbox.py", "cases.json"]
    if user == "nobody":
        cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", python, *cmd[1:]]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=600,
                          env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    shutil.rmtree(work, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == len(cases)
    assert [r["name"] for r in rows if r["ok"]] == ["honest"], rows
