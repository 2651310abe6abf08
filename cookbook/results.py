"""What a notebook records for the tests and the ``cookbook run-all`` report: ``OUTPUT_DIR/results.json``.

* :func:`record` — one call in a notebook's last cell writes everything: the cells above stay plain
  library calls a reader can copy into their own project, with no bookkeeping to delete.
* :func:`run_record` — a launched run (:class:`cookbook.launch.RunResult`) as the compact JSON-ready
  dict that ``results.json`` keeps of it.
* :func:`load_results` — read ``results.json`` back.
* :func:`machine_record` — this machine (GPUs, host RAM, CPU cores, library versions, date), kept as
  ``machine`` in ``results.json`` for the report's header.
* :func:`loss_pair` — the two losses a table shows for a run (first → last step, or 5-step means).
* :func:`complete_record` — an older or moved record completed from its run folder (world size, GPU cap,
  host RSS during the steps), for ``cookbook run-all --report-only``.

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

from .hardware import _run_cap_gib, _run_options, hardware_label, nvml_gpus


def _jsonable(value: Any) -> Any:
    """Plain JSON values: DataFrames become lists of records (a named index kept as a column), dataclasses
    dicts, paths strings."""
    if hasattr(value, "to_dict") and hasattr(value, "columns"):  # a pandas DataFrame
        names = [n for n in getattr(value.index, "names", [None]) if n is not None]
        if names and not set(names) & set(value.columns):  # a named index (runs_frame's "run") is a column, not lost
            value = value.reset_index()
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


#: The keys :func:`record` writes itself (``recorded`` is the time of the call); a notebook field may not
#: reuse one of them.
RECORD_KEYS = ("notebook", "title", "target", "rehearsal", "recorded", "headline", "figures", "tables", "runs",
               "machine", "central")


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
            ``to_dict()`` dicts, NaN null); a name in :data:`RECORD_KEYS` is refused.

    Returns:
        the path of ``results.json`` (written atomically: a reader never sees half a file).

    Raises:
        ValueError: a field named like one of :data:`RECORD_KEYS` (it would replace record()'s own value).
    """
    from .hardware import rehearsal as on_rehearsal
    clash = sorted(set(fields) & set(RECORD_KEYS))
    if clash:  # a field of one of these names would silently replace what record() writes itself
        raise ValueError(f"results.record({notebook!r}): the field(s) {', '.join(clash)} would overwrite record()'s "
                         f"own key(s) of that name ({', '.join(RECORD_KEYS)}); nothing was written. Fix: give the "
                         f"field another name in the call, e.g. {clash[0]}_details= instead of {clash[0]}=")
    out = Path(output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "notebook": notebook, "title": title, "target": target,
        "rehearsal": bool(on_rehearsal() if rehearsal is None else rehearsal),
        "recorded": _dt.datetime.now().isoformat(timespec="seconds"),
        "headline": [str(s) for s in headline if s], "figures": [], "tables": {}, "runs": {},
        "machine": machine_record(),
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
                 "offload_param", "precision", "micro_batch", "grad_accum", "seq_len", "global_batch",
                 "gpu_memory_cap_gib")

#: The run's shape as planned (``MemoryEstimate.plan``), kept for a run that left no summary (an out-of-memory
#: at start): record key -> Plan field.
_PLAN_KEYS = {"world_size": "num_gpus", "model": "model", "micro_batch": "micro_batch", "grad_accum": "grad_accum",
              "seq_len": "seq_len", "zero_stage": "zero_stage", "offload_optimizer": "offload_optimizer",
              "offload_param": "offload_param", "precision": "precision"}

#: Below this many logged steps the first 5 and the last 5 steps overlap, so a table shows the first and the
#: last step's loss instead of the two 5-step means (which would be means over the same steps).
LOSS_MEANS_MIN_STEPS = 10


def loss_pair(rec: Mapping) -> dict | None:
    """The two losses a table shows for a run, and what they are.

    With fewer than :data:`LOSS_MEANS_MIN_STEPS` logged steps the first and last 5 steps overlap (with <= 5
    steps they are the same steps, and their means are equal): then the first and the last step's loss;
    otherwise the means of the first 5 and the last 5 steps (``first5_mean_loss`` / ``last5_mean_loss``).

    Args:
        rec: a :func:`run_record` dict (``losses``, ``steps``, ``first_loss``/``last_loss``, the 5-step means).

    Returns:
        ``{"first", "last", "steps", "basis"}`` (``basis``: ``"step 1 → step N"`` or ``"5-step means"``),
        or None when the run logged no loss.
    """
    losses = [v for v in (rec.get("losses") or []) if v is not None]
    n = len(losses) or rec.get("steps") or 0
    if n and n < LOSS_MEANS_MIN_STEPS:
        first = rec.get("first_loss") if rec.get("first_loss") is not None else (losses[0] if losses else None)
        last = rec.get("last_loss") if rec.get("last_loss") is not None else (losses[-1] if losses else None)
        basis = f"step 1 → step {n}"
    else:
        first, last = rec.get("first5_mean_loss"), rec.get("last5_mean_loss")
        if first is None and len(losses) >= LOSS_MEANS_MIN_STEPS:
            first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        basis = "5-step means"
    if first is None or last is None:
        return None
    return {"first": float(first), "last": float(last), "steps": n, "basis": basis}


def run_record(result) -> dict:
    """A launched run as a compact JSON-ready dict (what ``results.json`` keeps of it).

    Args:
        result: a :class:`cookbook.launch.RunResult` (or a dict with its fields).

    Returns:
        ``status``, ``ok``, ``message``, ``command``, ``run_dir``, ``duration_s``, the summary's numbers
        (:data:`_SUMMARY_KEYS`: loss, throughput, peaks, batch shape, ``gpu_memory_cap_gib``); for a run that
        left no summary (an out-of-memory at start) the world size, model and batch shape as planned
        (``shape_from``: ``"plan"``, else ``"summary"``); ``loss_fell`` (the later of :func:`loss_pair`'s two
        losses below the earlier); ``losses`` (per step); ``host_rss_steps_max_gib`` (the largest host RSS of
        rank 0 at the end of a step, ``metrics.jsonl``'s ``host_rss_gib``: what the steps held, beside the
        whole run's ``host_peak_gib``); ``hardware`` (:func:`hardware_label`); ``estimate_gpu_gib`` (the
        launch's GPU estimate less the CUDA context: the basis of the measured reserved peak, as in
        :func:`cookbook.memory.compare`), ``estimate_gpu_allocated_gib`` (less the allocator overhead too: the
        basis of the allocated peak), ``estimate_host_gib``, ``estimate_vs_measured`` (the run's own
        estimate for the shape that ran beside each peak, from ``summary.json``), ``save_verification``, and
        ``details`` without the full traceback (its last lines kept).
    """
    get = (lambda k, d=None: result.get(k, d)) if isinstance(result, Mapping) else (
        lambda k, d=None: getattr(result, k, d))
    summary = get("summary") or {}
    metrics = get("metrics") or []
    est = get("estimate") or {}
    est = est if isinstance(est, Mapping) else {}
    details = dict(get("details") or {})
    tb = details.pop("traceback", None)
    if tb:
        details["traceback_tail"] = "\n".join(str(tb).strip().splitlines()[-6:])
    rec = {"status": get("status"), "ok": get("status") == "ok", "message": get("message"),
           "command": get("command"), "run_dir": get("run_dir"), "duration_s": round(float(get("duration_s") or 0), 1),
           "returncode": get("returncode"),
           "hardware": hardware_label(SimpleNamespace(summary=summary or None, run_dir=get("run_dir"), estimate=est))}
    for key in _SUMMARY_KEYS:
        rec[key] = summary.get(key)
    plan = est.get("plan") if isinstance(est.get("plan"), Mapping) else {}
    rec["shape_from"] = "summary" if summary else ("plan" if plan else None)
    if not summary:
        for key, field in _PLAN_KEYS.items():
            rec[key] = plan.get(field)
    if rec["gpu_memory_cap_gib"] is None:
        rec["gpu_memory_cap_gib"] = _run_cap_gib(SimpleNamespace(summary=summary, run_dir=get("run_dir")))
    rec["losses"] = [m.get("loss") for m in metrics]
    pair = loss_pair(rec)
    rec["loss_fell"] = bool(pair and pair["last"] < pair["first"])
    rec["host_rss_steps_max_gib"] = _rss_steps_max(metrics)
    # the estimate on the basis of each measured peak (torch's max_memory_reserved does not count the CUDA
    # context; max_memory_allocated not the allocator's cache either), as cookbook.memory.compare sets them
    gpu_est = est.get("gpu_gib") or {}
    context = gpu_est.get("cuda_context", 0.0)
    rec["estimate_gpu_gib"] = (gpu_est["total"] - context) if "total" in gpu_est else None
    rec["estimate_gpu_allocated_gib"] = (gpu_est["total"] - context - gpu_est.get("allocator_overhead", 0.0)
                                         if "total" in gpu_est else None)
    rec["estimate_host_gib"] = (est.get("host_gib") or {}).get("total")
    rec["estimate_device"] = est.get("device")
    rec["estimate_vs_measured"] = summary.get("estimate_vs_measured")
    rec["save_verification"] = summary.get("save_verification")
    rec["details"] = _jsonable(details)
    return _jsonable(rec)


def _rss_steps_max(metrics) -> float | None:
    """The largest host RSS (GiB) rank 0 logged at the end of a step (``metrics.jsonl``'s ``host_rss_gib``)."""
    rss = [m["host_rss_gib"] for m in metrics if isinstance(m.get("host_rss_gib"), (int, float))]
    return max(rss) if rss else None


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def relocated_run_dir(run_dir: str | os.PathLike | None, notebook_dir: str | os.PathLike | None) -> Path | None:
    """The run folder of a record, also when the run-all folder was moved or copied (``docs/gpu/…``).

    A run folder inside the notebook's folder (``/tmp/x/05_final_8x4090/run``) is looked for at the same place
    under ``notebook_dir`` first (``docs/gpu/gpu-1x24gib/05_final_8x4090/run``: the copy being reported on),
    then where it was recorded.

    Returns:
        the folder, or None when neither exists.
    """
    if not run_dir:
        return None
    path = Path(run_dir)
    if notebook_dir:
        nb = Path(notebook_dir)
        parts = path.parts
        if nb.name in parts:
            i = len(parts) - 1 - parts[::-1].index(nb.name)
            moved = nb.joinpath(*parts[i + 1:])
            if moved.is_dir():
                return moved
    return path if path.is_dir() else None


def complete_record(rec: Mapping, notebook_dir: str | os.PathLike | None = None) -> dict:
    """A :func:`run_record` dict with what an older cookbook did not keep filled in from the run's folder
    (found with :func:`relocated_run_dir`): measured values are never replaced.

    * ``world_size``, ``model`` and the batch shape of a run that left no summary, from what the launch
      wrote there (``run.resolved.yaml``, ``run.json``: what was launched; ``shape_from`` ``"run folder"``);
    * ``gpu_memory_cap_gib`` from its ``--emulate-gpu-memory-gib``, and ``hardware`` relabelled with it
      (:func:`hardware_label` over ``summary.json``);
    * ``host_rss_steps_max_gib`` from ``metrics.jsonl``'s ``host_rss_gib``.

    Args:
        rec: the record (not modified).
        notebook_dir: the notebook's output folder now (a run-all folder may have been moved).

    Returns:
        a new dict; the record as it is when its folder is not found.
    """
    out = dict(rec)
    folder = relocated_run_dir(rec.get("run_dir"), notebook_dir)
    if folder is None:
        return out
    opts = _run_options(SimpleNamespace(run_dir=str(folder)))
    if out.get("world_size") is None and opts.get("world_size"):
        out["world_size"] = opts["world_size"]
        for key in ("model", "micro_batch", "grad_accum", "seq_len", "zero_stage", "offload_optimizer",
                    "offload_param", "precision"):
            if out.get(key) is None and opts.get(key) is not None:
                out[key] = opts[key]
        out["shape_from"] = "run folder"
    if out.get("gpu_memory_cap_gib") is None and opts.get("emulate_gpu_memory_gib"):
        out["gpu_memory_cap_gib"] = float(opts["emulate_gpu_memory_gib"])
    summary = _read_json(folder / "summary.json")
    if summary and not summary.get("gpu_memory_cap_gib") and out.get("gpu_memory_cap_gib"):
        summary = dict(summary, gpu_memory_cap_gib=out["gpu_memory_cap_gib"])
    # made here, not on the machine that ran it: a run without a summary gets an unnamed GPU
    label = hardware_label(SimpleNamespace(summary=summary, run_dir=str(folder),
                                           estimate={"plan": {"num_gpus": out.get("world_size")},
                                                     "device": out.get("estimate_device")}), here=False)
    old = str(out.get("hardware") or "")
    if not old or old == "GPU" or old.startswith("GPU capped") or (label != old and label.startswith(old)):
        out["hardware"] = label          # generic before, or the same label without the cap
    if out.get("host_rss_steps_max_gib") is None:
        from .procs import metrics_rows
        out["host_rss_steps_max_gib"] = _rss_steps_max(metrics_rows(folder))
    return out


_DIST_NAMES = ("torch", "transformers", "accelerate", "deepspeed")


def machine_record() -> dict:
    """This machine, for the report's header: ``gpus`` (NVML name and total GiB of each visible GPU; empty on
    the CPU rehearsal), ``host_memory_gib`` (psutil's total), ``cpu_cores``, ``python``, the installed
    versions of torch, transformers, accelerate and deepspeed (``importlib.metadata``; None when not
    installed) and ``date`` (ISO, this machine's clock). Never initialises CUDA.
    """
    import platform
    from importlib import metadata
    rec: dict[str, Any] = {"gpus": nvml_gpus(), "host_memory_gib": None, "cpu_cores": os.cpu_count(),
                           "python": platform.python_version(), "date": _dt.date.today().isoformat()}
    try:
        import psutil
        rec["host_memory_gib"] = round(psutil.virtual_memory().total / 2 ** 30, 1)
    except Exception:  # noqa: BLE001 - psutil missing: unknown
        pass
    for name in _DIST_NAMES:
        try:
            rec[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            rec[name] = None
    return rec


def as_record(run) -> dict:
    """A :func:`run_record` dict as it is, anything else (a :class:`~cookbook.launch.RunResult`) made into one."""
    if isinstance(run, Mapping) and "status" in run and "losses" in run:
        return dict(run)
    return run_record(run)



def reference_files(directory=None):
    """Each ``*.json`` of the GPU reference folder (``directory``, default ``$COOKBOOK_REFERENCE`` or
    ``data/reference``), sorted by name, as ``(file name, parsed JSON, None)`` or ``(file name, None, error)``
    for a file that cannot be read or parsed; nothing when the folder is missing. The one reader of that
    folder's files (:func:`cookbook.reference.reference_results`, :func:`cookbook.tables.estimate_check`)."""
    import os
    from .models import DATA_DIR
    folder = Path(directory or os.environ.get("COOKBOOK_REFERENCE") or DATA_DIR / "reference")
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            yield path.name, json.loads(path.read_text()), None
        except (OSError, json.JSONDecodeError) as exc:
            yield path.name, None, f"{type(exc).__name__}: {exc}"


def records_in(data) -> list[dict]:
    """The run records in one reference file (``data/reference/*.json``, read by :mod:`cookbook.reference`
    and :func:`cookbook.tables.estimate_check`): a list, or a dict with ``rungs``/``runs``/``results`` (its
    other keys shared by every record, under ``_common``), or a dict that is itself one record."""
    if isinstance(data, list):
        return [dict(r) for r in data if isinstance(r, Mapping)]
    if not isinstance(data, Mapping):
        return []
    for key in ("rungs", "runs", "results"):
        if isinstance(data.get(key), list):
            common = {k: v for k, v in data.items() if k not in ("rungs", "runs", "results")}
            return [dict(r, _common=common) for r in data[key] if isinstance(r, Mapping)]
    return [dict(data)] if "status" in data or "summary" in data else []


__all__ = ["LOSS_MEANS_MIN_STEPS", "RECORD_KEYS", "as_record", "complete_record", "load_results", "loss_pair", "machine_record",
           "record", "records_in", "reference_files", "relocated_run_dir", "run_record"]
