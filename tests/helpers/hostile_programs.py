"""Hostile programs against flowcore's sandbox, as a table: each attack and the refusal expected of it.

This file is also the "app" the attacks aim at. Run as a script (by tests/execution/test_sandbox_hostile.py, as root and,
through ``setpriv``, as an unprivileged user, with nothing but the stdlib and a copy of flowcore/sandbox.py),
it plants what an attacker wants -- a 0600 secret in a 0700 folder, a workspace database with rows, a fake
OPENAI_API_KEY in its own environment, listening sockets on 127.0.0.1 (TCP, UDP, a unix socket, an abstract
one) -- runs every attack in the sandbox, and prints one JSON record per attack: the sandbox's result and
what the attack did to the app (rows left, secret unchanged, connections received, processes left behind).
"""

from __future__ import annotations

import json
import os
import random
import socket
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass

SECRET = "TOP-SECRET-7f3a9c"  # the content of the 0600 file
FAKE_KEY = "sk-test-hostile-9d2e41"  # OPENAI_API_KEY in the app's environment


@dataclass(frozen=True)
class Attack:
    name: str
    code: str  # str.format fields: {secret_file} {secret_dir} {db} {ppid} {tcp} {udp} {unix} {abstract} {marker}
    #            {keyname} (a key holding SECRET in the app's session keyring)
    refusal: str  # what must happen instead (the test checks it)
    timeout: float = 3.0
    tests: str | None = None  # judged as an answer: these hidden tests call ``entry_point`` (the verdict path)
    entry_point: str | None = None


ATTACKS = [
    Attack("read /etc/shadow", "print(open('/etc/shadow').read())",
           "FileNotFoundError: the sandbox has no /etc/shadow"),
    Attack("list /root", "import os\nprint(os.listdir('/root'))",
           "FileNotFoundError: no /root in the sandbox"),
    Attack("read the workspace DB", "print(open({db!r}, 'rb').read())",
           "FileNotFoundError: the workspace is not mounted"),
    Attack("read a 0600 file in a 0700 dir", "print(open({secret_file!r}).read())",
           "FileNotFoundError: the folder is not mounted"),
    Attack("list the secret's folder", "import os\nprint(os.listdir({secret_dir!r}))",
           "FileNotFoundError: the folder is not mounted"),
    Attack("/proc/<parent>/environ", (
        "import os\n"
        "try:\n    print(open('/proc/{ppid}/environ').read())\nexcept OSError as e:\n    print('parent:', e)\n"
        "for pid in os.listdir('/proc'):\n"
        "    if pid.isdigit():\n"
        "        try:\n            print(pid, open(f'/proc/{{pid}}/environ').read())\n"
        "        except OSError as e:\n            print(pid, e)\n"
        "print(dict(os.environ))\n"),
           "runs, but the key is in no environment it can see (parent not in its PID namespace)"),
    Attack("TCP to 127.0.0.1", (
        "import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {tcp}))\n"
        "s.sendall(b'stolen')\n"),
           "ConnectionRefusedError: its own network namespace; the app's listener gets nothing"),
    Attack("UDP to 127.0.0.1", (
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "for _ in range(3):\n    s.sendto(b'stolen', ('127.0.0.1', {udp}))\nprint('sent')\n"),
           "datagrams go to the sandbox's own loopback; the app's socket receives nothing"),
    Attack("unix socket of the app", (
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({unix!r})\ns.sendall(b'stolen')\n"),
           "FileNotFoundError: the socket's folder is not mounted"),
    Attack("abstract unix socket", (
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('\\0' + {abstract!r})\n"
        "s.sendall(b'stolen')\n"),
           "ConnectionRefusedError: abstract sockets belong to the network namespace"),
    Attack("DNS / the internet", (
        "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=2)\n"),
           "URLError: no network at all"),
    Attack("fork bomb", (
        "import os\nn = 0\nwhile True:\n    try:\n        if os.fork() == 0:\n"
        "            os.execv('/usr/bin/sleep', ['sleep', '{marker}'])\n        n += 1\n"
        "    except OSError as e:\n        print('refused after', n, e, flush=True)\n        break\n"
        "while True:\n    pass\n"), "BlockingIOError after ~64 processes; all killed at the timeout, none left",
           timeout=2.0),
    Attack("memory bomb", "x = []\nwhile True:\n    x.append(bytearray(64 * 1024 * 1024))\n",
           "MemoryError at the address-space limit", timeout=10.0),
    Attack("2 GB to scratch", (
        "import os\nfor i in range(64):\n    with open(f'/tmp/fill{{i}}', 'wb') as f:\n"
        "        for _ in range(32):\n            f.write(b'x' * (1 << 20))\n"),
           "OSError ENOSPC (the scratch tmpfs holds 64 MB) or EFBIG; nothing reaches the host's disk",
           timeout=10.0),
    Attack("setsid child outliving the timeout", (
        "import subprocess\nsubprocess.Popen(['/usr/bin/setsid', '/usr/bin/sleep', '{marker}'],\n"
        "                 start_new_session=True)\nprint('spawned', flush=True)\nwhile True:\n    pass\n"),
           "timed out; the PID namespace dies with the sandbox: no sleep left on the host", timeout=1.5),
    Attack("signal the parent", (
        "import os, signal\nfor pid in ({ppid}, os.getppid(), 1):\n    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n        print('sent to', pid, flush=True)\n"
        "    except OSError as e:\n        print(pid, e, flush=True)\nos.kill(-1, signal.SIGKILL)\n"),
           "the app is not in its PID namespace (ESRCH); its parent is the sandbox's own init; kill(-1) "
           "reaches nothing outside"),
    Attack("ctypes: kill, setuid, mount, unshare, ptrace", (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nres = {{}}\n"
        "def call(name, *args):\n    r = getattr(libc, name)(*args)\n    res[name] = (r, ctypes.get_errno())\n"
        "call('kill', {ppid}, 9)\ncall('setuid', 0)\ncall('mount', b'none', b'/usr', b'tmpfs', 0, None)\n"
        "call('ptrace', 16, {ppid}, None, None)\ncall('chroot', b'/tmp')\n"
        "call('unshare', 0x40000000)\ncall('sethostname', b'x', 1)\n"
        "print(res)\nassert all(r == -1 for r, _ in res.values()), res\n"),
           "every call returns -1 (EPERM/ESRCH): no capabilities, the app's pid does not exist there"),
    Attack("writes outside scratch", (
        "import os\nres = {{}}\nfor p in ['/usr/x', '/x', '/etc/x', '/dev/x', '/sbx/x', '/proc/x', {db!r},\n"
        "          {secret_file!r}, '/root/x', os.__file__]:\n"
        "    try:\n        open(p, 'a').write('pwned')\n        res[p] = 'WROTE'\n"
        "    except OSError as e:\n        res[p] = e.errno\nprint(res)\n"
        "assert 'WROTE' not in res.values(), res\n"),
           "every open fails (EROFS/ENOENT): only /tmp is writable"),
    Attack("sqlite3 on the workspace", (
        "import sqlite3\ncon = sqlite3.connect({db!r})\ncon.execute('DELETE FROM evo_rounds')\ncon.commit()\n"),
           "sqlite3.OperationalError: unable to open database file; the rows stay"),
    Attack("the old audit-hook bypass", (
        "import sys, subprocess, socket\n"
        "try:\n    sys.modules['__main__'].busy.append(1)\nexcept Exception as e:\n    print('no hook:', e)\n"
        "print(subprocess.run(['/usr/bin/cat', '/etc/shadow', {secret_file!r}], capture_output=True,"
        " text=True))\n"
        "s = socket.socket()\ns.settimeout(2)\nprint(s.connect_ex(('127.0.0.1', {tcp})))\n"
        "open({db!r}, 'w')\n"),
           "nothing to bypass: the process runs, cat finds no file, connect is refused, the DB is absent"),
    Attack("secret in an exception message", (
        "got = []\nfor path in ({secret_file!r}, {db!r}, '/proc/{ppid}/environ', '/proc/1/environ'):\n"
        "    try:\n        got.append(open(path, 'rb').read())\n    except OSError as e:\n"
        "        got.append(str(e))\nraise RuntimeError('leak: ' + repr(got))\n"),
           "RuntimeError whose text holds no secret: nothing secret can be read"),
    # -- the kernel surface: namespaces, keyrings, io_uring and the rest (#17), each by the call it names ---------
    Attack("unshare(CLONE_NEWUSER)", (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "r = libc.unshare(0x10000000)\nprint(r, ctypes.get_errno())\nassert r == -1, 'a nested user namespace'\n"),
           "-1 EPERM: no nested user namespace (--disable-userns, and seccomp denies unshare)"),
    Attack("unshare(CLONE_NEWUSER|CLONE_NEWNS), uid_map, a 300 MB tmpfs", (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "r = libc.unshare(0x10000000 | 0x00020000)\nprint('unshare', r, ctypes.get_errno(), flush=True)\n"
        "if r == 0:\n    open('/proc/self/uid_map', 'w').write('0 65534 1')\n"
        "    os.makedirs('/tmp/big', exist_ok=True)\n"
        "    libc.mount(b'none', b'/tmp/big', b'tmpfs', 0, b'size=4g')\n"
        "    with open('/tmp/big/fill', 'wb') as f:\n        for _ in range(300):\n"
        "            f.write(b'x' * (1 << 20))\n    print('WROTE 300 MB')\n"),
           "unshare -1 EPERM: no namespace of its own, no tmpfs past the scratch cap"),
    Attack("clone(CLONE_NEWUSER)", (
        "import ctypes, os, platform\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "nr = {{'x86_64': 56, 'aarch64': 220}}[platform.machine()]\n"
        "r = libc.syscall(nr, ctypes.c_long(0x10000000 | 17), 0, 0, 0, 0)\n"
        "if r == 0:\n    os._exit(0)\nprint(r, ctypes.get_errno())\nassert r == -1, 'cloned into a user namespace'\n"),
           "-1 EPERM: seccomp refuses clone with any CLONE_NEW* flag"),
    Attack("clone3(CLONE_NEWUSER)", (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "args = (ctypes.c_uint64 * 11)(0x10000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)\n"
        "r = libc.syscall(435, ctypes.byref(args), ctypes.c_size_t(88))\n"
        "if r == 0:\n    os._exit(0)\nprint(r, ctypes.get_errno())\nassert r == -1, 'clone3 made a user namespace'\n"),
           "-1 ENOSYS: clone3 is refused outright (its flags are out of a filter's sight)"),
    Attack("the host's session keyring", (
        "import ctypes, platform\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "nr = {{'x86_64': (249, 250), 'aarch64': (218, 219)}}[platform.machine()]\n"
        "key = libc.syscall(nr[0], b'user', b'{keyname}', None, 0)\nprint('request_key', key, ctypes.get_errno())\n"
        "buf = ctypes.create_string_buffer(256)\n"
        "for k in (key, -3, -2):  # the key found, the session keyring, the process keyring\n"
        "    n = libc.syscall(nr[1], 11, ctypes.c_long(k), buf, 256)\n"
        "    print('read', k, n, ctypes.get_errno(), buf.raw[:max(n, 0)])\n"),
           "request_key and keyctl -1 EPERM: seccomp denies the keyring calls; the secret is not read"),
    Attack("io_uring, bpf, perf_event_open, userfaultfd, ptrace, personality", (
        "import ctypes, platform\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "nrs = {{'x86_64': dict(io_uring_setup=425, bpf=321, perf_event_open=298, userfaultfd=323, ptrace=101,"
        " personality=135, mount=165),\n"
        "       'aarch64': dict(io_uring_setup=425, bpf=280, perf_event_open=241, userfaultfd=282, ptrace=117,"
        " personality=92, mount=40)}}[platform.machine()]\n"
        "params = ctypes.create_string_buffer(120)\n"
        "args = dict(io_uring_setup=(1, params), bpf=(0, params, 48), perf_event_open=(params, 0, -1, -1, 0),"
        " userfaultfd=(0,), ptrace=(0, 0, 0, 0), personality=(0x0040000,),"
        " mount=(b'none', b'/tmp', b'tmpfs', 0, None))\n"
        "res = {{n: (libc.syscall(nrs[n], *args[n]), ctypes.get_errno()) for n in nrs}}\nprint(res)\n"
        "assert all(r == -1 and e == 1 for r, e in res.values()), res\n"),
           "each -1 EPERM, from the seccomp filter"),
    Attack("/proc is read-only", (
        "res = {{}}\nfor p in ['/proc/self/comm', '/proc/self/oom_score_adj', '/proc/sys/kernel/hostname',"
        " '/proc/self/attr/current']:\n"
        "    try:\n        open(p, 'w').write('1')\n        res[p] = 'WROTE'\n"
        "    except OSError as e:\n        res[p] = e.errno\nprint(res)\nassert 'WROTE' not in res.values(), res\n"),
           "every write fails (EROFS): /proc is mounted read-only"),
    Attack("10 forked children of 400 MB each", (
        "import os, time\nkids = []\nfor i in range(10):\n    try:\n        pid = os.fork()\n"
        "    except OSError as e:\n        print('fork refused after', i, e, flush=True)\n        break\n"
        "    if pid == 0:\n        b = bytearray(400 << 20)\n        for j in range(0, len(b), 4096):\n"
        "            b[j] = 1\n        time.sleep(2)\n        os._exit(0)\n    kids.append(pid)\n"
        "print([os.waitpid(k, 0)[1] for k in kids], flush=True)\n"), "root: the run's cgroup holds all of "
           "them to 512 MB (the OOM killer ends the excess); unprivileged: the fallback refuses the first fork",
           timeout=15.0),
    # -- memory that no address-space limit counts (the fallback's whole budget is RLIMIT_AS) ----------------------
    Attack("1.3 GB in memfds filled with write()", (
        "import os\nheld = 0\ntry:\n    for i in range(40):\n        fd = os.memfd_create(f'x{{i}}')\n"
        "        for _ in range(32):\n            os.write(fd, b'x' * (1 << 20))\n        held += 32\n"
        "except OSError as e:\n    print('refused', e.errno, flush=True)\nprint('held', held)\n"),
           "memfd_create -1 EPERM (seccomp): nothing held outside the run's budget (was 1,280 MB held beside a 512 MB "
           "budget as an ordinary user)"),
    Attack("1.2 GB in SysV shared memory, attached and detached", (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\n"
        "held = 0\nfor i in range(6):\n    sid = libc.shmget(0, ctypes.c_size_t(200 << 20), 0o1600)\n"
        "    if sid < 0:\n        print('refused', ctypes.get_errno(), flush=True)\n        break\n"
        "    addr = libc.shmat(sid, None, 0)\n    ctypes.memset(addr, 1, 200 << 20)\n"
        "    libc.shmdt(ctypes.c_void_p(addr))\n    held += 200\nprint('held', held)\n"),
           "shmget -1 EPERM (seccomp): no segment (was 1,200 MB held beside a 512 MB budget as an ordinary user)"),
    # -- the verdict (#25): an answer that starves itself to be recorded "errored" instead of wrong ---------------
    Attack("a HumanEval answer forking 60 spinning children", (
        "import os, sys\n"
        "def add(a, b):\n    for _ in range(60):\n        if os.fork() == 0:\n"
        "            os.execv(sys.executable, [sys.executable, '-S', '-c', 'while True: pass', '{marker}'])\n"
        "    while True:\n        pass\n"),
           "root: the run's cgroup gives all of them one CPU and no load credit: timed out (a wrong answer, not "
           "errored), one core busy, none left; unprivileged: the fallback refuses the first fork (wrong)",
           timeout=2.0, tests="def check(candidate):\n    assert candidate(1, 2) == 3\n", entry_point="add"),
]


# -- the app side: plant, attack, look ---------------------------------------------------------------------

def _marker() -> str:
    return f"{random.randint(100000, 999999)}.{random.randint(1000, 9999)}"  # a sleep length no one else uses


def _processes_with(text: str) -> int:
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                n += text.encode() in f.read()
        except OSError:
            continue
    return n


def _drain(listener: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            if listener.type == socket.SOCK_DGRAM:
                got.append(listener.recv(4096))
            else:
                conn, _ = listener.accept()
                conn.settimeout(0.5)
                got.append(b"connection:" + conn.recv(4096))
                conn.close()
        except (BlockingIOError, TimeoutError):
            return got


def _plant_key(name: str) -> None:
    """Put SECRET in this process's session keyring (what the sandboxed code must not read)."""
    import ctypes
    import platform

    libc = ctypes.CDLL(None, use_errno=True)
    add_key = {"x86_64": 248, "aarch64": 217}[platform.machine()]
    session = -3  # KEY_SPEC_SESSION_KEYRING
    if libc.syscall(add_key, b"user", name.encode(), SECRET.encode(), len(SECRET), session) < 0:
        raise OSError(ctypes.get_errno(), "add_key failed: the keyring attack would test nothing")


def main(argv: list[str]) -> int:
    import importlib.util

    spec = importlib.util.spec_from_file_location("sandbox_under_test", argv[1])
    sandbox = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sandbox)
    only = set(argv[2:])
    os.environ["OPENAI_API_KEY"] = FAKE_KEY  # the app's environment holds a key
    home = tempfile.mkdtemp(prefix="mermaidflow-victim-")  # 0700
    secret_file = os.path.join(home, "secret.txt")
    with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(SECRET)
    keyname = f"mermaidflow-test-{os.getpid()}"
    _plant_key(keyname)
    db = os.path.join(home, "workspace.db")
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE evo_rounds (run_id INTEGER, round INTEGER, note TEXT)")
    con.executemany("INSERT INTO evo_rounds VALUES (1, ?, ?)", [(i, SECRET) for i in range(5)])
    con.commit()
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix_path = os.path.join(home, "app.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    unix.listen(8)
    abstract = f"mermaidflow-test-{os.getpid()}-{random.randint(0, 1 << 30)}"
    abst = socket.socket(socket.AF_UNIX)
    abst.bind("\0" + abstract)
    abst.listen(8)
    listeners = (tcp, udp, unix, abst)
    for s in listeners:
        s.setblocking(False)
    try:
        for attack in ATTACKS:
            if only and attack.name not in only:
                continue
            marker = _marker()
            code = attack.code.format(secret_file=secret_file, secret_dir=home, db=db, ppid=os.getpid(),
                                      tcp=tcp.getsockname()[1], udp=udp.getsockname()[1], unix=unix_path,
                                      abstract=abstract, marker=marker, keyname=keyname)
            start = time.monotonic()
            res = sandbox.run_untrusted(code, timeout=attack.timeout, tests=attack.tests,
                                        entry_point=attack.entry_point)
            elapsed = time.monotonic() - start
            time.sleep(0.05)
            rows = sqlite3.connect(db).execute("SELECT count(*) FROM evo_rounds").fetchone()[0]
            with open(secret_file) as f:
                secret_kept = f.read() == SECRET
            received = [repr(x) for s in listeners for x in _drain(s)]
            print(json.dumps({
                "name": attack.name, "ok": res.ok, "error": res.error, "stdout": res.stdout[-4000:],
                "stderr": res.stderr[-4000:], "returncode": res.returncode, "timed_out": res.timed_out,
                "memory_exceeded": res.memory_exceeded, "elapsed": round(elapsed, 3), "rows": rows,
                "overloaded": res.overloaded, "cpu_time": res.cpu_time, "cpu_quota": sandbox.CPU_QUOTA,
                "secret_kept": secret_kept, "received": received, "left_behind": _processes_with(marker),
                "uid": os.getuid(), "key_in_env": os.environ.get("OPENAI_API_KEY") == FAKE_KEY,
            }), flush=True)
    finally:
        for s in listeners:
            s.close()
        for name in os.listdir(home):
            os.unlink(os.path.join(home, name))
        os.rmdir(home)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
