"""What real machines measured and recorded: training runs on GPUs (``data/reference/*.json``, written by
the benchmarks) and environment facts of RTX 4090 and H200 boxes (``tests/fixtures/facts``).

* :func:`reference_results` / :func:`reference_frame` / :func:`reference_notes` — the GPU measurements,
  labelled with the hardware each came from; an empty result when there are none.
* :func:`beside_reference` — a notebook's own runs and the GPU measurements for the same step in one table.
* :func:`check_recorded` — the environment rules (:func:`cookbook.env.check`) run on recorded facts.

Units: GiB = 2**30 bytes; tokens/s over the whole world (all ranks).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from .models import DATA_DIR
from .results import as_record
from .tables import rounded, tidy_frame

#: Results measured on GPUs by the maintainers (JSON files; see :func:`reference_results`).
REFERENCE_DIR = Path(os.environ.get("COOKBOOK_REFERENCE", DATA_DIR / "reference"))

#: Facts recorded on real machines with ``cookbook env --dump-facts`` (RTX 4090 boxes, 2 × H200).
FACTS_DIR = DATA_DIR.parent / "tests" / "fixtures" / "facts"


#: Which GPU measurements each notebook shows, for records without a ``notebook`` field: the
#: benchmark groups of ``data/reference`` (``group``) and the ZeRO variants (``label``) that retell
#: that notebook's step. ``None`` means any. (``issue10``: Qwen2.5-3B on 2 ranks, the per-rank model
#: states of Qwen-14B on 8; ``ladder_*``: the ZeRO ladder on a 3B model; ``llama7b_1rank``, ``stock``,
#: ``bf16_states``: LLaMA-class runs on one GPU.)
REFERENCE_SELECTION = {
    "01": ({"issue10"}, None),
    "02": ({"issue10", "ladder_1rank", "ladder_2rank"}, ("ZeRO-2", "ZeRO-2 + opt→cpu")),
    "03": ({"issue10", "ladder_1rank", "ladder_2rank"}, ("ZeRO-3",)),
    "04": ({"issue10", "ladder_1rank", "ladder_2rank"}, ("ZeRO-3 + opt→cpu", "ZeRO-3 + opt→cpu + param→cpu")),
    "05": ({"issue10", "ladder_2rank"}, None),
    "06": ({"llama7b_1rank", "bf16_states", "stock", "ladder_1rank"}, None),
}


def _records_of(data) -> list[dict]:
    """The run records in one reference file: a list, or a dict with ``rungs``/``runs``/``results``
    (its other keys shared by every record, under ``_common``), or a dict that is itself one record."""
    if isinstance(data, list):
        return [dict(r) for r in data if isinstance(r, Mapping)]
    if not isinstance(data, Mapping):
        return []
    for key in ("rungs", "runs", "results"):
        if isinstance(data.get(key), list):
            common = {k: v for k, v in data.items() if k not in ("rungs", "runs", "results")}
            return [dict(r, _common=common) for r in data[key] if isinstance(r, Mapping)]
    return [dict(data)] if "status" in data or "summary" in data else []


def _selected(record: Mapping, prefix: str | None, filename: str) -> bool:
    if prefix is None:
        return True
    nb = str(record.get("notebook") or "")
    if nb:
        return nb.startswith(prefix)
    if filename[:2].isdigit():
        return filename.startswith(prefix)
    groups, labels = REFERENCE_SELECTION.get(prefix, (set(), None))
    if record.get("group") not in groups:
        return False
    return labels is None or _variant(record) in labels


def reference_results(notebook: str | None = None, directory: str | os.PathLike | None = None) -> list[dict]:
    """Results measured on GPUs, from ``data/reference/*.json``; an empty list when there are none.

    Each file holds a list of run records, a dict with a ``rungs``/``runs``/``results`` list (its
    other keys — machine, versions, … — are shared by every record and kept under ``_common``), or
    one record. A record is kept for ``notebook`` (``"02"`` or ``"02_zero2"``) when its ``notebook``
    field starts with the number, else when the file name does, else by :data:`REFERENCE_SELECTION`;
    ``notebook=None`` keeps all. Every record gets ``_file``. Files that are not run records (loss
    curves, raw logs) are ignored; unreadable files too, except that with ``notebook=None`` each one
    appears as a record with ``_error`` saying why.
    """
    folder = Path(directory) if directory else REFERENCE_DIR
    if not folder.is_dir():
        return []
    prefix = None if notebook is None else str(notebook).split("_")[0]
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            if prefix is None:
                out.append({"_file": path.name, "_error": f"{type(exc).__name__}: {exc}"})
            continue
        for r in _records_of(data):
            r["_file"] = path.name
            if _selected(r, prefix, path.name):
                out.append(r)
    return out


def reference_ceilings(directory: str | os.PathLike | None = None) -> dict | None:
    """The measured ceilings (``bf16_matmul_tflops``, ``h2d_gb_s``, ``d2h_gb_s``, ``cpu_adam_params_per_s``)
    of the first reference file that has them (the H200 benchmark), or None."""
    folder = Path(directory) if directory else REFERENCE_DIR
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        c = data.get("ceilings") if isinstance(data, dict) else None
        if isinstance(c, dict) and all(k in c for k in ("bf16_matmul_tflops", "h2d_gb_s", "d2h_gb_s",
                                                         "cpu_adam_params_per_s")):
            return dict(c)
    return None


def reference_projection(notebook: str, num_params: int | None = None,
                         directory: str | os.PathLike | None = None) -> dict | None:
    """The completed GPU reference run for ``notebook`` with an RTX 4090 projection whose model size is
    closest to ``num_params`` (the fastest among equals; the fastest when None):
    ``{"name", "label", "num_params", "tokens_per_s" (projected), "measured_tokens_per_s", "file"}``, or None."""
    import math
    found = []
    for r in reference_results(notebook, directory):
        proj = (r.get("projection_rtx4090") or {}).get("tokens_per_s")
        if proj and str(r.get("status", "")).startswith("ok"):
            n = r.get("num_params")
            gap = abs(math.log(n / num_params)) if num_params and n else 0.0
            found.append((round(gap, 3), -float(proj), {"name": r.get("name"), "label": _variant(r), "num_params": n,
                          "tokens_per_s": float(proj), "measured_tokens_per_s": r.get("tokens_per_s"),
                          "file": r.get("_file")}))
    return min(found, key=lambda t: t[:2])[2] if found else None


def reference_notes(directory: str | os.PathLike | None = None) -> list[str]:
    """What each reference file says about itself: its ``what`` line and each ``not_run`` entry
    (what could not be measured, and why), prefixed with the file name; [] when there are none.

    A ``not_run`` entry is a sentence, or a record ``{"name", "why", "note"}`` written as one line
    (``not run: NAME — NOTE: WHY``); records of the same name (one per device call) become one line
    with their reasons joined by ``; ``."""
    folder = Path(directory) if directory else REFERENCE_DIR
    notes = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, Mapping) and _records_of(data):
            if data.get("what"):
                notes.append(f"{path.name}: {data['what']}")
            notes += [f"{path.name}: not run: {line}" for line in _not_run_lines(data.get("not_run") or [])]
    return notes


def _not_run_lines(entries) -> list[str]:
    """``not_run`` entries as readable lines, in order, records of one name merged (see :func:`reference_notes`)."""
    lines: dict[str, list] = {}  # name (or the sentence itself) -> [note, [reasons]]
    for n in entries:
        if isinstance(n, Mapping) and n.get("name"):
            entry = lines.setdefault(str(n["name"]), [n.get("note"), []])
            why = n.get("why")
            if why and str(why) not in entry[1]:
                entry[1].append(str(why))
        else:
            lines.setdefault(str(n), [None, []])
    out = []
    for name, (note, whys) in lines.items():
        out.append(name + (f" — {note}" if note else "") + (f": {'; '.join(whys)}" if whys else ""))
    return out


def _pick(record: Mapping, *keys):
    for key in keys:
        for where in (record, record.get("summary") or {}, record.get("measured") or {}, record.get("plan") or {},
                      record.get("_common") or {}):
            if isinstance(where, Mapping) and where.get(key) is not None:
                return where[key]
    return None


def _variant(record: Mapping) -> str | None:
    variant = _pick(record, "variant", "label", "preset")
    if variant is None and _pick(record, "zero_stage") is not None:
        variant = f"ZeRO-{_pick(record, 'zero_stage')}"
        for k, short in (("offload_optimizer", "opt"), ("offload_param", "param")):
            v = _pick(record, k)
            if v and v != "none":
                variant += f" + {short}→{v}"
    return variant


def _hardware(record: Mapping) -> str:
    """``2 × NVIDIA H200 capped at 24 GiB`` from a record's own fields or its file's machine/versions."""
    common = record.get("_common") or {}
    hw = _pick(record, "hardware", "gpu", "gpu_name", "device")
    if isinstance(hw, Mapping):
        hw = hw.get("name")
    versions = common.get("versions") or {}
    if not hw and versions.get("gpus"):
        hw = versions["gpus"][0]
    if not hw and isinstance(common.get("machine"), Mapping):
        hw = common["machine"].get("gpus")
    world = _pick(record, "world_size", "num_gpus")
    cap = _pick(record, "emulate_gpu_memory_gib", "gpu_memory_cap_gib")
    total = versions.get("gpu_memory_gib")
    if cap is None and isinstance(total, (int, float)):
        planned = (record.get("plan") or {}).get("gpu_memory_gib")
        cap = planned if isinstance(planned, (int, float)) and planned < total - 1 else None
    text = f"{world} × {hw}" if (hw and world and " x " not in str(hw)) else (hw or "GPU (unlabelled)")
    return f"{text} capped at {cap:g} GiB" if isinstance(cap, (int, float)) else str(text)


def _mean(values, first: bool):
    """Mean of the first (last) 5 losses; for runs under 10 steps the first (last) loss itself, so a
    short run's two columns do not average the same steps."""
    vals = [v for v in (values or []) if isinstance(v, (int, float))]
    k = 5 if len(vals) >= 10 else 1
    part = vals[:k] if first else vals[-k:]
    return round(sum(part) / len(part), 3) if part else None


def reference_frame(notebook: str | None = None, directory: str | os.PathLike | None = None):
    """:func:`reference_results` as a table labelled with the hardware each result came from
    (columns: hardware, run, model, world size, status, loss first/last (means of the first/last 5
    steps), tokens/s, projected RTX 4090 tokens/s where the benchmark gives one, peak GPU GiB, peak
    host GiB, file); an empty DataFrame when there are none."""
    import pandas as pd
    rows = []
    for r in reference_results(notebook, directory):
        if "_error" in r:
            continue
        model = _pick(r, "model")
        losses = r.get("losses")
        projection = r.get("projection_rtx4090") or {}
        rows.append({"hardware": _hardware(r), "run": _variant(r), "name": r.get("name"),
                     "model": Path(str(model)).name if model else None,
                     "world size": _pick(r, "world_size", "num_gpus"), "status": _pick(r, "status"),
                     "loss first": _pick(r, "first5_mean_loss") or _mean(losses, True),
                     "loss last": _pick(r, "last5_mean_loss") or _mean(losses, False),
                     "tokens/s": _pick(r, "tokens_per_s"),
                     "RTX 4090 projection tokens/s": rounded(projection.get("tokens_per_s"), 1),
                     "peak GPU GiB": rounded(_pick(r, "peak_gpu_reserved_gib", "peak_gpu_gib", "peak_gpu_allocated_gib"), 2),
                     "peak host GiB": rounded(_pick(r, "host_peak_gib"), 2), "file": r["_file"]})
    return tidy_frame(pd.DataFrame(rows), rehearsal=False)


def beside_reference(runs: Mapping[str, Any], notebook: str, directory: str | os.PathLike | None = None):
    """This notebook's runs and the GPU measurements for the same notebook in one table, each row
    labelled with the hardware it came from (columns: hardware, run, status, world size, loss first,
    loss last, tokens/s, peak GPU GiB, peak host GiB, source).

    Args:
        runs: label -> :class:`~cookbook.launch.RunResult` or :func:`run_record` dict (this run).
        notebook: ``"02"`` or ``"02_zero2"`` (see :func:`reference_results`).
    """
    import pandas as pd
    rows = []
    for label, run in runs.items():
        r = as_record(run)
        rows.append({"hardware": r.get("hardware"), "run": label, "status": r.get("status"),
                     "world size": r.get("world_size"), "loss first": rounded(r.get("first5_mean_loss"), 3),
                     "loss last": rounded(r.get("last5_mean_loss"), 3), "tokens/s": rounded(r.get("tokens_per_s"), 1),
                     "peak GPU GiB": rounded(r.get("peak_gpu_reserved_gib"), 2),
                     "peak host GiB": rounded(r.get("host_peak_gib"), 2), "source": "this run"})
    ref = reference_frame(notebook, directory)
    for _, r in ref.iterrows():
        rows.append({"hardware": r["hardware"], "run": f"{r['run']} ({r['model']})", "status": r["status"],
                     "world size": r["world size"],
                     "loss first": r["loss first"], "loss last": r["loss last"], "tokens/s": r["tokens/s"],
                     "peak GPU GiB": r["peak GPU GiB"], "peak host GiB": r["peak host GiB"],
                     "source": f"data/reference/{r['file']}"})
    return tidy_frame(pd.DataFrame(rows), rehearsal=False)


# --------------------------------------------------------------------------------------------
# environment rules on recorded machines

def host_memory_why(plan, facts: Mapping, status: str, reason: str = "") -> str:
    """Why the ``host_memory`` rule gave ``status`` for ``plan`` on the machine ``facts`` describe, in one
    sentence with the numbers: host RAM needed (the memory estimate's host total,
    :func:`cookbook.memory.estimate`, ``host_gib["total"]``, GiB) against the RAM the machine has
    (``host_memory_gib`` in its facts, else the plan's ``host_memory_gib``). When there is no estimate or
    no RAM figure, ``reason`` (the rule's own) is returned.

    Args:
        plan: the plan checked (its ``num_gpus`` the machine's). facts: the machine's facts.
        status: the rule's verdict (``ok``/``warn``/``fail``). reason: the rule's reason, the fallback.
    """
    from . import env
    total = facts.get("host_memory_gib") or plan.host_memory_gib
    est, why = env._estimate(plan) if plan.model else (None, reason)
    if est is None or not total:
        return reason or why
    need = float(est.host_gib["total"])
    where = f"the estimate for {plan.label} on {plan.num_gpus} rank(s) needs ≈ {need:.1f} GiB of host RAM"
    if status == "fail":
        return f"{where}; this machine has {float(total):.1f} GiB: the kernel OOM killer would end the run"
    if status == "warn":
        return f"{where} of this machine's {float(total):.1f} GiB: little headroom"
    return f"{where}; this machine has {float(total):.1f} GiB"


def check_recorded(plan, files: Mapping[str, str]):
    """Run :func:`cookbook.env.check` on facts recorded on other machines.

    Args:
        plan: the planned run; its ``num_gpus`` is replaced by each machine's GPU count.
        files: label -> facts file name in :data:`FACTS_DIR` (or a path).

    Returns:
        ``(frame, records)``: a DataFrame with one row per machine (driver, the ``rtx40_p2p`` verdict,
        the host-RAM verdict for the plan with its reason — host RAM needed by the estimate against the
        machine's RAM (:func:`host_memory_why`) —, the recommended environment) and label -> dict with the
        verdicts, the host-RAM reason and fix, and the environment block to paste.
    """
    import pandas as pd
    from . import env
    rows, records = [], {}
    for label, name in files.items():
        path = Path(name) if Path(name).is_file() else FACTS_DIR / name
        facts = env.load_facts(path)
        world = len(facts.get("gpus") or []) or plan.num_gpus
        planned = plan.replace(num_gpus=world)
        r = env.check(planned, facts)
        host = r["host_memory"]
        why = host_memory_why(planned, facts, host.status, host.reason)
        records[label] = {"file": path.name, "ok": r.ok, "verdict": r.verdict, "rtx40_p2p": r["rtx40_p2p"].status,
                          "host_memory": host.status, "host_memory_why": why, "host_memory_fix": host.fix,
                          "recommended_env": dict(r.recommended_env), "env_block": r.env_block()}
        rows.append({"machine": label, "driver": facts.get("driver_version"), "rtx40_p2p": r["rtx40_p2p"].status,
                     "host_memory": host.status, "host_memory why": why,
                     "recommended env": " ".join(f"{k}={v}" for k, v in r.recommended_env.items()) or "(nothing)"})
    return pd.DataFrame(rows), records


__all__ = ["reference_ceilings", "reference_projection", "FACTS_DIR", "REFERENCE_DIR", "REFERENCE_SELECTION", "beside_reference", "check_recorded", "host_memory_why",
           "reference_frame", "reference_notes", "reference_results"]
