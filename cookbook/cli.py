"""The ``cookbook`` command. Each subcommand lives in the module of its concern, which exposes
``register(subparsers)``; the parser it adds sets ``func`` to a callable taking the parsed args and
returning the exit code."""
from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand modules, in the order shown by --help
MODULES = ("cookbook.launch", "cookbook.procs", "cookbook.dsconfig", "cookbook.lint", "cookbook.memory",
           "cookbook.env", "cookbook.runall", "cookbook.checkpoint")


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
    for sub_parser in sub.choices.values():
        sub_parser.set_defaults(_parser=sub_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from .plan import PlanError, option_names, typed_options, user_message
    # the flags as the user typed them: refusals name them (--num-processes 0, not num_gpus=0), and a
    # typed option is told apart from a default (a config value may override only a default)
    sub_parser = getattr(args, "_parser", None)
    if sub_parser is not None:
        tail = argv[argv.index(args.command) + 1:] if args.command in argv else argv
        args._typed = typed_options(sub_parser, tail)
        args._names = option_names(sub_parser, tail)
    try:
        return int(args.func(args) or 0)
    except PlanError as exc:
        print(f"error: {user_message(exc, args)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
