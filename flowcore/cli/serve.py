"""``publish``, ``serve``, ``mcp`` and ``keys``: put a workflow to work (DESIGN §12)."""

from __future__ import annotations

import argparse
import gc
import logging
import math
import socket
import sys
from typing import Any

from flowcore.cli.common import CliError, JobFailed, emit, read_text

DEFAULT_PORT = 8700


def _db(args: argparse.Namespace) -> Any:
    from flowcore.workspace.store import Workspace

    ws = Workspace(args.db)  # None: $MERMAIDFLOW_DB, else workspace.db
    ws.check_usable()
    return ws


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got '{text}'") from None
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535, got {v}")
    return v


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got '{text}'") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text}")
    return v


def register(sub: Any) -> None:
    p = sub.add_parser("publish", help="publish a workflow as the next immutable version NAME@vN")
    p.add_argument("file")
    p.add_argument("--task", required=True, help="the task it is for (math, code, or a saved task's name)")
    p.add_argument("--name", required=True, help="the published name (NAME; each publish adds NAME@vN)")
    p.add_argument("--note", help="what changed, for the people who call it")
    p.add_argument("--run", type=int, help="the evolution run it came from (default: found by its text)")
    p.add_argument("--round", type=int, help="the round of --run it came from")
    p.add_argument("--db", help="workspace database (default: $MERMAIDFLOW_DB, else workspace.db)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_publish)

    s = sub.add_parser("serve", help="serve published workflows: OpenAI-compatible API and MCP")
    s.add_argument("--db", help="workspace database (default: $MERMAIDFLOW_DB, else workspace.db)")
    s.add_argument("--host", default="127.0.0.1",
                   help="bind address (default 127.0.0.1; any other address always requires API keys)")
    s.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    keyed = s.add_mutually_exclusive_group()
    keyed.add_argument("--require-key", action="store_true",
                       help="require an API key on every request (the default; kept for scripts)")
    keyed.add_argument("--no-keys", action="store_true",
                       help="loopback only: answer this machine's programs without a key. Never behind a reverse "
                       "proxy or tunnel: one that adds no X-Forwarded-For (nginx's default) looks local")
    s.add_argument("--timeout", type=_seconds, help="seconds a served workflow may run before a 504 (default 300)")
    s.add_argument("--max-body", type=int, default=1 << 20, help="largest request body in bytes (default 1 MiB)")
    s.add_argument("--http", choices=("auto", "httptools", "h11"), default="auto",
                   help="uvicorn's HTTP protocol (default auto: httptools when installed, else h11)")
    s.set_defaults(func=_cmd_serve)

    m = sub.add_parser("mcp", help="the MCP server over stdio (for coding agents)")
    m.add_argument("--db", help="workspace database (default: $MERMAIDFLOW_DB, else workspace.db)")
    m.set_defaults(func=_cmd_mcp)

    k = sub.add_parser("keys", help="API keys for the served workflows")
    ks = k.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    c = ks.add_parser("create", help="make a key (shown once; only its hash is stored)")
    c.add_argument("name")
    c.add_argument("--owner", help="who the key belongs to, e.g. an address (default: the key's NAME; never 'local', the "
                   "server's own operator)")
    lst = ks.add_parser("list", help="every key: id, name, owner, created, revoked, last used")
    lst.add_argument("--json", action="store_true")
    r = ks.add_parser("revoke", help="revoke a key by id, or by name when one active key has it")
    r.add_argument("key")
    for a in (c, lst, r):
        a.add_argument("--db", help="workspace database (default: $MERMAIDFLOW_DB, else workspace.db)")
    k.set_defaults(func=_cmd_keys)


def _cmd_publish(args: argparse.Namespace) -> int:
    from flowcore.serve.publish import describe, publish_workflow
    from flowcore.workspace.published import PublishError

    text = read_text(args.file)
    if (args.run is None) != (args.round is None):
        raise CliError("--run and --round go together")
    try:
        p = publish_workflow(_db(args), args.name, text, args.task, created_by="local", note=args.note,
                             run_id=args.run, rnd=args.round)
    except PublishError as exc:
        raise JobFailed(f"{args.file}: {exc}") from None
    if args.json:
        emit(describe(p))
    else:
        origin = f" from run {p.run_id} round {p.round}" if p.run_id is not None else ""
        print(f"published {p.model_id}{origin}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from flowcore.serve.app import create_app
    from flowcore.serve.engine import Engine
    from flowcore.serve.guard import is_loopback
    from flowcore.workspace import keys, published

    if args.max_body < 1024:
        raise CliError(f"--max-body must be at least 1024 bytes, got {args.max_body}")
    ws = _db(args)
    if args.no_keys and not is_loopback(args.host):
        raise CliError(f"--no-keys serves without API keys, which only a loopback address allows; {args.host} is "
                       "reachable from elsewhere")
    # Keys by default, on loopback too: a proxy or tunnel that adds no forwarding header (nginx's default
    # proxy_pass, socat, ssh -L) makes the world's requests look local, so keyless is an explicit opt-in.
    require = not args.no_keys
    app = create_app(Engine(ws, deadline=args.timeout, saved_ok=_saved_ok(args.host)), require_keys=require,
                     max_body=args.max_body, host=args.host, limits=_limits())
    n = len(published.model_ids(ws))
    active = [k for k in keys.list_keys(ws) if k.active]
    if require and not active:
        print("warning: API keys are required and the workspace has none: every request will be refused until "
              "'python -m flowcore keys create NAME' makes one (or serve with --no-keys to answer this machine's "
              "programs without a key)", file=sys.stderr)
    try:  # bound here, so --port 0 takes a free port with no race and the line below names it
        sock = socket.create_server((args.host, args.port), family=_family(args.host))
    except OSError as exc:
        raise CliError(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc})") from None
    port = sock.getsockname()[1]
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"serving {n} model id(s) from {ws.path} at http://{shown}:{port}/v1 and /mcp; API keys "
          f"{'required' if require else 'not required (--no-keys: loopback only)'}", file=sys.stderr, flush=True)
    for noisy in ("httpx", "httpx2", "mcp"):  # one line per LLM call otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from flowcore.serve import nodelay, slow

    slow.install()  # a request head that never ends closes its connection (slowloris)
    nodelay.install()  # small answers at once (uvicorn binds with IPPROTO_TCP here; a socket handed in may not)
    http = slow.protocol() if args.http == "auto" else args.http  # both are bounded by slow.install
    if http == "httptools" and slow.HttpToolsProtocol is None:
        raise CliError("--http httptools: the httptools package is not installed (pip install -r requirements.txt)")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=5,
                            http=http, h11_max_incomplete_event_size=slow.head_bytes())
    # What the imports and the app made (~150,000 objects) lives as long as the process: out of the collector's
    # sight, a full collection no longer stops the event loop for ~60 ms with every request waiting (GC time in
    # the serving benchmark: 0.33 ms per request before, 0.06 after).
    gc.collect()
    gc.freeze()
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _saved_ok(host: str) -> Any:
    """Whose saved LLM settings the served engine uses: the pages' rule (flowcore.ui.endpoints.shared). In a team
    deployment (bound beyond loopback, MERMAIDFLOW_LOGIN, MERMAIDFLOW_ADMINS or MERMAIDFLOW_MEMBERS set) only
    an admin's, so the server's OPENAI_API_KEY never goes to an endpoint a member saved; else everyone's."""
    import os

    from flowcore.ui import access

    env = os.environ
    team = access.login_required(host, env) or any((env.get(v) or "").strip()
                                                  for v in (access.ADMINS_ENV, access.MEMBERS_ENV))
    if not team:
        return None
    return lambda by: access.is_admin(access.parse_address(by), env)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _cmd_mcp(args: argparse.Namespace) -> int:
    from flowcore.serve.engine import Engine
    from flowcore.serve.mcp_tools import run_stdio

    run_stdio(Engine(_db(args), saved_ok=_saved_ok("127.0.0.1")), _limits())
    return 0


def _limits() -> Any:
    """The MCP tools' limits from the environment (flowcore.serve.limits); a bad setting is a CliError naming it."""
    from flowcore.serve.limits import Limits

    try:
        return Limits.from_env()
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _cmd_keys(args: argparse.Namespace) -> int:
    from flowcore.workspace import keys

    ws = _db(args)
    try:
        if args.keys_command == "create":
            rec, key = keys.create_key(ws, args.name, args.owner, created_by="local")
            print(key)
            print(f"key {rec.id} ({rec.name}, owner {rec.owner}): shown this once; only its hash is stored",
                  file=sys.stderr)
        elif args.keys_command == "revoke":
            rec = keys.revoke_key(ws, args.key)
            print(f"revoked key {rec.id} ({rec.name}, owner {rec.owner})")
        else:
            rows = [{"id": k.id, "name": k.name, "owner": k.owner, "created": k.created, "created_by": k.created_by,
                     "revoked": k.revoked, "last_used": k.last_used} for k in keys.list_keys(ws)]
            if args.json:
                emit({"keys": rows})
            for r in rows if not args.json else []:
                state = "revoked" if r["revoked"] else "active"
                print(f"{r['id']}  {state:7}  {r['name']}  owner {r['owner']}")
    except keys.KeyProblem as exc:
        raise JobFailed(str(exc)) from None
    return 0
