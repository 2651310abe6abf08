"""The one-GPU stand-in for a multi-GPU target: a model with the target's per-rank share of parameters, whose
model states on its ranks equal the target's per-rank states under ZeRO-3 only (every state partitioned), not
under ZeRO-2 (the 16-bit parameters stay whole on every rank) — one result that prints and records itself."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StandIn:
    """Which model stands in for ``target_model`` on ``target_gpus`` ranks, and how far its ZeRO-2 memory is from
    the target's.

    Attributes:
        model, ranks: the stand-in and its ranks; ``model`` None when this run is the target itself.
        run_model: the model this notebook runs (the stand-in itself, or the CPU rehearsal's tiny model).
        target_model, target_gpus: the target.
        zero3, zero2: :func:`cookbook.memory.share_ratio` under ZeRO-3 and ZeRO-2 (share and target GiB, ratio).
        stand_in_estimate, target_estimate: :func:`cookbook.memory.estimate` under ZeRO-2 at the target's batch shape.
    """

    model: str | None
    ranks: int | None
    run_model: str
    target_model: str
    target_gpus: int
    zero3: dict | None = None
    zero2: dict | None = None
    stand_in_estimate: Any = None
    target_estimate: Any = None

    @property
    def zero2_stand_in_gpu_gib(self) -> float:
        return self.stand_in_estimate.gpu_gib["total"]

    @property
    def zero2_target_gpu_gib(self) -> float:
        return self.target_estimate.gpu_gib["total"]

    @property
    def _ranks_words(self) -> str:
        return f"{self.ranks} rank{'s' if self.ranks != 1 else ''}"

    @property
    def whose(self) -> str:
        if self.model == self.run_model:
            return "this run's model"
        return (f"the model notebooks/params/gpu-1x24gib.yaml runs on one GPU; this run's {self.run_model} is the "
                "CPU rehearsal's")

    @property
    def sentence(self) -> str:
        if self.model is None:
            return f"this run is the target itself ({self.target_model} on {self.target_gpus} ranks): no stand-in"
        s, t = self.zero2_stand_in_gpu_gib, self.zero2_target_gpu_gib
        return (f"{self.model} on {self._ranks_words} ({self.whose}) under ZeRO-2 at the target's batch shape "
                f"estimates {s:.1f} GiB per GPU; the real {self.target_model} on {self.target_gpus} ranks needs "
                f"{t:.1f} GiB per GPU, {t - s:.1f} GiB more: the stand-in equals {self.target_model}'s per-rank share "
                "for ZeRO-3 model states only")

    def lines(self) -> list[str]:
        if self.model is None:
            return [self.sentence]
        z3, z2, t = self.zero3, self.zero2, self.target_model
        return [f"stand-in: {self.model} on {self._ranks_words}, {self.whose}",
                f"ZeRO-3 model states per rank: {z3['share_gib']:.2f} GiB (stand-in) vs {z3['target_gib']:.2f} GiB "
                f"({t} on {self.target_gpus} ranks), ratio {z3['ratio']:.4f}: the same share",
                f"ZeRO-2 model states per rank: {z2['share_gib']:.2f} GiB (stand-in) vs {z2['target_gib']:.2f} GiB, "
                f"ratio {z2['ratio']:.2f}: ZeRO-2 keeps {t}'s 16-bit parameters whole on every rank "
                f"({self.target_estimate.gpu_gib['params_16bit']:.1f} GiB, against the stand-in's "
                f"{self.stand_in_estimate.gpu_gib['params_16bit']:.1f} GiB)",
                self.sentence]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_record(self) -> dict:
        """``model``, ``ranks``, ``zero3_*`` / ``zero2_*`` (share GiB, target GiB, ratio), the ZeRO-2 GPU GiB of
        the stand-in and of the target, and ``sentence``; only ``model`` (None) and ``sentence`` without one."""
        if self.model is None:
            return {"model": None, "sentence": self.sentence}
        z3, z2 = self.zero3, self.zero2
        return {"model": self.model, "ranks": self.ranks, "zero3_share_gib": z3["share_gib"],
                "zero3_target_gib": z3["target_gib"], "zero3_ratio": z3["ratio"], "zero2_share_gib": z2["share_gib"],
                "zero2_target_gib": z2["target_gib"], "zero2_ratio": z2["ratio"],
                "zero2_stand_in_gpu_gib": self.zero2_stand_in_gpu_gib,
                "zero2_target_gpu_gib": self.zero2_target_gpu_gib, "sentence": self.sentence}


def choose(target, run, target_estimate) -> StandIn:
    """The :class:`StandIn` for ``target`` (a :class:`cookbook.plan.Plan` under ZeRO-2, ``target_estimate`` its
    estimate) seen from this machine's ``run``: the run's own model when it is a stand-in (ZeRO-3 states within
    1 % of the target's share), else the one the one-GPU parameter file runs (:data:`cookbook.memory.SHARE_MODEL`
    on one rank); no stand-in when the run is the target itself."""
    from . import memory
    tm, tg = target.model, target.num_gpus
    if run.model == tm and run.num_gpus == tg:
        return StandIn(None, None, run.model, tm, tg)
    this_run = memory.share_ratio(run.model, tm, world_size=tg, share_ranks=run.num_gpus)  # ZeRO-3
    model, ranks = memory.SHARE_MODEL, 1
    if abs(this_run["ratio"] - 1) < 0.01:
        model, ranks = run.model, run.num_gpus
    z3 = memory.share_ratio(model, tm, world_size=tg, share_ranks=ranks, zero_stage=3)
    z2 = memory.share_ratio(model, tm, world_size=tg, share_ranks=ranks, zero_stage=2)
    est = memory.estimate(target.replace(model=model, num_gpus=ranks), device="cuda")
    return StandIn(model, ranks, run.model, tm, tg, z3, z2, est, target_estimate)


__all__ = ["StandIn", "choose"]
