"""The NVMe road (``nvme_road.road``; its own module so that :mod:`cookbook.nvme` does not import it back): what NVMe offload of a plan puts on the SSD and in host RAM, the traffic per optimizer step, the
step-time floor on each disk given, and the SSD's wear — one result that prints, tabulates and records itself.

``road(plan, disks=[CONSUMER_DISK, disk_here(folder)])`` gathers :func:`cookbook.memory.estimate` (the host peak)
and :func:`cookbook.nvme.estimate_nvme` (SSD bytes, traffic, endurance) for ``plan`` with the optimizer and the
parameters on NVMe; the formulas and their sources stay in those two modules.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

GIB = 2 ** 30
GB = 10 ** 9


def _consumer_disk() -> tuple[str, dict]:
    from .nvme import CONSUMER_PCIE4_SSD
    return f"consumer PCIe 4.0 SSD ({CONSUMER_PCIE4_SSD['source']})", CONSUMER_PCIE4_SSD


def consumer_disk() -> tuple[str, dict]:
    """``(name, bandwidth)`` of the datasheet consumer PCIe 4.0 SSD (:data:`cookbook.nvme.CONSUMER_PCIE4_SSD`)."""
    return _consumer_disk()


def disk_here(nvme_dir: str, *, facts: str = "", size_mib: int = 32, time_limit_s: float = 10.0):
    """``(name, bandwidth)`` of the disk at ``nvme_dir``: from a facts file when ``facts`` is given (its
    ``nvme_bandwidth``, from ``cookbook env --nvme-path DIR --dump-facts F`` on the NVMe box), else the bandwidth
    last recorded in ``nvme_dir``, else a bounded plain-file probe (``size_mib`` MiB, O_DIRECT, its files deleted;
    :func:`cookbook.nvme.measure_bandwidth`). The bandwidth is ``{}`` when nothing was measured (the road then
    leaves the disk out of its floors and records that)."""
    from . import nvme
    if facts:
        from .env import load_facts
        return f"this machine's disk, facts file {facts}", load_facts(facts).get("nvme_bandwidth") or {}
    Path(nvme_dir).mkdir(parents=True, exist_ok=True)
    bw = nvme.recorded_bandwidth(nvme_dir) or nvme.measure_bandwidth(nvme_dir, size_mib=size_mib,
                                                                     time_limit_s=time_limit_s, method="plain")
    return f"this machine's disk, measured in {nvme_dir} ({bw.get('method')})", bw or {}


@dataclass(frozen=True)
class NvmeRoad:
    """NVMe offload of one plan, estimated.

    Attributes:
        plan: the plan with the optimizer and the parameters on NVMe.
        estimate: its :class:`cookbook.memory.MemoryEstimate` (host RAM at peak, whether it fits the host).
        io: its :class:`cookbook.nvme.NvmeEstimate` (SSD bytes, host buffers, traffic, endurance).
        disks: ``(name, {"read_gb_s", "write_gb_s", ...})`` pairs the floors are computed on; the first is the
            reference disk of the sentence (the consumer SSD in notebook 06).
        skipped: ``(name, bandwidth)`` of disks given without a bandwidth (not measured).
    """

    plan: Any
    estimate: Any
    io: Any
    disks: tuple = ()
    skipped: tuple = ()

    @property
    def disk_gib(self) -> float:
        return self.io.disk_bytes / GIB

    @property
    def read_gb_per_step(self) -> float:
        return self.io.read_bytes_per_step / GB

    @property
    def write_gb_per_step(self) -> float:
        return self.io.write_bytes_per_step / GB

    @property
    def wear(self) -> dict:
        """:meth:`cookbook.nvme.NvmeEstimate.endurance`: TB written per 1,000 steps, steps until the TBW rating."""
        return self.io.endurance()

    @property
    def floors(self):
        """The SSD-only step-time floor per optimizer step on each disk (a pandas DataFrame)."""
        return self.io.floor_frame(self.disks, self.plan.tokens_per_step)

    @property
    def table(self):
        """SSD and host RAM per state, GiB (a pandas DataFrame, :meth:`cookbook.nvme.NvmeEstimate.to_frame`)."""
        return self.io.to_frame()

    @property
    def headline(self) -> str:
        """One sentence: SSD and host GiB, whether the host fits, traffic per step and the floor on the first disk."""
        p, e = self.plan, self.estimate
        fits = {True: "fits", False: "does not fit", None: "host RAM not given:"}[e.fits_host]
        host = f"{p.host_memory_gib:g} GiB" if p.host_memory_gib is not None else "unknown"
        out = (f"{p.model} with optimizer and parameters on NVMe: {self.disk_gib:.1f} GiB on the SSD, "
               f"{e.host_gib['total']:.1f} GiB host RAM at peak ({fits} {host}); per optimizer step "
               f"{self.read_gb_per_step:.0f} GB read and {self.write_gb_per_step:.0f} GB written")
        if not self.disks:
            return out + "."
        name, d = self.disks[0]
        floor = self.floors["SSD-only floor s/step"].iloc[0]
        return out + (f": at least {floor:.1f} s per step on the {name.split(' (')[0]} "
                      f"({d['read_gb_s']:g}/{d['write_gb_s']:g} GB/s).")

    def lines(self) -> list[str]:
        """The road in words: :attr:`headline`, the SSD's wear, the disks not measured, DeepSpeed's notes."""
        from .nvme import ENDURANCE_NOTE
        w = self.wear
        steps = f"~{w['steps_to_tbw']:,.0f}" if w["steps_to_tbw"] else "no"
        out = [self.headline,
               f"Endurance: {w['write_tb_per_1000_steps']:.0f} TB written per 1,000 steps; a {w['tbw_tb']:,.0f} TBW "
               f"drive reaches its rating after {steps} steps. {ENDURANCE_NOTE}"]
        out += [f"{name}: no bandwidth measured, left out of the floors" for name, _ in self.skipped]
        return out + list(self.io.notes)

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        import html
        return "<pre>" + html.escape(str(self)) + "</pre>" + self.table.to_html(index=False)

    def to_record(self) -> dict:
        """The JSON shape ``results.record`` keeps (GiB, GB, TB; the floors as records; the disk measured here)."""
        here = [d for _, d in (*self.disks[1:], *self.skipped)]
        return {"plan": self.plan.label, "disk_gib": self.disk_gib, "host_nvme_buffers_gib": self.io.host_bytes / GIB,
                "host_peak_gib": self.estimate.host_gib["total"], "fits_host": self.estimate.fits_host,
                "read_gb_per_step": self.read_gb_per_step, "write_gb_per_step": self.write_gb_per_step,
                "floors": self.floors.to_dict("records"),
                "write_tb_per_1000_steps": self.wear["write_tb_per_1000_steps"],
                "steps_to_tbw": self.wear["steps_to_tbw"], "bandwidth_here": here[0] if here else None,
                "headline": self.headline}


def road(plan, disks: Iterable[tuple[str, Mapping] | None] | None = None, *, bf16_states: bool = False,
         spec=None) -> NvmeRoad:
    """NVMe offload of ``plan`` (its optimizer and parameters put on NVMe, everything else kept), on ``disks``.

    Args:
        plan: a :class:`cookbook.plan.Plan` (its ``host_memory_gib`` is the RAM the host peak is checked against;
            without an ``nvme_path`` the estimate assumes ``/local_nvme``).
        disks: ``(name, {"read_gb_s", "write_gb_s"})`` pairs (:func:`consumer_disk`, :func:`disk_here`); None
            entries are dropped, disks without a read bandwidth listed as not measured. Default: the consumer SSD.
        bf16_states: bf16 master weights and Adam states (lossy) instead of fp32.

    Raises:
        EstimateError / ModelNotFoundError: as :func:`cookbook.memory.estimate`.
    """
    from .memory import estimate
    from .nvme import estimate_nvme
    p = plan.replace(zero_stage=3, offload_optimizer="nvme", offload_param="nvme",
                     nvme_path=plan.nvme_path or "/local_nvme")  # the folder changes no estimate
    given = [d for d in (disks if disks is not None else [consumer_disk()]) if d is not None]
    measured = tuple((n, dict(d)) for n, d in given if d and d.get("read_gb_s") and d.get("write_gb_s"))
    skipped = tuple((n, dict(d or {})) for n, d in given if not (d and d.get("read_gb_s") and d.get("write_gb_s")))
    return NvmeRoad(p, estimate(p, bf16_states=bf16_states, spec=spec),
                    estimate_nvme(p, spec=spec, bf16_states=bf16_states), measured, skipped)


__all__ = ["NvmeRoad", "consumer_disk", "disk_here", "road"]
