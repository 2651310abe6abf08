"""One description of a planned run, shared by every part of the cookbook.

A :class:`Plan` is what the user intends to run: which model, on how many GPUs of
how much memory, with which ZeRO stage, offload targets, batch shape and precision.
The estimator (:mod:`cookbook.memory`), the config builder and linter
(:mod:`cookbook.dsconfig`, :mod:`cookbook.lint`), the environment checks
(:mod:`cookbook.env`) and the launch helper (:mod:`cookbook.launch`) all take it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

ZERO_STAGES = (0, 1, 2, 3)
OFFLOAD_TARGETS = ("none", "cpu", "nvme")
PRECISIONS = ("bf16", "fp16", "fp32")
#: The shortest row, in tokens, the cookbook trains on or estimates: a row needs room for an instruction and a
#: response (a causal LM learns nothing from a 1-token row: its one token has no next token to predict).
#: cookbook.data.tokenize refuses shorter rows too.
MIN_SEQ_LEN = 8


class PlanError(ValueError):
    """A plan field holds a value that cannot work; the message names field, value and fix.

    Raised with a *template* whose ``{field}`` placeholders name the plan fields involved, so that
    one error reads in the words of whoever typed the value: ``str(exc)`` names the Python fields
    (``num_gpus=0: ...; set num_gpus to 1 or more``), ``exc.render(names)`` the command-line flags
    (``--num-processes 0: ...; set --num-processes to 1 or more``) or config paths. In a template,
    ``{num_gpus}`` becomes the name with its value and ``{num_gpus.name}`` the name alone.
    A plain message (no ``fields``) is used as is by both.
    """

    def __init__(self, message: str | None = None, *, template: str | None = None, fields: dict | None = None):
        self.template = template
        self.fields = dict(fields or {})
        super().__init__(message if template is None else _render(template, self.fields, {}))

    @classmethod
    def about(cls, template: str, **fields) -> "PlanError":
        """A templated error: ``PlanError.about("{micro_batch}: must be ...", micro_batch=0)``."""
        return cls(template=template, fields=fields)

    def render(self, names: dict | None = None) -> str:
        """The message with each field named by ``names``: field -> a flag such as ``--micro-batch``, a
        name such as ``micro_batch``, a label holding ``{}`` where the value goes (``zero_optimization.stage={}
        in ds.json``), or a pair (how to show it with its value, how to name it alone). Fields missing from
        ``names`` keep their own name."""
        if self.template is None:
            return str(self)
        return _render(self.template, self.fields, names or {})


def _show(value) -> str:
    return "null" if value is None else str(value)


class _Named:
    """One field inside a :class:`PlanError` template (see :meth:`PlanError.render`)."""

    def __init__(self, field: str, value, label):
        self.field, self.value = field, value
        if isinstance(label, tuple):  # (how to show it with its value, how to name it alone)
            self.label, self._name = label
        else:
            self.label, self._name = label or field, None

    @property
    def name(self) -> str:
        if self._name is not None:
            return self._name
        return self.label.split("{}")[0].rstrip("= ") if "{}" in self.label else self.label

    def __format__(self, spec: str) -> str:
        if "{}" in self.label:
            return self.label.replace("{}", _show(self.value))
        if self._name is not None:
            return self.label
        if self.label.startswith("-"):
            return self.label if self.value is True else f"{self.label} {_show(self.value)}"
        return f"{self.label}={self.value!r}"


def _render(template: str, fields: dict, names: dict) -> str:
    return template.format(**{f: _Named(f, v, names.get(f)) for f, v in fields.items()})


@dataclass(frozen=True)
class Plan:
    """A planned ZeRO fine-tune.

    Fields (units in the names or comments):
        model: shipped name (``qwen-14b``), local folder / ``config.json`` path, or hub id
            present in the local cache.
        num_gpus: data-parallel world size (ranks; on the CPU rehearsal, CPU processes).
        gpu_memory_gib: memory of one GPU in GiB (2**30 bytes); 24 for an RTX 4090.
        host_memory_gib: host RAM of the machine in GiB, or None when unknown.
        seq_len: tokens per sequence after truncation; :data:`MIN_SEQ_LEN` (8) or more.
        micro_batch: sequences per GPU per forward/backward (``train_micro_batch_size_per_gpu``).
        grad_accum: gradient accumulation steps per optimizer step.
        precision: ``bf16``, ``fp16`` (with dynamic loss scaling) or ``fp32``.
        zero_stage: 0, 1, 2 or 3.
        offload_optimizer / offload_param: ``none``, ``cpu`` or ``nvme``.
        gradient_checkpointing: recompute activations in backward (HF
            ``model.gradient_checkpointing_enable()``).
        nvme_path: folder for NVMe offload; required when an offload target is ``nvme``.
        num_machines: machines the world is spread over (``num_gpus`` is the total).
        liger: compute the loss with Liger kernels' fused linear cross-entropy (``--liger``; see
            :mod:`cookbook.liger`): the ``[micro batch, seq, vocab]`` logits are never stored. A training-side
            option, not a DeepSpeed key: the estimator counts its memory, the launcher applies it.

    Raises:
        PlanError: on construction, for any field outside its domain.
    """

    model: str = "tiny-qwen2"
    num_gpus: int = 1
    gpu_memory_gib: float = 24.0
    host_memory_gib: float | None = None
    seq_len: int = 512
    micro_batch: int = 1
    grad_accum: int = 1
    precision: str = "bf16"
    zero_stage: int = 2
    offload_optimizer: str = "none"
    offload_param: str = "none"
    gradient_checkpointing: bool = True
    nvme_path: str | None = None
    num_machines: int = 1
    liger: bool = False

    def __post_init__(self) -> None:
        for name in ("num_gpus", "seq_len", "micro_batch", "grad_accum", "num_machines"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PlanError.about(f"{{{name}}}: must be a positive integer; set {{{name}.name}} to 1 or more",
                                      **{name: value})
        if self.seq_len < MIN_SEQ_LEN:
            raise PlanError.about(f"{{seq_len}}: too short to train on: a row of fewer than {MIN_SEQ_LEN} tokens has no "
                                  f"room for an instruction and a response; set {{seq_len.name}} to 64 or more "
                                  f"(at least {MIN_SEQ_LEN})", seq_len=self.seq_len)
        if not isinstance(self.liger, bool):
            raise PlanError.about("{liger}: must be true or false", liger=self.liger)
        if not (isinstance(self.gpu_memory_gib, (int, float)) and self.gpu_memory_gib > 0):
            raise PlanError.about("{gpu_memory_gib}: must be a positive number of GiB (24 for an RTX 4090)",
                                  gpu_memory_gib=self.gpu_memory_gib)
        if self.host_memory_gib is not None and not (isinstance(self.host_memory_gib, (int, float)) and self.host_memory_gib > 0):
            raise PlanError.about("{host_memory_gib}: must be a positive number of GiB, or left out for unknown",
                                  host_memory_gib=self.host_memory_gib)
        if self.zero_stage not in ZERO_STAGES:
            raise PlanError.about("{zero_stage}: ZeRO has stages 0, 1, 2, 3; pick one of them", zero_stage=self.zero_stage)
        if self.precision not in PRECISIONS:
            raise PlanError.about(f"{{precision}}: use one of {', '.join(PRECISIONS)}", precision=self.precision)
        for name in ("offload_optimizer", "offload_param"):
            value = getattr(self, name)
            if value not in OFFLOAD_TARGETS:
                raise PlanError.about(f"{{{name}}}: use one of {', '.join(OFFLOAD_TARGETS)}", **{name: value})
        if self.offload_param != "none" and self.zero_stage != 3:
            raise PlanError.about(
                "{offload_param} with {zero_stage}: parameter offload exists only in ZeRO stage 3; set "
                "{zero_stage.name} to 3 or {offload_param.name} to none",
                offload_param=self.offload_param, zero_stage=self.zero_stage)
        if self.offload_optimizer != "none" and self.zero_stage == 0:
            raise PlanError.about(
                "{offload_optimizer} with {zero_stage}: optimizer offload needs ZeRO stage 1, 2 or 3; raise "
                "{zero_stage.name}", offload_optimizer=self.offload_optimizer, zero_stage=self.zero_stage)
        if "nvme" in (self.offload_optimizer, self.offload_param) and not self.nvme_path:
            target = "offload_optimizer" if self.offload_optimizer == "nvme" else "offload_param"
            raise PlanError.about(
                f"{{{target}}} needs a folder: set {{nvme_path.name}} to a folder on a fast local SSD",
                **{target: "nvme", "nvme_path": self.nvme_path})
        if self.num_gpus % self.num_machines:
            raise PlanError.about(
                "{num_gpus} is not divisible by {num_machines}: {num_gpus.name} is the total world size; give "
                "the same number of ranks to every machine", num_gpus=self.num_gpus, num_machines=self.num_machines)

    @property
    def world_size(self) -> int:
        """Data-parallel world size (all ranks on all machines)."""
        return self.num_gpus

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: micro batch × accumulation × world size."""
        return self.micro_batch * self.grad_accum * self.num_gpus

    @property
    def tokens_per_step(self) -> int:
        """Tokens per optimizer step at full sequence length."""
        return self.global_batch * self.seq_len

    def replace(self, **changes) -> "Plan":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def label(self) -> str:
        """Short name of the ZeRO variant, e.g. ``ZeRO-3 + opt→cpu + param→cpu``."""
        parts = [f"ZeRO-{self.zero_stage}"]
        if self.offload_optimizer != "none":
            parts.append(f"opt→{self.offload_optimizer}")
        if self.offload_param != "none":
            parts.append(f"param→{self.offload_param}")
        if self.liger:
            parts.append("Liger FLCE")
        return " + ".join(parts)


#: The ZeRO variants the cookbook walks through, as (zero_stage, offload_optimizer, offload_param).
VARIANTS = (
    (2, "none", "none"),
    (2, "cpu", "none"),
    (3, "none", "none"),
    (3, "cpu", "none"),
    (3, "cpu", "cpu"),
    (3, "nvme", "nvme"),
)


def argparse_suppress():
    """argparse's SUPPRESS (an option that works but is not listed in --help)."""
    import argparse
    return argparse.SUPPRESS


def add_plan_arguments(parser, *, model_required: bool = False, positional_model: bool = False,
                       liger_choices: bool = False) -> None:
    """Add the options that describe a plan to an argparse parser (shared by estimate, env, train)."""
    if positional_model:
        # MODEL, or --model MODEL as `cookbook train` spells it (plan_from_args takes either, refuses both)
        parser.add_argument("model", nargs="?", default=None,
                            help="shipped name (qwen-14b, llama-7b, ...), local folder/config.json, or cached hub id "
                                 "(or --model MODEL)")
        parser.add_argument("--model", dest="model_option", default=None, metavar="MODEL", help=argparse_suppress())
    else:
        parser.add_argument("--model", required=model_required, default=None if not model_required else None,
                            help="shipped name (tiny-qwen2, qwen-14b, llama-7b, ...), local folder/config.json, or cached hub id")
    parser.add_argument("--gpus", "--num-processes", dest="num_gpus", type=int, default=None,
                        help="world size: GPUs (or CPU ranks in a rehearsal) over all machines")
    parser.add_argument("--gpu-memory-gib", type=float, default=24.0, help="memory of one GPU in GiB (24 for an RTX 4090)")
    parser.add_argument("--host-memory-gib", type=float, default=None, help="host RAM in GiB (default: unknown / this machine)")
    parser.add_argument("--zero-stage", type=int, choices=ZERO_STAGES, default=None, help="ZeRO stage")
    parser.add_argument("--offload-optimizer", choices=OFFLOAD_TARGETS, default="none", help="where optimizer states live")
    parser.add_argument("--offload-param", choices=OFFLOAD_TARGETS, default="none", help="where parameters live (ZeRO-3 only)")
    parser.add_argument("--micro-batch", type=int, default=None, help="sequences per GPU per forward/backward")
    parser.add_argument("--grad-accum", type=int, default=None, help="gradient accumulation steps")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per sequence")
    parser.add_argument("--precision", choices=PRECISIONS, default=None, help="bf16 (Ampere and newer), fp16, fp32")
    gc = parser.add_mutually_exclusive_group()
    gc.add_argument("--gradient-checkpointing", dest="gradient_checkpointing", action="store_true", default=None,
                    help="recompute activations in backward (saves activation memory, costs ~1/3 more compute)")
    gc.add_argument("--no-gradient-checkpointing", dest="gradient_checkpointing", action="store_false")
    parser.add_argument("--nvme-path", default=None, help="folder on a fast SSD for NVMe offload")
    if liger_choices:   # cookbook train's --liger {auto,on,off}; a bare --liger is on
        from .liger import CHOICES as LIGER_CHOICES
        parser.add_argument("--liger", nargs="?", const="on", choices=LIGER_CHOICES, default=None,
                            help="Liger kernels' fused linear cross-entropy (cookbook train's --liger): on, off, or auto "
                                 "(on for llama/qwen2 at ZeRO 0-2 on a GPU; with --sweep per variant, never at ZeRO-3); the logits "
                                 "are never stored. Default: off here; cookbook train's default is auto, so pass "
                                 "--liger auto to estimate what it runs on a GPU")
    else:
        parser.add_argument("--liger", action="store_true", default=None,
                            help="Liger kernels' fused linear cross-entropy: the loss without the full logits tensor "
                                 "(needs an NVIDIA GPU and liger-kernel)")


def plan_from_args(args, **defaults) -> Plan:
    """Build a :class:`Plan` from :func:`add_plan_arguments` options; ``defaults`` fill unset ones.

    Raises:
        PlanError: a value outside its domain (message names the option).
    """
    option = getattr(args, "model_option", None)
    if option is not None:  # `cookbook estimate --model X` (the positional's other spelling)
        if getattr(args, "model", None) not in (None, option):
            raise PlanError(f"the model is given twice, as MODEL {args.model!r} and as --model {option!r}: give one")
        args.model = option
    if hasattr(args, "model_option") and getattr(args, "model", None) is None and "model" not in defaults:
        raise PlanError("no model given: name it, e.g. `cookbook estimate llama-7b ...` or "
                        "`cookbook estimate --model llama-7b ...` (a shipped name, a folder with config.json, or a "
                        "cached hub id)")
    fields = {}
    for name in ("model", "num_gpus", "gpu_memory_gib", "host_memory_gib", "zero_stage", "offload_optimizer",
                 "offload_param", "micro_batch", "grad_accum", "seq_len", "precision", "gradient_checkpointing",
                 "nvme_path", "liger"):
        value = getattr(args, name, None)
        if value is None:
            value = defaults.get(name)
        if value is not None:
            fields[name] = value
    return Plan(**fields)


# ----------------------------------------------------------------------------------------------
# the user's words: which flag names a plan field in the command being run

#: argparse destinations that hold a plan field under another name (``cookbook launch --num-processes``,
#: ``cookbook config --gpus``, ``cookbook lint --world-size`` all set ``num_gpus``).
DEST_FIELDS = {"num_processes": "num_gpus", "gpus": "num_gpus", "world_size": "num_gpus"}


def _long_options(parser) -> dict[str, object]:
    return {o: a for a in parser._actions for o in a.option_strings if o.startswith("--")}


def typed_options(parser, argv) -> dict[str, str]:
    """``{dest: option string as typed}`` for the options present in ``argv`` (``--opt value`` and
    ``--opt=value``; argparse's unique-prefix abbreviations count as the full option). Used to tell an
    option the user typed from a parser default, and to name it back as typed (``--gpus`` or
    ``--num-processes``)."""
    options = {o: a for a in parser._actions for o in a.option_strings}
    longs = _long_options(parser)
    out: dict[str, str] = {}
    for token in argv or ():
        if not isinstance(token, str) or not token.startswith("-") or token == "--":
            if token == "--":
                break
            continue
        name = token.split("=", 1)[0]
        action = options.get(name)
        if action is None and name.startswith("--"):
            hits = [o for o in longs if o.startswith(name)]
            if len({id(longs[o]) for o in hits}) == 1:
                action, name = longs[hits[0]], hits[0]
        if action is not None and action.dest not in out:
            out[action.dest] = name
    return out


def option_names(parser, argv=()) -> dict[str, str]:
    """``{plan field or dest: flag}``: the flag the user typed for it, else the parser's first long
    option. Plan fields stored under another dest (:data:`DEST_FIELDS`) are named by that option."""
    typed = typed_options(parser, argv)
    names: dict[str, str] = {}
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs:
            continue
        flag = typed.get(action.dest, longs[0])
        field = DEST_FIELDS.get(action.dest, action.dest)
        for key in {action.dest, field}:
            if key not in names or action.dest in typed:
                names[key] = flag
    return names


def user_message(exc: Exception, args=None, names: dict | None = None) -> str:
    """``exc`` in the words of the command being run: a :class:`PlanError` names the flags of
    ``args`` (set by :func:`cookbook.cli.main`) or ``names``; any other exception is ``str(exc)``."""
    if isinstance(exc, PlanError):
        merged = dict(getattr(args, "_names", None) or {})
        merged.update(names or {})
        return exc.render(merged)
    return str(exc)
