"""``python -m flowcore export``: the Export page's files from the command line — the standalone module
(.py), the canonical text (.mmd), the JSON description and the drawings (.svg, .png) — written to a folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from flowcore import catalogue as cat
from flowcore.cli.common import CliError, JobFailed, emit, load_workflow
from flowcore.workspace.files import write_file

FORMATS = ("py", "mmd", "json", "svg", "png")


def _formats(value: str) -> tuple[str, ...]:
    asked = tuple(dict.fromkeys(f.strip().lstrip(".").lower() for f in value.split(",") if f.strip()))
    bad = [f for f in asked if f not in FORMATS]
    if bad or not asked:
        raise argparse.ArgumentTypeError(f"unknown format(s) {', '.join(bad) or '(none)'}: choose from "
                                         f"{','.join(FORMATS)}")
    return asked


def _cmd_export(args: argparse.Namespace) -> int:
    from flowcore.execution.compiler import CompileError
    from flowcore.export.bundle import ExportError, export_bundle, file_stem

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CliError(f"{args.out}: is a file; --out names the folder the files go to")
    w = load_workflow(args.file, args.task)  # an invalid workflow exits 1 listing its diagnostics
    name = args.name or Path(args.file).stem
    try:
        files = export_bundle(w, task=args.task, name=name, images=bool({"svg", "png"} & set(args.formats)))
    except (CompileError, ExportError) as exc:
        raise JobFailed(f"{args.file}: {exc}") from None
    except RuntimeError as exc:  # MermaidRenderError: Mermaid cannot draw it (nothing is written)
        raise JobFailed(f"{args.file}: Mermaid cannot draw this workflow, so there is no .svg/.png ({exc}); "
                        "export the other formats with --formats py,mmd,json") from None
    wanted = {f"{file_stem(name)}.{f}" for f in args.formats}
    written = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for fname, data in files.items():
            if fname in wanted:
                target = out / fname
                write_file(target, data)
                written.append(str(target))
    except OSError as exc:
        raise CliError(f"{exc.filename or args.out}: cannot write ({exc.strerror or exc})") from None
    if args.json:
        emit({"files": written, "name": name, "task": args.task})
    else:
        print("\n".join(f"wrote {p}" for p in written))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a workflow's .py, .mmd, .json, .svg and .png (the Export page's "
                                      "files) to a folder")
    p.add_argument("file")
    p.add_argument("--task", choices=cat.TASKS)
    p.add_argument("--out", default=".", help="the folder to write to (default: the current one)")
    p.add_argument("--name", help="the file names' stem and the name in the JSON (default: the file's name)")
    p.add_argument("--formats", type=_formats, default=FORMATS, metavar="LIST",
                   help=f"comma-separated, any of {','.join(FORMATS)} (default: all)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_export)
