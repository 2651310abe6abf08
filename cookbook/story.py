"""The sections the story notebooks (02-06) share, each one call returning a result that prints itself:

* :func:`setup` — the machine the story is about (the ``TARGET_*`` parameters), the run this machine does (the
  other parameters), and what follows from this machine (CPU rehearsal or GPU, warm-up, watchdog).
* :func:`schedule` — the real run's learning-rate schedule for the target (its config's numbers).
* :func:`run_and_show` — the launch of this machine's run and what the notebook shows of it (the estimate beside
  the measurement, the partition, the throughput, the figures, the GPU measurements beside it).
* :func:`verdict` — the target's estimate in one sentence, with the fields a record keeps.
* :func:`with_variant` and :func:`recommended` — the policy's variant for the target, and this machine's run under it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

#: seconds without output from rank 0 before the watchdog stops a run: CPU rehearsal, GPU (model loading is slower)
HANG_TIMEOUT_S = {"cpu": 300.0, "cuda": 900.0}


@dataclass(frozen=True)
class Setup:
    """What a story notebook estimates (``target``) and what it runs here (``run``).

    Attributes:
        target: the story's machine and batch shape (the articles' hardware): estimated, never run here.
        run: the run this machine does: the rehearsal's tiny model on CPU ranks, or the target on a GPU box.
        rehearsal: True when this machine has no NVIDIA GPU (:func:`cookbook.hardware.rehearsal`).
        max_steps: optimizer steps of the run.
    """

    target: Any
    run: Any
    rehearsal: bool
    max_steps: int

    @property
    def device(self) -> str:
        """``cpu`` in the CPU rehearsal (every rank's memory is host RAM), else ``cuda``: the estimate's device."""
        return "cpu" if self.rehearsal else "cuda"

    @property
    def warmup_steps(self) -> int:
        """The launch helper's default warm-up (:func:`cookbook.dsconfig.default_warmup_steps`)."""
        from .dsconfig import default_warmup_steps
        return default_warmup_steps(self.max_steps)

    @property
    def hang_timeout_s(self) -> float:
        """:data:`HANG_TIMEOUT_S` for this machine."""
        return HANG_TIMEOUT_S[self.device]

    def lines(self) -> list[str]:
        t, r = self.target, self.run
        host = f"{t.host_memory_gib:g} GiB host RAM" if t.host_memory_gib is not None else "host RAM not given"
        where = "CPU rehearsal" if self.rehearsal else "GPUs"
        return [f"target: {t.model} on {t.num_gpus} × {t.gpu_memory_gib:g} GiB, {host}, micro batch {t.micro_batch} × "
                f"{t.seq_len} tokens × {t.grad_accum}, {t.label}{', NVMe at ' + t.nvme_path if t.nvme_path else ''}",
                f"run:    {r.model} on {r.num_gpus} rank(s) ({where}), micro batch {r.micro_batch} × {r.seq_len} tokens "
                f"× {r.grad_accum}, {r.label}, {self.max_steps} steps, warm-up {self.warmup_steps}"]

    def __str__(self) -> str:
        return "\n".join(self.lines())


def setup(target, run, *, max_steps: int, rehearsal: bool | None = None) -> Setup:
    """The :class:`Setup` of a story notebook: ``target`` and ``run`` are :class:`cookbook.plan.Plan`; ``rehearsal``
    None asks this machine."""
    if rehearsal is None:
        from .hardware import rehearsal as on_rehearsal
        rehearsal = on_rehearsal()
    return Setup(target, run, bool(rehearsal), int(max_steps))




@dataclass(frozen=True)
class Schedule:
    """The real run's schedule for the target: ``hyperparameters`` are :func:`cookbook.dsconfig.build_config`'s
    keyword arguments (``lr``, ``lr_scheduler``, ``warmup_steps``, ``total_steps``); ``rows`` is
    :func:`cookbook.launch.planned_rows` of the target (what an epoch is)."""

    target: Any
    epochs: float
    hyperparameters: dict
    rows: dict

    def __str__(self) -> str:
        h = self.hyperparameters
        return (f"target schedule: lr {h['lr']:g}, {h['lr_scheduler']}, warm-up {h['warmup_steps']}, "
                f"{h['total_steps']} steps: {self.epochs:g} epochs at {self.target.global_batch} rows a step, "
                f"an epoch being {self.rows['words']}")


def schedule(target, *, lr: float, epochs: float) -> Schedule:
    """The :class:`Schedule` of a real fine-tune of ``target`` (a :class:`cookbook.plan.Plan`): ``epochs`` passes
    over the rows ``cookbook train`` of the target trains on (the shipped chats packed into rows of its
    sequence length), at peak learning rate ``lr`` (:func:`cookbook.dsconfig.target_hyperparameters`)."""
    from .dsconfig import target_hyperparameters
    from .launch import planned_rows
    rows = planned_rows(target)
    hyper = target_hyperparameters(target, lr=lr, num_epochs=epochs, num_rows=rows["rows"])
    return Schedule(target, float(epochs), hyper, rows)


@dataclass(frozen=True)
class Verdict:
    """The target's estimate (:class:`cookbook.memory.MemoryEstimate`) in one sentence: ``str(verdict)``."""

    estimate: Any

    def __str__(self) -> str:
        e, p = self.estimate, self.estimate.plan
        word = "FITS" if e.fits else "DOES NOT FIT"
        return (f"{p.label} for {p.model} on {p.num_gpus} × {p.gpu_memory_gib:g} GiB with {p.host_memory_gib:g} GiB "
                f"host RAM: {word} — " + "; ".join(e.reasons[:2]))

    @property
    def plan_line(self) -> str:
        """The plan for the machine: ``Plan for MODEL on N × G GiB with H GiB RAM:`` and the estimate's verdict."""
        p = self.estimate.plan
        return (f"Plan for {p.model} on {p.num_gpus} × {p.gpu_memory_gib:g} GiB with {p.host_memory_gib:g} GiB RAM: "
                f"{self.estimate.verdict}")

    def to_record(self) -> dict:
        """``verdict`` (the sentence), ``target_estimate`` (the estimate's dict), ``fits_target``,
        ``fits_target_gpu`` and ``fits_target_host``."""
        e = self.estimate
        return {"verdict": str(self), "target_estimate": e.to_dict(), "fits_target": e.fits,
                "fits_target_gpu": e.fits_gpu, "fits_target_host": e.fits_host}


def verdict(target_estimate) -> Verdict:
    """The :class:`Verdict` for a target's estimate."""
    return Verdict(target_estimate)


def with_variant(run, target, *, nvme_path: str | None = None):
    """``run`` (a :class:`cookbook.plan.Plan`) under ``target``'s ZeRO variant; an NVMe variant writes its swap
    files to ``nvme_path`` (this machine's folder, not the target's)."""
    return run.replace(zero_stage=target.zero_stage, offload_optimizer=target.offload_optimizer,
                       offload_param=target.offload_param, nvme_path=nvme_path if target.nvme_path else None)


def recommended(machine, *, bf16_states: bool = False):
    """The variant the cookbook's policy recommends for ``machine`` (:func:`cookbook.memory.decide`: the ZeRO ladder
    in order, the first with room for the estimator's measured error, before any at the edge) with the states
    asked for, and the ladder of all variants with those states (:func:`cookbook.memory.sweep`, for the table and
    the figure): ``(chosen, ladder)``.

    Raises:
        ValueError: no variant fits, with the decision's smallest changes that would.
    """
    from .memory import decide, sweep
    d = decide(machine, bf16_states=bool(bf16_states))
    if d.recommended is None:
        raise ValueError(f"no ZeRO variant fits {machine.model} on {machine.num_gpus} × {machine.gpu_memory_gib:g} "
                         f"GiB with {machine.host_memory_gib:g} GiB host RAM with these states: add host RAM or GPUs, or set "
                         f"BF16_STATES = True (lossy); the decision:\n{d}")
    return d.recommended, sweep(machine, bf16_states=bool(bf16_states))


@dataclass
class StoryRun:
    """A story notebook's run on this machine and what the notebook shows of it.

    Displayed, it is the :class:`cookbook.launch.RunResult` (status, message, facts); ``str()`` is the headline
    sentence (``ZeRO-2 run (CPU rehearsal (2 ranks)): ok — 40 steps ...``).

    Attributes:
        setup: the notebook's :class:`Setup` (the run is ``setup.run``).
        result: the :class:`cookbook.launch.RunResult`.
        config: the DeepSpeed config it ran.
        label: the run's name in the tables and figures.
        bf16_states: master weights and Adam states in bf16.
    """

    setup: Setup
    result: Any
    config: dict
    label: str
    bf16_states: bool = False

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def command(self) -> str:
        """The exact launch command (the run folder's ``command.sh``)."""
        return self.result.command

    @property
    def runs(self) -> dict:
        """``{label: result}``: what the tables, figures and ``results.record`` take."""
        return {self.label: self.result}

    @property
    def hardware(self) -> str:
        from .hardware import hardware_label
        return hardware_label(self.result)

    def __str__(self) -> str:
        return f"{self.label} run ({self.hardware}): {self.result.status} — {self.result.message}"

    def _repr_html_(self) -> str:
        return self.result._repr_html_()

    def __repr__(self) -> str:
        return repr(self.result)

    @cached_property
    def estimate(self):
        """The estimate (:func:`cookbook.memory.estimate`) of the run that ran, on this machine's device."""
        from .memory import estimate
        return estimate(self.setup.run, device=self.setup.device, ds_config=self.config, bf16_states=self.bf16_states)

    @cached_property
    def beside(self):
        """The estimate beside what the run measured (GPU peaks on GPUs, host RSS in the rehearsal)."""
        from .memory import compare
        from .tables import tidy_frame
        return tidy_frame(compare(self.estimate, self.result.summary or {}), rehearsal=False)

    @property
    def partition(self) -> dict | None:
        """``summary.json``'s ``zero_partition``: the per-rank share of the partitioned state; None without one."""
        return (self.result.summary or {}).get("zero_partition")

    @property
    def partition_line(self) -> str:
        from .tables import partition_line
        return partition_line(self.result)

    @cached_property
    def table(self):
        """Throughput, loss and memory peaks beside their estimates (:func:`cookbook.tables.runs_frame`)."""
        from .tables import runs_frame
        return runs_frame(self.runs)

    def metrics(self, last: int = 10):
        """The last ``last`` rows of ``metrics.jsonl`` (loss, lr, gradient norm, throughput, peaks), tidied."""
        from .tables import tidy_frame
        return tidy_frame(self.result.metrics_frame().tail(last), rehearsal=self.setup.rehearsal)

    def loss_figure(self):
        from .figures import plot_loss
        return plot_loss({f"{self.label} ({self.hardware})": self.result})

    def runs_figure(self):
        from .figures import plot_runs
        return plot_runs(self.runs)

    def gpu_beside(self, notebook: str):
        """This run beside the maintainers' GPU measurements for ``notebook`` (``"02"``; ``data/reference/``)."""
        from .reference import beside_reference
        return beside_reference(self.runs, notebook)

    def reference_notes(self) -> list[str]:
        """One line per reference file, and in the rehearsal what its host-RAM memory numbers are."""
        from .memory import rehearsal_memory_note
        from .reference import reference_notes
        notes = reference_notes()
        if self.setup.rehearsal:
            notes.append(rehearsal_memory_note())
        return notes

    @property
    def verification(self) -> dict | None:
        """``summary.json``'s ``save_verification``: the saved model reloaded and compared with the live one."""
        return (self.result.summary or {}).get("save_verification")

    def saved_model(self) -> dict | None:
        """The final model read back (:func:`cookbook.checkpoint.inspect_saved_model`); None when the run failed."""
        from pathlib import Path
        from .checkpoint import inspect_saved_model
        if not self.result.ok:
            return None
        return inspect_saved_model(Path(self.result.run_dir) / "final_model")

    def basis(self, stand_in=None) -> str:
        """What this run adds to the target's verdict: in the rehearsal the code path, on GPUs the measurement (or
        how it ended, and whether its estimate predicted it); ``stand_in`` (:class:`cookbook.stand_in.StandIn`)
        adds what the real target needs when this run is the stand-in."""
        r, hw, run = self.result, self.hardware, self.setup.run
        if self.setup.rehearsal:
            return (f"Basis: this run ({hw}, {run.model}) ran the same code path as a GPU run (Accelerate + DeepSpeed, "
                    f"the same config builder) and ended {r.status}; its memory is host RAM, so the target's numbers "
                    "are the estimate's, checked against GPU measurements in data/calibration/.")
        ranks = f"{run.num_gpus} rank{'s' if run.num_gpus != 1 else ''}"
        if r.ok:
            return (f"Basis: this run ({hw}, {run.model} on {ranks}) measured its memory and throughput beside the "
                    "estimate (section 4); the target's numbers are the estimate's.")
        e = self.estimate
        how = f": {r.message}"
        if r.status == "gpu_oom" and not e.fits_gpu:
            how = f", as its estimate ({e.gpu_gib['total']:.1f} GiB per GPU) predicted"
        tail = "."
        if stand_in is not None and stand_in.model == run.model:
            tail = (f"; {stand_in.target_model} itself needs {stand_in.zero2_target_gpu_gib:.1f} GiB per GPU under "
                    f"ZeRO-2, not the stand-in's {stand_in.zero2_stand_in_gpu_gib:.1f} (section 2).")
        return (f"Basis: this run ({hw}, {run.model} on {ranks}) ended {r.status}{how}; the target's numbers are the "
                f"estimate's{tail}")

    def recipe(self, saved: dict | None = None) -> str:
        """The recipe in one sentence: the target's variant, how this run ended, its loss, the 16-bit model."""
        from .results import loss_pair, run_record
        t, run = self.setup.target, self.setup.run
        loss = loss_pair(run_record(self.result))  # first → last step under 10 steps, else 5-step means
        where = "rehearsal" if self.setup.rehearsal else "GPU"
        said = "no loss recorded"
        if loss:
            said = f"loss {loss['first']:.3f} → {loss['last']:.3f} ({loss['basis']})"
        model = "not saved"
        if saved:
            model = "verified and reloaded" if saved.get("reloaded") else "read back"
        return (f"Recipe for {t.model} on {t.num_gpus} × {t.gpu_memory_gib:g} GiB: {t.label}; {where} run "
                f"({run.model}, {run.num_gpus} rank(s)) {self.result.status}, {said}, 16-bit model {model}")

    def to_record(self) -> dict:
        """``run_status`` and ``zero_partition`` (None when the run wrote no summary)."""
        return {"run_status": self.result.status, "zero_partition": self.partition}


def run_and_show(setup: Setup, run_dir, *, config: dict, lr: float, emulate_gpu_memory_gib: float = 0.0,
                 bf16_states: bool = False, label: str | None = None, **launch_options) -> StoryRun:
    """Launch ``setup.run`` (:func:`cookbook.launch.launch`, live progress) with ``config`` for ``setup.max_steps``
    steps, the setup's warm-up and watchdog, and return the :class:`StoryRun`: display it for the result, ``print``
    it for the headline, and its tables and figures for the rest.

    ``emulate_gpu_memory_gib`` 0 is the card's own memory; ``label`` None names the run by the target's variant;
    ``launch_options`` go to ``launch`` as they are (``force``, ``final_save``, ``save_steps``, ``random_weights``,
    ``attention``, ``dry_run``, ...)."""
    from .launch import launch
    launch_options.setdefault("hang_timeout_s", setup.hang_timeout_s)
    result = launch(setup.run, run_dir, config=config, max_steps=setup.max_steps, lr=lr,
                    warmup_steps=setup.warmup_steps, emulate_gpu_memory_gib=emulate_gpu_memory_gib or None,
                    bf16_states=bf16_states, **launch_options)
    return StoryRun(setup, result, config, label or setup.target.label, bf16_states)


__all__ = ["HANG_TIMEOUT_S", "Schedule", "Setup", "StoryRun", "Verdict", "recommended", "run_and_show", "schedule",
           "setup", "verdict", "with_variant"]
