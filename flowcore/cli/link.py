"""``python -m flowcore link``: a Studio link that opens a workflow file in the Editor (the same link the
pages keep in the address bar), and back: the workflow a copied link holds."""

from __future__ import annotations

import argparse
import sys
from urllib.parse import parse_qsl, urlencode, urlsplit

from flowcore import catalogue as cat
from flowcore.cli.common import CliError, JobFailed, emit, read_text
from flowcore.workspace import drafts
from flowcore.workspace.store import Workspace

DEFAULT_BASE = "http://127.0.0.1:8501"


def studio_link(text: str, task: str, name: str, base: str = DEFAULT_BASE, page: str = "editor") -> str:
    """A link carrying the whole text (any length: a link is not limited like the address bar the pages
    write to, where a long text stays in the browser's draft row instead)."""
    params = {"wf": name, "task": task, "code": drafts.encode_text(text)}
    return f"{base.rstrip('/')}/{page}?{urlencode(params)}"


def check_base(base: str) -> str:
    """The Studio's address as given, without a trailing '/'; ValueError when a browser could not open a
    link built on it (no http(s) scheme or no host: '127.0.0.1:8501' alone opens nothing)."""
    base = base.strip().rstrip("/")
    try:
        parts = urlsplit(base)
        parts.port  # noqa: B018 - raises ValueError when out of range
    except ValueError as e:
        raise ValueError(f"--base {base!r} is not a valid URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"--base {base!r} must be where the Studio runs, such as {DEFAULT_BASE}")
    return base


def workflow_of_link(url: str, ws: Workspace | None = None) -> drafts.OpenWorkflow:
    """The workflow a Studio link opens; DraftError naming the bad parameter."""
    params = dict(parse_qsl(urlsplit(url).query))
    wf = drafts.from_params(ws or Workspace(":memory:"), params)
    if wf is None:
        raise drafts.DraftError("the link names no workflow (no 'wf' or 'code' parameter)")
    return wf


def _cmd_link(args: argparse.Namespace) -> int:
    if args.decode:
        try:
            wf = workflow_of_link(args.target)
        except drafts.DraftError as e:
            raise JobFailed(str(e)) from None
        if args.json:
            emit({"name": wf.name, "task": wf.task, "version": wf.version, "text": wf.text})
        else:
            sys.stdout.write(wf.text)
        return 0
    try:
        base = check_base(args.base)
    except ValueError as e:
        raise CliError(str(e)) from None
    text = read_text(args.target)
    if not text.strip():
        raise CliError(f"{args.target}: the file is empty")
    name = args.name or args.target.rsplit("/", 1)[-1].removesuffix(".mmd") or "workflow"
    link = studio_link(text, args.task, name[:80], base)
    if args.json:
        emit({"link": link, "name": name, "task": args.task})
    else:
        print(link)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("link", help="a Studio link that opens a workflow file in the Editor (or --decode one)")
    p.add_argument("target", help="a .mmd file, or with --decode a link copied from the Studio")
    p.add_argument("--task", choices=cat.TASKS, default="math")
    p.add_argument("--name", help="the workflow's name in the Studio (default: the file name)")
    p.add_argument("--base", default=DEFAULT_BASE, help=f"where the Studio runs (default {DEFAULT_BASE})")
    p.add_argument("--decode", action="store_true", help="print the workflow a Studio link holds")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_link)
