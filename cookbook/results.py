"""What a notebook records for the tests and the ``cookbook run-all`` report: ``OUTPUT_DIR/results.json``.

* :func:`record` — one call in a notebook's last cell writes everything: the cells above stay plain
  library calls a reader can copy into their own project, with no bookkeeping to delete.
* :func:`run_record` — a launched run (:class:`cookbook.launch.RunResult`) as the compact JSON-ready
  dict that ``results.json`` keeps of it.
* :func:`load_results` — read ``results.json`` back.

The file holds ``notebook``, ``title``, ``target``, ``rehearsal``, ``recorded`` (when), ``headline``
(sentences with the numbers that matter), ``figures`` (paths relative to the output folder), ``tables``
(name -> list of records), ``runs`` (label -> :func:`run_record`), ``central`` (the run the story rests
on and the outcome the notebook expected of it) and the notebook's own fields.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Mapping

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


def record(output_dir: str | os.PathLike, notebook: str, *, title: str = "", target: str = "",
           rehearsal: bool | None = None, headline: Iterable[str] = (), runs: Mapping[str, Any] | None = None,
           tables: Mapping[str, Any] | None = None, figures: Mapping[str, Any] | None = None,
           central: Any = None, expected: str | None = None, **fields) -> Path:
    """Write one notebook's results, in one call from its last cell: ``OUTPUT_DIR/results.json`` for the
    tests and the ``cookbook run-all`` report, and its figures as ``OUTPUT_DIR/figures/NAME.png``.

    The cells above it stay plain calls into the library that a reader can copy; this call gathers what
    they computed. A notebook that stops before it records nothing new (the executed notebook keeps the
    traceback, and the report says the notebook failed).

    Args:
        output_dir: the notebook's output folder (created).
        notebook: the notebook's name without ``.ipynb`` (``02_zero2``).
        title: the notebook's title line.
        target: the hardware the notebook targets (``8 × RTX 4090 (24 GiB)``).
        rehearsal: True for the CPU rehearsal; None asks this machine (:func:`cookbook.hardware.rehearsal`).
        headline: sentences with the numbers that matter, for the report's summary (empty ones skipped).
        runs: label -> :class:`~cookbook.launch.RunResult` (kept as :func:`run_record`).
        tables: name -> pandas DataFrame, or anything with ``to_frame()`` (a lint report, a config diff,
            a sweep), kept as a list of records.
        figures: name -> matplotlib Figure (None skipped), saved as ``figures/NAME.png`` (110 dpi).
        central: the run the notebook's story rests on: its label in ``runs``, or the run itself (a
            :class:`~cookbook.launch.RunResult`, found among ``runs`` or kept under the label ``central``).
        expected: how the central run is expected to end (``ok``, or ``gpu_oom`` where the story is the
            out-of-memory; the notebook's ``EXPECTED_OUTCOME``). ``cookbook run-all`` marks the notebook
            ``unexpected`` when the central run's status differs or no central run is given
            (:func:`cookbook.runall.central_outcome`). Kept as ``central``: ``run``, ``status``,
            ``expected``, ``message``, ``as_expected``.
        **fields: the notebook's own values, made JSON-ready (DataFrames become records, objects with
            ``to_dict()`` dicts, NaN null).

    Returns:
        the path of ``results.json`` (written atomically: a reader never sees half a file).
    """
    from .hardware import rehearsal as on_rehearsal
    out = Path(output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "notebook": notebook, "title": title, "target": target,
        "rehearsal": bool(on_rehearsal() if rehearsal is None else rehearsal),
        "recorded": _dt.datetime.now().isoformat(timespec="seconds"),
        "headline": [str(s) for s in headline if s], "figures": [], "tables": {}, "runs": {},
    }
    runs = dict(runs or {})
    label = None
    if isinstance(central, str):
        label = central
    elif central is not None:
        label = next((k for k, v in runs.items() if v is central), None)
        if label is None:
            label = "central"
            runs[label] = central
    for name, result in runs.items():
        data["runs"][str(name)] = run_record(result)
    if label is not None or expected is not None:
        rec = data["runs"].get(str(label)) if label is not None else None
        status = rec.get("status") if rec else None
        message = rec.get("message") if rec else (
            f"no run labelled {label!r} among {sorted(data['runs'])}" if label is not None else "no central run given")
        data["central"] = {"run": label if rec else None, "status": status, "expected": expected, "message": message,
                           "as_expected": bool(rec) and (expected is None or status == expected)}
    for name, frame in (tables or {}).items():
        if frame is not None:
            data["tables"][str(name)] = _jsonable(frame.to_frame() if hasattr(frame, "to_frame") else frame)
    if figures:
        folder = out / "figures"
        folder.mkdir(exist_ok=True)
        for name, fig in figures.items():
            if fig is None:
                continue
            fig.savefig(folder / f"{name}.png", dpi=110, bbox_inches="tight")
            data["figures"].append(f"figures/{name}.png")
    for key, value in fields.items():
        data[key] = _jsonable(value)
    path = out / "results.json"
    _atomic_write(path, json.dumps(data, indent=1, default=str))
    return path


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
        ``estimate_gpu_gib`` (the launch's GPU estimate less the CUDA context: the basis of the measured reserved
        peak, as in :func:`cookbook.memory.compare`) / ``estimate_host_gib``, ``estimate_vs_measured``,
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
           "returncode": get("returncode"),
           "hardware": hardware_label(SimpleNamespace(summary=summary or None, run_dir=get("run_dir")))}
    for key in _SUMMARY_KEYS:
        rec[key] = summary.get(key)
    f5, l5 = summary.get("first5_mean_loss"), summary.get("last5_mean_loss")
    rec["loss_fell"] = bool(f5 is not None and l5 is not None and l5 < f5)
    rec["losses"] = [m.get("loss") for m in metrics]
    # the estimate on the basis of the measured reserved peak (torch's max_memory_reserved does not count the
    # CUDA context), as cookbook.memory.compare sets them side by side
    gpu_est = (est.get("gpu_gib") or {}) if isinstance(est, Mapping) else {}
    rec["estimate_gpu_gib"] = (gpu_est["total"] - gpu_est.get("cuda_context", 0.0)) if "total" in gpu_est else None
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


__all__ = ["as_record", "load_results", "record", "run_record"]
