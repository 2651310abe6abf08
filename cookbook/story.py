"""The setup the story notebooks (02-06) share: the machine the story is about (the ``TARGET_*`` parameters), the
run this machine does (the other parameters), and what follows from this machine (CPU rehearsal or GPU, warm-up,
watchdog) — one result that prints itself."""
from __future__ import annotations

from dataclasses import dataclass
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
        """The launch helper's default warm-up: 5 % of the steps, at least 1."""
        return max(1, self.max_steps // 20)

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


__all__ = ["HANG_TIMEOUT_S", "Setup", "setup"]
