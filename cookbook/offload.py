"""The offload run one GPU can do on a machine, with the faster batch shape at the same global batch: one result
that prints, tabulates and records itself (the choice is :func:`cookbook.memory.choose_offload_run`'s, the shape
:func:`cookbook.memory.larger_micro_batch`'s)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OffloadRun:
    """What to launch on one machine, in words.

    Attributes:
        machine: how the machine is named in the sentences (``This machine``).
        choice: the :class:`cookbook.memory.OffloadChoice`.
        plan: the plan to launch: the choice's (its NVMe folder set) when something fits, else the plan asked about.
        estimate: :func:`cookbook.memory.estimate` of :attr:`plan` (with the choice's states).
        larger: the same variant at a larger micro batch of the same global batch that fits, or None.
    """

    machine: str
    choice: Any
    plan: Any
    estimate: Any
    larger: Any = None

    @property
    def fits(self) -> bool:
        return self.choice.fits

    @property
    def bf16_states(self) -> bool:
        return self.choice.bf16_states

    @property
    def label(self) -> str | None:
        """The chosen variant's label, None when nothing fits."""
        return self.choice.plan.label if self.choice.fits else None

    @property
    def shape_line(self) -> str:
        """The batch shape: the faster one at the same global batch, or why the plan's shape is already it."""
        from .memory import larger_micro_line
        p, e = self.plan, self.estimate
        if self.larger is not None:
            return larger_micro_line(e, self.larger)
        if p.grad_accum == 1:
            return f"micro batch {p.micro_batch} × accumulation 1: the whole global batch in one micro batch already"
        return (f"micro batch {p.micro_batch} × accumulation {p.grad_accum} is the largest micro batch that fits at "
                f"this global batch ({e.gpu_gib['total']:.1f} of {p.gpu_memory_gib:g} GiB)")

    def lines(self) -> list[str]:
        return [*self.choice.lines(self.machine), "  " + self.shape_line]

    @property
    def headline(self) -> str:
        """The choice in one sentence (its lines joined)."""
        return "; ".join(x.strip().rstrip(".") for x in self.choice.lines(self.machine))

    def __str__(self) -> str:
        return "\n".join(self.lines())

    @property
    def table(self):
        """One row per kind tried (fp32 states, NVMe offload, bf16 states): GPU and host GiB, SSD GiB, status, and
        which is chosen (a pandas DataFrame)."""
        import pandas as pd
        return pd.DataFrame([{"kind": k, "variant": e.plan.label, "GPU GiB": round(e.gpu_gib["total"], 1),
                              "host GiB": round(e.host_gib["total"], 1), "SSD GiB": round(e.nvme_gib or 0.0, 1),
                              "status": e.status, "chosen": k == self.choice.kind}
                             for k, e in self.choice.estimates.items()])

    def to_record(self) -> dict:
        """:meth:`cookbook.memory.OffloadChoice.to_dict` plus the shape: ``larger_micro_batch`` (None: none larger
        fits) and ``shape`` (the sentence)."""
        return dict(self.choice.to_dict(), machine=self.machine,
                    larger_micro_batch=self.larger.plan.micro_batch if self.larger is not None else None,
                    shape=self.shape_line)


def choose(plan, machine: str, *, nvme_ok: bool, nvme_free_gib: float | None, device: str = "cuda",
           nvme_path: str | None = None) -> OffloadRun:
    """The offload run for ``plan``'s machine (:func:`cookbook.memory.choose_offload_run`) and its fastest batch
    shape at the same global batch (:func:`cookbook.memory.larger_micro_batch`).

    Args:
        plan: the machine and run (``host_memory_gib``: its RAM).
        machine: the machine's name in the sentences.
        nvme_ok, nvme_free_gib, device: as :func:`cookbook.memory.choose_offload_run`.
        nvme_path: the NVMe folder the launched plan uses when the choice is NVMe offload.

    Raises:
        EstimateError / ModelNotFoundError: as :func:`cookbook.memory.estimate`.
    """
    from .memory import choose_offload_run, estimate, larger_micro_batch
    choice = choose_offload_run(plan, nvme_ok=nvme_ok, nvme_free_gib=nvme_free_gib, device=device)
    run = plan
    if choice.fits:
        run = choice.plan.replace(nvme_path=nvme_path) if choice.kind == "NVMe offload" and nvme_path else choice.plan
    e = estimate(run, bf16_states=choice.bf16_states, device=device)
    return OffloadRun(machine, choice, run, e, larger_micro_batch(e, device=device))


@dataclass(frozen=True)
class NvmeOption:
    """Whether this notebook runs NVMe offload beside its chosen run, and why not when it does not.

    Attributes:
        plan, config: the NVMe run's plan and DeepSpeed config (the chosen run's when that is the NVMe run).
        kind: ``chosen`` (the chosen run is the NVMe run: no second one), ``run`` (launch it) or ``skipped``.
        reason: why it is skipped, with the fix (None unless skipped).
    """

    plan: Any
    config: Any
    kind: str
    reason: str | None = None

    @property
    def runs(self) -> bool:
        """Launch the NVMe run (a second one beside the chosen run)."""
        return self.kind == "run"

    def __str__(self) -> str:
        return {"chosen": "the chosen run above is the NVMe run: no second one",
                "run": f"NVMe run: {self.plan.label} (its swap files fit the disk and async_io is usable)",
                "skipped": f"NVMe run skipped: {self.reason}"}[self.kind]

    def check(self, run, *, device: str = "cuda"):
        """The NVMe run's swap files and traffic, estimate beside measurement (:func:`cookbook.nvme.check_run`);
        None when it did not run or did not finish."""
        from .nvme import check_run
        if run is None or not run.ok:
            return None
        return check_run(self.plan, self.config, run.summary, device=device)

    def to_record(self, run=None) -> dict:
        """``nvme_status`` (the NVMe run's status, or ``skipped``) and ``nvme_skipped_reason``."""
        status = run.status if (run is not None and self.kind != "skipped") else "skipped"
        return {"nvme_status": status, "nvme_skipped_reason": self.reason}


def nvme_option(chosen_plan, chosen_config, nvme_plan, nvme_config, *, try_nvme: bool, async_io_ok: bool,
                async_io_why: str) -> NvmeOption:
    """Decide the NVMe run: none when the chosen run is NVMe offload already; else run it when ``try_nvme`` and
    DeepSpeed's async I/O works (``async_io_ok``; ``async_io_why`` says why not) and the swap files fit the disk
    (:func:`cookbook.nvme.nvme_disk_refusal`); else skip it, saying what stops it, or, with ``try_nvme`` off,
    whether it could run here."""
    from .nvme import nvme_disk_refusal
    if chosen_plan.offload_param == "nvme":
        return NvmeOption(chosen_plan, chosen_config, "chosen")
    refusal = nvme_disk_refusal(nvme_plan, nvme_config)  # None: the swap files fit the free disk
    blocker = refusal if async_io_ok else async_io_why
    if try_nvme and blocker is None:
        return NvmeOption(nvme_plan, nvme_config, "run")
    if try_nvme:
        return NvmeOption(nvme_plan, nvme_config, "skipped", blocker)
    if blocker:
        return NvmeOption(nvme_plan, nvme_config, "skipped", f"TRY_NVME is False; it could not run here anyway: {blocker}")
    return NvmeOption(nvme_plan, nvme_config, "skipped", f"TRY_NVME is False; it could run here ({nvme_plan.model}'s "
                      "swap files fit the disk and async_io is usable): set TRY_NVME to True")


@dataclass(frozen=True)
class HostRam:
    """What CPU offload asks of one machine's host RAM: the offload variants estimated for the target, with fp32
    states (:attr:`offloads`: optimizer-only, optimizer + parameters, NVMe) and with bf16 states
    (:attr:`offloads_bf16`: the two CPU ones)."""

    offloads: Any
    offloads_bf16: Any

    @property
    def table(self):
        """The offload variants' GPU and host RAM (a :class:`cookbook.memory.SweepResult`, shown as its table)."""
        return self.offloads

    def figure(self):
        from .figures import plot_host_ram
        return plot_host_ram(self.offloads)

    def __str__(self) -> str:
        opt, full = self.offloads[0], self.offloads[1]
        return (f"Host RAM for {full.plan.label} on one {full.plan.num_gpus}-GPU machine: {full.host_gib['total']:.0f} "
                f"GiB at peak (the cookbook's estimate; DeepSpeed's estimator: {full.host_model_states_gib:.0f} GiB of "
                f"model states incl. its 1.5× buffer factor; article 000 says ≥ 520 GB); optimizer-only offload: "
                f"{opt.host_gib['total']:.0f} GiB at {opt.gpu_gib['total']:.1f} GiB per GPU.")

    def to_record(self) -> dict:
        """``host_need_gib`` and ``host_need_bf16_states_gib``: variant label -> host GiB at peak."""
        return {"host_need_gib": {e.plan.label: e.host_gib["total"] for e in self.offloads},
                "host_need_bf16_states_gib": {e.plan.label: e.host_gib["total"] for e in self.offloads_bf16}}


def host_ram(target) -> HostRam:
    """The :class:`HostRam` of ``target`` (a :class:`cookbook.plan.Plan`; :func:`cookbook.memory.sweep` over ZeRO-3
    with the optimizer offloaded, with the parameters too, and both to NVMe)."""
    from .memory import sweep
    offloads = sweep(target, [(3, "cpu", "none"), (3, "cpu", "cpu"), (3, "nvme", "nvme")])
    offloads_bf16 = sweep(target, [(3, "cpu", "none"), (3, "cpu", "cpu")], bf16_states=True)
    return HostRam(offloads, offloads_bf16)


__all__ = ["HostRam", "NvmeOption", "OffloadRun", "choose", "host_ram", "nvme_option"]
