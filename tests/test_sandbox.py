"""flowcore.sandbox: generated code runs contained, and every containment is reported."""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from flowcore import sandbox
from flowcore.sandbox import OUTPUT_LIMIT, run_code, run_program, run_tests

HE_TESTS = '''
METADATA = {"author": "test"}


def check(candidate):
    assert candidate(1, 2) == 3
    assert candidate(-1, 1) == 0, "negative numbers"
'''
GOOD = "def add(a, b):\n    return a + b\n"
BAD = "def add(a, b):\n    return a * b\n"


def test_hello_world():
    r = run_code("print('hello, world')")
    assert r.ok and r.stdout == "hello, world\n" and r.returncode == 0
    assert r.error is None and r.blocked is None and not r.timed_out and r.duration < 5


def test_stdin_and_scratch_dir_are_private():
    code = ("import os\nopen('notes.txt', 'w').write(input())\nos.mkdir('sub')\n"
            "print(os.getcwd()); print(open('notes.txt').read()); print(sorted(os.environ))")
    r = run_code(code, stdin="from stdin\n")
    assert r.ok, r
    cwd, text, env = r.stdout.splitlines()
    assert text == "from stdin" and "mermaidflow-sandbox" in cwd
    assert not Path(cwd).exists()  # scratch dir removed afterwards
    assert "OPENAI_API_KEY" not in env and "HOME" in env


def test_solve_program_prints_its_result():
    r = run_program("import math\n\ndef solve():\n    return math.comb(10, 3) + 0.5\n")
    assert r.ok and r.stdout.strip() == "120.5"
    r = run_program("print('no solve here')\nif __name__ == '__main__':\n    print('main block')\n")
    assert r.ok and r.stdout == "no solve here\n"
    r = run_program("def solve():\n    return 1 / 0\n")
    assert not r.ok and r.error.startswith("ZeroDivisionError") and "program.py line 2" in r.error


def test_humaneval_style_pass_and_fail():
    assert run_tests(GOOD, HE_TESTS, "add").ok
    r = run_tests(BAD, HE_TESTS, "add")
    assert not r.ok
    assert r.error == "assertion failed: assert candidate(1, 2) == 3 (tests.py line 6)"
    r = run_tests("def add(a, b):\n    return a + b if a > 0 else 5\n", HE_TESTS, "add")
    assert "negative numbers" in r.error and "tests.py line 7" in r.error
    r = run_tests("def plus(a, b):\n    return a + b\n", HE_TESTS, "add")
    assert not r.ok and r.error == "the solution does not define 'add'"
    r = run_tests(GOOD, HE_TESTS)  # a check() that is never called must not pass
    assert not r.ok and "no entry point" in r.error
    assert run_tests(GOOD, []).error == "no tests given"


def test_mbpp_style_pass_and_fail():
    tests = ["assert add(2, 3) == 5", "assert add(0, 0) == 0", "assert add(-2, 2) == 0"]
    assert run_tests(GOOD, tests).ok
    assert run_tests(GOOD, "\n".join(tests)).ok
    r = run_tests(BAD, tests)
    assert not r.ok and r.error == "assertion failed: assert add(2, 3) == 5 (tests.py line 1)"
    r = run_tests("def add(a, b):\n    return undefined_name\n", tests)
    assert r.error == "NameError: name 'undefined_name' is not defined (solution.py line 2)"


def test_exiting_early_does_not_pass_the_tests():
    for escape in ("import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit"):
        r = run_tests(escape + "\n" + GOOD, ["assert add(1, 1) == 3"])
        assert not r.ok, escape
        assert r.returncode == 0 and r.error == "the code exited before the tests finished"


def test_infinite_loop_is_killed_near_the_timeout():
    start = time.monotonic()
    r = run_code("while True:\n    pass\n", timeout=1.0)
    elapsed = time.monotonic() - start
    assert r.timed_out and not r.ok and r.error == "timed out after 1s"
    assert 1.0 <= elapsed < 3.0


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def test_fork_loop_is_contained_and_reported():
    r = run_code("import os\nwhile True:\n    os.fork()\n", timeout=3)
    assert not r.ok and r.blocked == "process creation" and r.error == "blocked: process creation"
    # Swallowing the refusal does not help: still reported, and the loop ends at the timeout.
    r = run_code("import os, subprocess\nprint(os.getcwd(), flush=True)\nwhile True:\n    try:\n"
                 "        os.fork()\n    except OSError:\n        pass\n    try:\n"
                 "        subprocess.run(['sh', '-c', 'sleep 100 &'])\n    except OSError:\n        pass\n",
                 timeout=1)
    assert r.timed_out and r.blocked == "process creation"
    assert _processes_mentioning(r.stdout.strip()) == []  # nothing of that run is left behind
    for code in ("import os\nos.system('true')", "import subprocess\nsubprocess.run(['true'])",
                 "import multiprocessing\nmultiprocessing.Process(target=print).start()"):
        assert run_code(code).blocked == "process creation", code
    assert run_code("print(1 + 1)").stdout == "2\n"  # and the machine still runs code


def test_native_code_is_refused():
    r = run_code("import ctypes\nlibc = ctypes.CDLL(None)\nwhile True:\n    libc.fork()\n", timeout=3)
    assert r.blocked == "native library loading (ctypes)" and not r.timed_out


def test_4gb_allocation_is_reported_as_memory_exceeded():
    r = run_code("data = bytearray(4 * 1024 ** 3)\nprint('allocated')\n", memory_mb=512)
    assert not r.ok and r.memory_exceeded and r.error == "memory limit 512 MB exceeded"
    assert "allocated" not in r.stdout and "MemoryError" in r.stderr
    r = run_code("chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024 ** 2))\n", memory_mb=256)
    assert r.memory_exceeded and not r.timed_out


def test_write_outside_scratch_is_blocked():
    target = Path("/tmp") / f"mermaidflow-outside-{uuid.uuid4().hex}"
    r = run_code(f"with open({str(target)!r}, 'w') as f:\n    f.write('escaped')\n")
    assert not r.ok and r.blocked == f"write outside scratch dir: {target}"
    assert not target.exists()
    # Caught by the code, through os.open, or through a symlink: still blocked and reported.
    code = (f"import os\ntry:\n    os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)\n"
            f"except OSError:\n    pass\nos.symlink({str(target)!r}, 'link')\nopen('link', 'w').write('x')\n")
    r = run_code(code)
    assert r.blocked == f"write outside scratch dir: {target}" and not r.ok
    assert not target.exists()
    victim = Path("/tmp") / f"mermaidflow-victim-{uuid.uuid4().hex}"
    victim.write_text("keep me")
    try:
        r = run_code(f"import os\nos.remove({str(victim)!r})\n")
        assert r.blocked.startswith("change outside scratch dir: os.remove")
        assert victim.read_text() == "keep me"
    finally:
        victim.unlink()


def test_network_connect_is_blocked():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        r = run_code(f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))\ns.send(b'hi')\n")
        assert not r.ok and r.blocked == "network"
        with pytest.raises(BlockingIOError):
            listener.accept()  # no connection ever arrived
        r = run_code("import urllib.request\ntry:\n    urllib.request.urlopen('http://example.com', "
                     "timeout=1)\nexcept Exception as e:\n    print(type(e).__name__)\n")
        assert r.blocked == "network" and not r.ok
    finally:
        listener.close()


def test_syntax_error_is_reported():
    r = run_code("def broken(:\n    return 1\n")
    assert not r.ok and r.error == "SyntaxError: invalid syntax (main.py line 1)"
    r = run_tests("def add(a, b)\n    return a + b\n", ["assert add(1, 2) == 3"])
    assert r.error.startswith("SyntaxError") and "solution.py line 1" in r.error


def test_output_is_truncated_and_bad_input_never_raises():
    r = run_code("import sys\nsys.stdout.write('x' * 300000)\n")
    assert r.ok and len(r.stdout) < OUTPUT_LIMIT + 200 and "output truncated: 300000 bytes" in r.stdout
    assert run_code(None).error == "main.py: expected source text, got NoneType"  # type: ignore[arg-type]
    assert run_code("import sys\nsys.exit(3)").error == "exit code 3"
    assert run_code("print(1)", timeout="soon").error.startswith("bad sandbox limits")  # type: ignore[arg-type]


@pytest.mark.skipif(os.geteuid() != 0, reason="uid drop, NPROC and network namespace need root")
def test_root_layers_drop_privileges_and_network():
    code = ("import os, resource\nprint(os.getuid(), os.getgid())\n"
            "print(resource.getrlimit(resource.RLIMIT_NPROC)[0])\n"
            "print([l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]])\n"
            "import sympy\nprint(sympy.sqrt(8))\n")
    r = run_code(code, timeout=20)
    assert r.ok, r
    ids, nproc, ifaces, sym = r.stdout.splitlines()
    uid, gid = map(int, ids.split())
    assert uid != 0 and gid != 0 and int(nproc) > 0
    assert ifaces == "['lo']"  # its own network namespace
    assert sym == "2*sqrt(2)"  # still able to import from a root-only interpreter directory


def test_without_root_the_audit_layer_still_contains(monkeypatch):
    monkeypatch.setattr(sandbox, "_privileged", lambda: False)
    target = Path("/tmp") / f"mermaidflow-outside-{uuid.uuid4().hex}"
    assert run_code(f"open({str(target)!r}, 'w')").blocked == f"write outside scratch dir: {target}"
    assert not target.exists()
    assert run_code("import os\nos.fork()").blocked == "process creation"
    assert run_code("import socket\nsocket.create_connection(('127.0.0.1', 9))").blocked == "network"
    assert run_code("while True:\n    pass\n", timeout=0.5).timed_out
    assert run_code("bytearray(4 * 1024 ** 3)").memory_exceeded
    assert run_tests(GOOD, HE_TESTS, "add").ok


def test_a_solution_defining_its_own_check_is_not_called_as_the_test_harness():
    # MBPP/56 names its function `check`; only a check() defined by the tests is the HumanEval harness.
    solution = "def check(n):\n    return n == int(str(n)[::-1]) * 2 - 1\n"
    res = run_tests(solution, "assert check(70) == False\nassert check(73) == True\n", "check", timeout=10)
    assert res.ok, res.error
    res = run_tests(solution, "assert check(70) == True\n", "check", timeout=10)
    assert not res.ok
