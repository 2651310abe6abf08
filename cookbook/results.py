"""What a notebook records for the tests and the ``cookbook run-all`` report: ``OUTPUT_DIR/results.json``.

* :class:`Recorder` — writes a notebook's results into ``OUTPUT_DIR/results.json`` (rewritten after
  every call, so a failed cell leaves what came before) and its figures as PNG under ``OUTPUT_DIR/figures/``.
* :func:`run_record` — a launched run (:class:`cookbook.launch.RunResult`) as the compact JSON-ready
  dict that ``results.json`` keeps of it.
* :func:`load_results` — read ``results.json`` back.

The file holds ``notebook``, ``title``, ``target``, ``rehearsal``, ``started``, ``headline`` (sentences
with the numbers that matter), ``figures`` (paths relative to the output folder), ``tables`` (name ->
list of records), ``runs`` (label -> :func:`run_record`) and the notebook's own fields.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

from .hardware import hardware_label


def _jsonable(value: Any) -> Any:
    """Plain JSON values: DataFrames become lists of records, dataclasses dicts, paths strings."""
    if hasattr(value, "to_dict") and hasattr(value, "columns"):  # a pandas DataFrame
        return json.loads(value.to_json(orient="records", default_handler=str))
    if hasattr(value, "to_dict") and callable(value.to_dict):
        try:
            return _jsonable(value.to_dict())
        except TypeError:
            pass
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Recorder:
    """Collects one notebook's results into ``OUTPUT_DIR/results.json`` for the tests and the report.

    Every call rewrites the file (atomically), so when a later cell fails, what the earlier ones
    recorded is still there. Figures go to ``OUTPUT_DIR/figures/NAME.png``.

    Args:
        output_dir: the notebook's output folder (created).
        notebook: the notebook's name without ``.ipynb`` (``02_zero2``).
        title: the notebook's title line.
        target: the hardware the notebook targets (``8 × RTX 4090 (24 GiB)``).
        rehearsal: True when this run is the CPU rehearsal (no GPU).
        **fields: more top-level fields to record now.

    The file holds ``notebook``, ``title``, ``target``, ``rehearsal``, ``started``, ``headline``
    (sentences with the numbers that matter), ``figures`` (paths relative to ``output_dir``),
    ``tables`` (name -> list of records), ``runs`` (label -> :func:`run_record`) and whatever the
    notebook adds with :meth:`add`.
    """

    def __init__(self, output_dir: str | os.PathLike, notebook: str, *, title: str = "", target: str = "",
                 rehearsal: bool = True, **fields):
        self.output_dir = Path(output_dir).resolve()
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.output_dir / "results.json"
        self.data: dict[str, Any] = {
            "notebook": notebook, "title": title, "target": target, "rehearsal": bool(rehearsal),
            "started": _dt.datetime.now().isoformat(timespec="seconds"),
            "headline": [], "figures": [], "tables": {}, "runs": {},
        }
        self.add(**fields)

    def add(self, **fields) -> dict:
        """Record top-level fields (values made JSON-ready); returns the whole record."""
        for key, value in fields.items():
            self.data[key] = _jsonable(value)
        self.save()
        return self.data

    def headline(self, sentence: str) -> str:
        """Record one sentence for the report's summary of this notebook; returns it (to print)."""
        self.data["headline"].append(str(sentence))
        self.save()
        return sentence

    def table(self, name: str, frame):
        """Record a pandas DataFrame under ``tables[name]``; returns the frame (to display)."""
        self.data["tables"][name] = _jsonable(frame)
        self.save()
        return frame

    def run(self, label: str, result) -> dict:
        """Record a launched run (:class:`~cookbook.launch.RunResult`) under ``runs[label]``; returns the record."""
        rec = run_record(result)
        self.data["runs"][label] = rec
        self.save()
        return rec

    def figure(self, fig, name: str):
        """Save a matplotlib Figure as ``figures/NAME.png``, record it, close it in pyplot; returns the
        figure (display it as the cell's last expression: it shows once)."""
        folder = self.output_dir / "figures"
        folder.mkdir(exist_ok=True)
        path = folder / f"{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        rel = str(path.relative_to(self.output_dir))
        if rel not in self.data["figures"]:
            self.data["figures"].append(rel)
        self.save()
        try:
            import matplotlib.pyplot as plt
            plt.close(fig)
        except Exception:  # noqa: BLE001 - closing is a display nicety
            pass
        return fig

    def save(self) -> Path:
        self.data["updated"] = _dt.datetime.now().isoformat(timespec="seconds")
        _atomic_write(self.path, json.dumps(self.data, indent=1, default=str))
        return self.path


def load_results(output_dir: str | os.PathLike) -> dict | None:
    """``OUTPUT_DIR/results.json`` as a dict, or None when the notebook wrote none."""
    path = Path(output_dir) / "results.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


_SUMMARY_KEYS = ("world_size", "device", "steps", "first_loss", "last_loss", "first5_mean_loss", "last5_mean_loss",
                 "tokens_per_s", "samples_per_s", "step_time_s", "tflops", "mfu", "peak_gpu_allocated_gib",
                 "peak_gpu_reserved_gib", "host_peak_gib", "model", "num_params", "zero_stage", "offload_optimizer",
                 "offload_param", "precision", "micro_batch", "grad_accum", "seq_len", "global_batch")


def run_record(result) -> dict:
    """A launched run as a compact JSON-ready dict (what ``results.json`` keeps of it).

    Args:
        result: a :class:`cookbook.launch.RunResult` (or a dict with its fields).

    Returns:
        ``status``, ``ok``, ``message``, ``command``, ``run_dir``, ``duration_s``, the summary's numbers
        (:data:`_SUMMARY_KEYS`: loss, throughput, peaks, batch shape), ``loss_fell`` (mean of the last
        5 losses below the first 5), ``losses`` (per step), ``hardware`` (:func:`hardware_label`),
        ``estimate_gpu_gib`` / ``estimate_host_gib`` (the launch's estimate), ``estimate_vs_measured``,
        ``save_verification``, and ``details`` without the full traceback (its last lines kept).
    """
    get = (lambda k, d=None: result.get(k, d)) if isinstance(result, Mapping) else (
        lambda k, d=None: getattr(result, k, d))
    summary = get("summary") or {}
    metrics = get("metrics") or []
    est = get("estimate") or {}
    details = dict(get("details") or {})
    tb = details.pop("traceback", None)
    if tb:
        details["traceback_tail"] = "\n".join(str(tb).strip().splitlines()[-6:])
    rec = {"status": get("status"), "ok": get("status") == "ok", "message": get("message"),
           "command": get("command"), "run_dir": get("run_dir"), "duration_s": round(float(get("duration_s") or 0), 1),
           "returncode": get("returncode"), "hardware": hardware_label(summary or None)}
    for key in _SUMMARY_KEYS:
        rec[key] = summary.get(key)
    f5, l5 = summary.get("first5_mean_loss"), summary.get("last5_mean_loss")
    rec["loss_fell"] = bool(f5 is not None and l5 is not None and l5 < f5)
    rec["losses"] = [m.get("loss") for m in metrics]
    rec["estimate_gpu_gib"] = (est.get("gpu_gib") or {}).get("total") if isinstance(est, Mapping) else None
    rec["estimate_host_gib"] = (est.get("host_gib") or {}).get("total") if isinstance(est, Mapping) else None
    rec["estimate_device"] = est.get("device") if isinstance(est, Mapping) else None
    rec["estimate_vs_measured"] = summary.get("estimate_vs_measured")
    rec["save_verification"] = summary.get("save_verification")
    rec["details"] = _jsonable(details)
    return _jsonable(rec)


def as_record(run) -> dict:
    """A :func:`run_record` dict as it is, anything else (a :class:`~cookbook.launch.RunResult`) made into one."""
    if isinstance(run, Mapping) and "status" in run and "losses" in run:
        return dict(run)
    return run_record(run)


__all__ = ["Recorder", "load_results", "run_record"]
