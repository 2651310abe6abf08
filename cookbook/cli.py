"""The ``cookbook`` command. Each subcommand lives in the module of its concern, which exposes
``register(subparsers)``; the parser it adds sets ``func`` to a callable taking the parsed args and
returning the exit code."""
from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand modules, in the order shown by --help
MODULES = ("cookbook.launch", "cookbook.procs", "cookbook.dsconfig", "cookbook.lint", "cookbook.memory",
           "cookbook.env", "cookbook.nvme", "cookbook.runall", "cookbook.checkpoint")


#: What ``cookbook --help`` says first: for users, not for developers.
DESCRIPTION = ("Full fine-tunes of 7B-14B language models with DeepSpeed ZeRO (stage 2 -> 3 -> CPU/NVMe offload) "
               "through Hugging Face Accelerate: check the machine, find the ZeRO variant that fits, write or check "
               "a DeepSpeed config, and train with honest results. Nothing is downloaded; without a GPU everything "
               "runs as a CPU rehearsal with tiny models of the same architectures.")
EPILOG = """the usual path to a real run:
  cookbook env --model qwen-14b --gpus 8 --zero-stage 3 --offload-optimizer cpu   # this machine's traps
  cookbook estimate qwen-14b --gpus 8 --gpu-memory-gib 24 --host-memory-gib 512 \\
      --seq-len 512 --micro-batch 1 --grad-accum 16 --sweep                     # which ZeRO variant fits
  hf download Qwen/Qwen1.5-14B --local-dir ./models/Qwen1.5-14B                  # the weights
  cookbook train notebooks/qwen14b-8x4090.yaml --dry-run                         # check the whole run
  cookbook train notebooks/qwen14b-8x4090.yaml                                   # train

`cookbook COMMAND --help` explains each command; the notebooks (cookbook run-all) tell the story."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser with a short error: the message (it names the flag, the value and the choices) and
    where the help is, instead of the whole usage block, which for ``cookbook train`` runs to ~40 lines and
    buries the one line that matters. Exit status 2, as argparse's."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n(`{self.prog} --help` for the usage)\n")


def _unknown_flags(parser: argparse.ArgumentParser, unknown: list[str]) -> None:
    """Exit 2 with argparse's "unrecognized arguments" line from ``parser`` (the command's), each unknown flag
    followed by the command's closest flags (``difflib.get_close_matches``, cutoff 0.6, underscores read as
    dashes: ``--zero_stage`` → ``--zero-stage``), so the fix is on the error line."""
    import difflib
    known = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    parts = []
    for word in unknown:
        flag = word.split("=", 1)[0]
        near = difflib.get_close_matches(flag.replace("_", "-"), known, n=2, cutoff=0.6) if flag.startswith("-") else []
        parts.append(word + (f" (did you mean {' or '.join(near)}?)" if near else ""))
    parser.error("unrecognized arguments: " + " ".join(parts))


def build_parser() -> argparse.ArgumentParser:
    import textwrap
    parser = _Parser(prog="cookbook", description=textwrap.fill(DESCRIPTION, 100), epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
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
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse's error, from the command's own parser, with the nearest flags it knows
        _unknown_flags(getattr(args, "_parser", None) or parser, unknown)
    args._argv = list(sys.argv[1:] if argv is None else argv)  # which options were typed (they win over a run file)
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
