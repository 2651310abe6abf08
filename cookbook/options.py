"""How a run is run: the frozen :class:`RunOptions`, beside the frozen :class:`cookbook.plan.Plan` (what it is).

The plan says what is trained on what (model, world size, ZeRO stage, offload, batch shape, precision);
the run options say how: the schedule, what is saved, the data, the watchdog, the rehearsal levers and the
launcher. They are grouped as nested frozen dataclasses, in the shape of Accelerate's ``DeepSpeedPlugin``
(accelerate/utils/dataclasses.py) and LLaMA-Factory's ``hparams/*Arguments``:

=============  ==============================================================================================
group          fields (``cookbook train`` / ``cookbook launch`` flag = run-file key)
=============  ==============================================================================================
schedule       lr, max_steps, num_epochs, lr_scheduler, warmup_ratio, warmup_steps, weight_decay, seed
saving         save_steps, save_total_limit, save_16bit, verify_save, final_save, resume, report_to
data           dataset, dataset_split, dataset_fields, chat_template, tokenizer, packing, eval_fraction,
               eval_dataset, eval_steps
model          attention, bf16_states, trust_remote_code
watchdog       hang_timeout_s (``--hang-timeout``), startup_timeout_s (``--startup-timeout``)
rehearsal      emulate_gpu_memory_gib, random_weights
launcher       force, main_process_ip, main_process_port, env (Python only), extra_args (Python only)
=============  ==============================================================================================

Every field carries its flag, its unit and its one-line meaning in ``metadata`` (:data:`FIELDS` lists them);
its default is the default of the flag (``cookbook.train.add_train_arguments`` and ``add_launch_arguments``
read their defaults from here, so there is one place). Three ways in, one shape:

* ``launch(plan, run_dir, options)`` takes a :class:`RunOptions`;
* :func:`from_args` maps the parsed flags of ``cookbook train``/``launch`` (a run file's keys are those
  flags: ``cookbook.launch.load_run_file`` sets them, so a run file arrives the same way);
* :func:`from_flat` maps flat names (``max_steps=5``, the old ``launch(..., max_steps=5)`` keywords, or a
  run file's keys with dashes) and refuses an unknown name, naming the closest valid one.

Nothing here imports the rest of the package: it is plain data.
"""
from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field

#: ``--report-to`` choices: Accelerate trackers the cookbook wires up (``accelerate.tracking``).
REPORT_TO = ("none", "tensorboard")
#: ``--save-16bit`` choices: gather the 16-bit model at every checkpoint, or only at the final save.
SAVE_16BIT = ("every", "final")
#: ``--verify-save`` choices: reload and compare logits, check shapes only, or skip.
VERIFY_SAVE = ("full", "shapes", "off")
#: The default ``--warmup-ratio``: 5% of the steps (the HF Trainer's ``warmup_ratio`` is a free choice; the
#: cookbook's recipes use 0.05).
DEFAULT_WARMUP_RATIO = 0.05


class OptionsError(TypeError):
    """An option name that is not one; the message names it and the closest valid name."""


def _opt(default, flag: str | None, unit: str, doc: str, dest: str | None = None):
    """A field with its flag (None: Python only), unit ("" for names and switches) and one-line meaning.
    ``dest``: the argparse destination when it differs from the field's name (``--hang-timeout`` ->
    ``hang_timeout``)."""
    meta = {"flag": flag, "unit": unit, "doc": doc, "dest": dest}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Schedule:
    """The optimizer's schedule: learning rate, length, warm-up (see ``cookbook.train.resolve_hyperparameters``)."""

    lr: float | None = _opt(None, "--lr", "1/step (AdamW peak learning rate)",
                            "peak learning rate; None only for the shipped tiny models (3e-3)")
    max_steps: int | None = _opt(None, "--max-steps", "optimizer steps",
                                 "the run's length; wins over num_epochs; None for both: 40 steps, tiny models only")
    num_epochs: float | None = _opt(None, "--num-epochs", "passes over the training rows",
                                    "the run's length in epochs (cookbook.dsconfig.total_steps_for_epochs)")
    lr_scheduler: str = _opt("linear", "--lr-scheduler", "",
                             "after warm-up: linear, cosine or constant (DeepSpeed WarmupDecayLR/WarmupCosineLR/WarmupLR)")
    warmup_ratio: float = _opt(DEFAULT_WARMUP_RATIO, "--warmup-ratio", "fraction of the steps",
                               "linear warm-up over ceil(ratio × steps) steps")
    warmup_steps: int | None = _opt(None, "--warmup-steps", "optimizer steps", "warm-up steps; wins over warmup_ratio")
    weight_decay: float = _opt(0.0, "--weight-decay", "1 (AdamW decoupled decay)", "AdamW weight decay")
    seed: int = _opt(1234, "--seed", "", "seed for weights, data order and the eval split")


@dataclass(frozen=True)
class Saving:
    """What the run writes: checkpoints, the 16-bit model, the final model, the metrics tracker."""

    save_steps: int = _opt(0, "--save-steps", "optimizer steps", "a checkpoint every N steps (0: only at the end)")
    save_total_limit: int | None = _opt(None, "--save-total-limit", "checkpoints",
                                        "keep only the newest N complete checkpoints (None: keep all)")
    save_16bit: str = _opt("every", "--save-16bit", "",
                           "every: every checkpoint carries the gathered 16-bit model; final: only the last one")
    verify_save: str = _opt("full", "--verify-save", "", "after the final save: reload and compare logits "
                                                          "(full), check shapes (shapes), or skip (off)")
    final_save: bool = _opt(True, "--no-final-save", "", "save the model at the end (the flag turns it off)")
    resume: bool = _opt(False, "--resume", "", "continue from the newest complete checkpoint in the run folder")
    report_to: str = _opt("none", "--report-to", "", "also log metrics through Accelerate's tracker (tensorboard)")


@dataclass(frozen=True)
class Data:
    """The training and eval data, the tokenizer, and how examples become rows."""

    dataset: str | None = _opt(None, "--dataset", "", "a file, datasets folder or cached hub id (None: shipped chats)")
    dataset_split: str | None = _opt(None, "--dataset-split", "", "split of a hub id or DatasetDict (None: train)")
    dataset_fields: str | dict | None = _opt(None, "--dataset-fields", "",
                                             "your field names, standard=yours (a string, or a dict from Python)")
    chat_template: str | None = _opt(None, "--chat-template", "", "a Jinja chat template file (None: the tokenizer's)")
    tokenizer: str | None = _opt(None, "--tokenizer", "", "tokenizer folder, or 'shipped' (None: the model's own)")
    packing: bool | None = _opt(None, "--packing", "", "True: rows of exactly seq_len tokens; False: one example "
                                                       "per row (--no-packing); None: packed when attention allows")
    eval_fraction: float = _opt(0.0, "--eval-fraction", "fraction of the records", "held out (seeded) for eval loss")
    eval_dataset: str | None = _opt(None, "--eval-dataset", "", "a separate eval file or datasets folder")
    eval_steps: int | None = _opt(None, "--eval-steps", "optimizer steps",
                                  "eval loss every N steps and at the last (None or 0: at the last only)")


@dataclass(frozen=True)
class Model:
    """How the model is built and trained beyond the plan."""

    attention: str = _opt("auto", "--attention", "", "auto, sdpa, flex, flash or eager (cookbook.attention.choose)")
    bf16_states: bool = _opt(False, "--bf16-states", "", "master weights, gradients and Adam moments in bf16")
    trust_remote_code: bool = _opt(False, "--trust-remote-code", "", "allow a model's own Python code")


@dataclass(frozen=True)
class Watchdog:
    """When a silent run is stopped (``cookbook.launch._run_and_watch``)."""

    hang_timeout_s: float = _opt(900.0, "--hang-timeout", "s", "without output from rank 0 after its first step",
                                 dest="hang_timeout")
    startup_timeout_s: float | None = _opt(None, "--startup-timeout", "s",
                                           "the same before rank 0's first step (None: max(hang_timeout_s, 600))",
                                           dest="startup_timeout")


@dataclass(frozen=True)
class Rehearsal:
    """Levers that make a run rehearse another: a smaller GPU, a model without its weights."""

    emulate_gpu_memory_gib: float | None = _opt(None, "--emulate-gpu-memory-gib", "GiB",
                                                "cap each rank's GPU memory (on CPU ranks: the model-state budget)")
    random_weights: bool = _opt(False, "--random-weights", "", "train a model without weights on a GPU box, on purpose")


@dataclass(frozen=True)
class Launcher:
    """How the ranks are started: the pre-launch guard, machine 0's address, the ranks' environment."""

    force: bool = _opt(False, "--force", "", "launch even when the estimate says it will not fit")
    main_process_ip: str = _opt("127.0.0.1", "--main-process-ip", "", "address of machine 0")
    main_process_port: int | None = _opt(None, "--main-process-port", "", "port on machine 0 (None: a free one)")
    env: dict | None = _opt(None, None, "", "extra environment variables for the ranks (they win over recommendations)")
    extra_args: tuple = _opt((), None, "", "extra arguments appended to the ranks' `cookbook.train` command")


#: group name -> its dataclass, in the order the groups are documented.
GROUPS = {"schedule": Schedule, "saving": Saving, "data": Data, "model": Model, "watchdog": Watchdog,
          "rehearsal": Rehearsal, "launcher": Launcher}


@dataclass(frozen=True)
class RunOptions:
    """How a run is run, grouped (see the module's table). Build it with keywords per group, e.g.
    ``RunOptions(schedule=Schedule(lr=1e-5, num_epochs=3), saving=Saving(save_steps=200, save_total_limit=2))``,
    or flat with :func:`from_flat` (``from_flat(lr=1e-5, num_epochs=3, save_steps=200)``)."""

    schedule: Schedule = field(default_factory=Schedule)
    saving: Saving = field(default_factory=Saving)
    data: Data = field(default_factory=Data)
    model: Model = field(default_factory=Model)
    watchdog: Watchdog = field(default_factory=Watchdog)
    rehearsal: Rehearsal = field(default_factory=Rehearsal)
    launcher: Launcher = field(default_factory=Launcher)

    def flat(self) -> dict:
        """Every field by its flat name (``max_steps``, ``hang_timeout_s``, ...), in the table's order."""
        return {f.name: getattr(getattr(self, f.group), f.name) for f in FIELDS}

    def replace(self, **flat) -> "RunOptions":
        """A copy with fields changed by flat name (:func:`from_flat`'s names); unknown names raise
        :class:`OptionsError`."""
        return from_flat({**self.flat(), **flat})


@dataclass(frozen=True)
class OptionField:
    """One run option: its group, name, argparse destination, flag (None: Python only), default, unit, meaning."""

    group: str
    name: str
    dest: str
    flag: str | None
    default: object
    unit: str
    doc: str


def _fields() -> tuple:
    out = []
    for group, cls in GROUPS.items():
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            out.append(OptionField(group, f.name, f.metadata["dest"] or f.name, f.metadata["flag"], default,
                                   f.metadata["unit"], f.metadata["doc"]))
    return tuple(out)


#: Every run option, one row each: the table the flags, the run-file keys and :func:`from_flat` share.
FIELDS = _fields()
_BY_NAME = {f.name: f for f in FIELDS}
_BY_DEST = {f.dest: f for f in FIELDS}


def default(dest: str):
    """The default of the option with argparse destination (or name) ``dest``: what the flag defaults to.

    Raises:
        KeyError: ``dest`` is not a run option."""
    f = _BY_DEST.get(dest) or _BY_NAME[dest]
    return f.default


def _lookup(name: str) -> OptionField | None:
    key = name[2:] if name.startswith("--") else name
    key = key.replace("-", "_")
    if key == "no_final_save":
        return _BY_NAME["final_save"]
    if key == "no_packing":
        return _BY_NAME["packing"]
    return _BY_NAME.get(key) or _BY_DEST.get(key)


def closest(name: str, extra=()) -> str | None:
    """The valid option name nearest to ``name`` (``difflib``, cutoff 0.6), or None."""
    names = sorted(set(_BY_NAME) | set(_BY_DEST) | set(extra))
    got = difflib.get_close_matches(name.lstrip("-").replace("-", "_"), names, n=1, cutoff=0.6)
    return got[0] if got else None


def from_flat(values: Mapping | None = None, /, *, where: str = "RunOptions", **kw) -> RunOptions:
    """A :class:`RunOptions` from flat names: field names (``hang_timeout_s``), argparse destinations
    (``hang_timeout``) or flags / run-file keys with dashes (``max-steps``, ``--max-steps``); ``no-final-save``
    and ``no-packing`` set ``final_save``/``packing`` to False when true.

    Raises:
        OptionsError: an unknown name, e.g. ``launch(): unknown option 'max_step' (did you mean
            'max_steps'?)``; ``where`` says who was given it.
    """
    groups: dict = {g: {} for g in GROUPS}
    for name, value in {**(values or {}), **kw}.items():
        f = _lookup(str(name))
        if f is None:
            guess = closest(str(name))
            raise OptionsError(f"{where}: unknown option {name!r}" + (f" (did you mean {guess!r}?)" if guess else "")
                               + "; the run options are listed in cookbook.options.FIELDS")
        key = str(name).lstrip("-").replace("-", "_")
        if key in ("no_final_save", "no_packing"):
            value = (False if value else (True if f.name == "final_save" else None))
        groups[f.group][f.name] = value
    return RunOptions(**{g: GROUPS[g](**v) for g, v in groups.items()})


def from_args(args) -> RunOptions:
    """The :class:`RunOptions` of parsed ``cookbook train``/``cookbook launch`` flags (an argparse namespace,
    run-file values already set on it by ``cookbook.launch.load_run_file``). Destinations that are not run
    options (the plan's ``--model``, ``--zero-stage``, ...; ``--json``, ``--dry-run``) are not read; a run
    option the namespace lacks keeps its default."""
    values = {f.name: getattr(args, f.dest) for f in FIELDS if f.flag is not None and hasattr(args, f.dest)}
    return from_flat(values, where="flags")


@dataclass(frozen=True)
class Origin:
    """Where a run's values came from, for its messages and its records (not how it is run).

    Attributes:
        stated: the plan fields and options (``lr``, ``max_steps``, ``warmup_steps``, ``lr_scheduler``) the caller
            set on purpose, which a DeepSpeed config's value may not override; None: inferred
            (``cookbook.launch.stated_fields``). ``cookbook launch`` passes the options typed.
        names: how messages name each field (``cookbook launch`` passes its flags); None: the Python names.
        run_file: the YAML run file the options came from (named in ``run.resolved.yaml``).
        lr_source: where ``lr`` came from, for ``summary.hyperparameters.lr_source`` (``--lr``, ``run file PATH``);
            None: ``launch(lr=...)`` when an lr is given.
        auto: plan fields the caller left to the launcher (``{"liger"}`` for ``--liger auto``, the default of
            ``cookbook train``/``launch``): :func:`cookbook.launch.launch` decides them once the user's config has
            given the ZeRO stage, and says why (``cookbook.liger.resolve``). A Python caller's plan is taken as built.
    """

    stated: frozenset | set | tuple | None = None
    names: dict | None = None
    run_file: str | None = None
    lr_source: str | None = None
    auto: frozenset | set | tuple = ()


#: The flat names :func:`split_legacy` accepts besides the run options: :class:`Origin`'s fields, and ``liger``
#: (a :class:`cookbook.plan.Plan` field: ``launch(liger=True)`` sets it on the plan).
ORIGIN_FIELDS = tuple(f.name for f in dataclasses.fields(Origin))


def split_legacy(kwargs: Mapping, *, where: str = "launch()") -> tuple[dict, dict, dict]:
    """Flat keywords of the earlier ``launch(plan, dir, max_steps=..., stated=..., liger=...)`` split into
    (run options by flat name, :class:`Origin` fields, plan fields).

    Raises:
        OptionsError: a name that is none of these, with the closest valid one."""
    opts, origin, plan = {}, {}, {}
    for name, value in kwargs.items():
        if name in ORIGIN_FIELDS:
            origin[name] = value
        elif name == "liger":
            plan[name] = value
        elif _lookup(name) is not None:
            opts[name] = value
        else:
            guess = closest(name, extra=ORIGIN_FIELDS + ("liger", "config", "dry_run", "progress", "quiet",
                                                         "raise_on_error", "options", "origin"))
            raise OptionsError(f"{where} got an unexpected keyword argument {name!r}"
                               + (f" (did you mean {guess!r}?)" if guess else "")
                               + "; the run options are listed in cookbook.options.FIELDS")
    return opts, origin, plan
