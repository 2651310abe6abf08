"""The ``cookbook`` command. Each subcommand lives in the module of its concern, which exposes
``register(subparsers)``; the parser it adds sets ``func`` to a callable taking the parsed args and
returning the exit code."""
from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand modules, in the order shown by --help
MODULES = ("cookbook.launch", "cookbook.dsconfig", "cookbook.lint", "cookbook.memory", "cookbook.env",
           "cookbook.nvme", "cookbook.runall", "cookbook.checkpoint")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cookbook", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from .plan import PlanError
    try:
        return int(args.func(args) or 0)
    except PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
