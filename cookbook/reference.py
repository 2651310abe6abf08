"""What real machines measured and recorded: training runs on GPUs (``data/reference/*.json``, written by
the benchmarks) and environment facts of RTX 4090 and H200 boxes (``tests/fixtures/facts``).

* :func:`reference_results` / :func:`reference_frame` / :func:`reference_notes` — the GPU measurements,
  labelled with the hardware each came from; an empty result when there are none.
* :func:`beside_reference` — a notebook's own runs and the GPU measurements for the same step in one table.
* :func:`quality_frame` — what the optimizer's arithmetic costs in loss (exact Adam vs bf16 states), measured
  on a GPU over 150 steps (``benchmarks/quality_gpu.py``).
* :func:`check_recorded` — the environment rules (:func:`cookbook.env.check`) run on recorded facts.

Units: GiB = 2**30 bytes; tokens/s over the whole world (all ranks).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

from .models import DATA_DIR
from .results import as_record, records_in as _records_of, reference_files
from .tables import rounded, tidy_frame

#: Results measured on GPUs by the maintainers (JSON files; see :func:`reference_results`).
REFERENCE_DIR = Path(os.environ.get("COOKBOOK_REFERENCE", DATA_DIR / "reference"))

#: Facts recorded on real machines with ``cookbook env --dump-facts`` (RTX 4090 boxes, 2 × H200).
FACTS_DIR = DATA_DIR.parent / "tests" / "fixtures" / "facts"


#: Which GPU measurements each notebook shows, for records without a ``notebook`` field: the
#: benchmark groups of ``data/reference`` (``group``) and the ZeRO variants (``label``) that retell
#: that notebook's step. ``None`` means any. (``issue10``: Qwen2.5-3B on 2 ranks, the per-rank model
#: states of Qwen-14B on 8; ``ladder_*``: the ZeRO ladder on a 3B model; ``llama7b_1rank``, ``stock``,
#: ``bf16_states``: LLaMA-class runs on one GPU; ``levers``: issue 19's runs on the 3.4B recipe — Liger, ZenFlow,
#: the HF Trainer with the article's and the recipe's configs, ``benchmarks/levers_report.py``.)
REFERENCE_SELECTION = {
    "01": ({"issue10"}, None),
    "02": ({"issue10", "ladder_1rank", "ladder_2rank"}, ("ZeRO-2", "ZeRO-2 + opt→cpu")),
    "03": ({"issue10", "ladder_1rank", "ladder_2rank"}, ("ZeRO-3",)),
    "04": ({"issue10", "ladder_1rank", "ladder_2rank", "levers"}, ("ZeRO-3 + opt→cpu", "ZeRO-3 + opt→cpu + param→cpu")),
    "05": ({"issue10", "ladder_2rank"}, None),
    "06": ({"llama7b_1rank", "bf16_states", "stock", "ladder_1rank", "levers"}, None),
}


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
    of issue 19's lever runs (``group: levers``) a notebook gets the newest run of each name that ended ok (the
    failed ones stay in their files and in docs/benchmarks.md); ``notebook=None`` keeps all. Every record gets ``_file``. Files that are not run records (loss
    curves, raw logs) are ignored; unreadable files too, except that with ``notebook=None`` each one
    appears as a record with ``_error`` saying why.
    """
    prefix = None if notebook is None else str(notebook).split("_")[0]
    out = []
    for name, data, error in reference_files(directory or REFERENCE_DIR):
        if error:
            if prefix is None:
                out.append({"_file": name, "_error": error})
            continue
        for r in _records_of(data):
            r["_file"] = name
            if _selected(r, prefix, name):
                out.append(r)
    if prefix is not None:   # issue 19's lever runs beside a notebook: the newest run of each name that worked
        newest = {}
        for r in out:
            if r.get("group") == "levers" and r.get("status") == "ok":
                newest[r.get("name")] = r   # files come sorted by name (dated): the later one wins
        out = [r for r in out if r.get("group") != "levers" or newest.get(r.get("name")) is r]
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
            if num_params and not n:
                continue  # a record that does not say its model's size cannot be the closest in size
            gap = abs(math.log(n / num_params)) if num_params else 0.0
            found.append((round(gap, 3), -float(proj), {"name": r.get("name"), "label": _variant(r), "num_params": n,
                          "tokens_per_s": float(proj), "measured_tokens_per_s": r.get("tokens_per_s"),
                          "file": r.get("_file")}))
    return min(found, key=lambda t: t[:2])[2] if found else None


def reference_notes(directory: str | os.PathLike | None = None) -> list[str]:
    """One line per reference file that holds run records: what it measured, on which hardware and when, how
    many runs it recorded (by status) and how many did not run, with their reasons de-duplicated; [] when
    there are none.

    ``FILE — HARDWARE, DATE: WHAT; N runs (k ok, m gpu_oom); M not run: REASON (count); NAME: REASON; SENTENCE``.
    The hardware is the records' own label (:func:`_hardware`: the file's machine block where the record has
    none); a reason drops the device call's bookkeeping (``the device call's time ran out (-8 s left)`` and
    ``… (71 s left)`` are one reason, ``the device call's time ran out``). A ``not_run`` entry of the file is
    a record ``{"name", "why", "note"}`` or a sentence; a record whose ``status`` is ``not_run`` counts too,
    its ``message`` the reason; a name is counted once."""
    folder = Path(directory) if directory else REFERENCE_DIR
    notes = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        records = _records_of(data) if isinstance(data, Mapping) else []
        if not records:
            continue
        ran = [r for r in records if str(r.get("status")) != "not_run"]
        hardware = _hardware_span([_hardware(r) for r in (ran or records)])
        head = path.name + (f" — {', '.join(x for x in (hardware, data.get('date')) if x)}"
                            if hardware or data.get("date") else "")
        parts = [str(data["what"])] if data.get("what") else []
        if ran:
            counts: dict[str, int] = {}
            for r in ran:
                counts[str(r.get("status") or "no status")] = counts.get(str(r.get("status") or "no status"), 0) + 1
            parts.append(f"{len(ran)} run(s) ({', '.join(f'{n} {status}' for status, n in counts.items())})")
        not_run = _not_run_summary(records, data.get("not_run") or [])
        if not_run:
            parts.append(not_run)
        notes.append(head + (": " + "; ".join(parts) if parts else ""))
    return notes


_SECONDS_LEFT = re.compile(r"\s*\(-?\d+(?:\.\d+)?\s*s left\)")


def _reason(text) -> str:
    """A not-run reason without the device call's bookkeeping: ``(-8 s left)`` / ``(71 s left)`` dropped,
    ``time ran out first`` read as ``time ran out``."""
    return re.sub(r"\btime ran out first\b", "time ran out", _SECONDS_LEFT.sub("", str(text))).strip()


def _not_run_summary(records, entries) -> str:
    """``M not run: …`` for :func:`reference_notes`: the names that did not run (records of status ``not_run``
    and the file's ``not_run`` entries, each name once), grouped by reason; "" when none."""
    reasons: dict[str, list[str]] = {}  # name (or a sentence) -> its distinct reasons
    for r in records:
        if str(r.get("status")) == "not_run":
            name = str(r.get("name") or r.get("message") or "a run")
            reasons.setdefault(name, [])
            why = _reason(r.get("message") or "")
            if why and why not in reasons[name]:
                reasons[name].append(why)
    for n in entries:
        name = str(n["name"]) if isinstance(n, Mapping) and n.get("name") else str(n)
        reasons.setdefault(name, [])
        why = _reason(n.get("why") or "") if isinstance(n, Mapping) else ""
        if why and why not in reasons[name]:
            reasons[name].append(why)
    if not reasons:
        return ""
    groups: dict[str, list[str]] = {}  # reason -> names; a name without one stands alone (a sentence)
    for name, whys in reasons.items():
        for why in whys or [""]:
            groups.setdefault(why or name, []).append(name)
    shown = []
    for why, names in groups.items():
        if why in reasons and not reasons[why]:
            shown.append(why)                       # a sentence: it says itself why
        elif len(names) == 1:
            shown.append(f"{names[0]}: {why}")
        else:                                       # the count only where other reasons follow
            shown.append(why if len(groups) == 1 else f"{why} ({len(names)})")
    # the count only: the reasons are the device calls' bookkeeping (time ran out, a driver fixed since), kept in the
    # file for whoever re-runs it, not for a user reading what was measured
    return f"{len(reasons)} not run (the file says why)"


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


#: A GPU's model name inside a free-text machine description (``1 x NVIDIA H200 (139.8 GiB), capped at …``,
#: ``NVIDIA H200, 143771 MiB, 580.159.04``, ``one NVIDIA GeForce RTX 4090``).
_GPU_NAME = re.compile(r"(NVIDIA(?: [A-Za-z0-9][\w-]*)+?|(?:GeForce )?RTX \d{4}\w*)"
                       r"(?=\s*(?:[(,;:]|capped\b|per\b|each\b|$))")
_CAPPED = re.compile(r"capped at (\d+(?:\.\d+)?) ?GiB")


def _machine_text(common: Mapping) -> str:
    """The GPU part of a file's ``machine`` block: the block itself when it is a sentence, else its
    ``gpus``/``gpu`` entry; "" when there is none."""
    machine = common.get("machine")
    if isinstance(machine, Mapping):
        machine = machine.get("gpus") or machine.get("gpu")
    return str(machine) if isinstance(machine, str) else ""


def _world(record: Mapping):
    """The ranks of a record: its ``world_size``/``num_gpus`` (or its plan's), else the ``on N rank(s)`` of its
    launch message (``3 steps on 1 rank: …``); None when neither says."""
    world = _pick(record, "world_size", "num_gpus")
    if world is None:
        m = re.search(r"\bon (\d+) ranks?\b", str(record.get("message") or ""))
        world = int(m.group(1)) if m else None
    return world


def _hardware(record: Mapping) -> str:
    """``2 × NVIDIA H200 capped at 24 GiB`` from a record's own fields or its file's machine/versions/what:
    the GPU's name from the record, else from ``versions.gpus``, else read out of the ``machine`` block; the
    cap (per-process memory limit, GiB) from the record, else a plan below the GPU's memory, else the
    ``capped at N GiB`` of the machine block or of the file's ``what``. ``GPU (unlabelled)`` when nothing names
    the GPU."""
    common = record.get("_common") or {}
    hw = _pick(record, "hardware", "gpu", "gpu_name", "device")
    if isinstance(hw, Mapping):
        hw = hw.get("name")
    versions = common.get("versions") or {}
    if not hw and versions.get("gpus"):
        hw = versions["gpus"][0]
    machine = _machine_text(common)
    if not hw and machine:
        m = _GPU_NAME.search(machine)
        hw = m.group(1) if m else None
    world = _world(record)
    cap = _pick(record, "emulate_gpu_memory_gib", "gpu_memory_cap_gib")
    total = versions.get("gpu_memory_gib")
    if cap is None and isinstance(total, (int, float)):
        planned = (record.get("plan") or {}).get("gpu_memory_gib")
        cap = planned if isinstance(planned, (int, float)) and planned < total - 1 else None
    if cap is None and hw:
        m = _CAPPED.search(machine) or _CAPPED.search(str(common.get("what") or ""))
        cap = float(m.group(1)) if m else None
    text = f"{world} × {hw}" if (hw and world and " x " not in str(hw)) else (hw or "GPU (unlabelled)")
    return f"{text} capped at {cap:g} GiB" if isinstance(cap, (int, float)) else str(text)


def _hardware_span(labels) -> str:
    """The distinct hardware labels of one file, ``1 × X`` and ``2 × X`` read as ``1 or 2 × X``; unlabelled
    ones left out; "" when none is known."""
    by_rest: dict[str, list[str]] = {}
    for label in labels:
        if not label or label.startswith("GPU (unlabelled)"):
            continue
        count, sep, rest = label.partition(" × ")
        key, n = (rest, count) if sep and count.isdigit() else (label, "")
        if n not in by_rest.setdefault(key, []):
            by_rest[key].append(n)
    out = []
    for rest, counts in by_rest.items():
        known = [c for c in counts if c]
        if known:
            out.append(f"{' or '.join(sorted(known, key=int))} × {rest}")
        else:
            out.append(rest)
    return ", ".join(out)


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
    steps; a run under 10 steps: its first and last step), tokens/s, projected RTX 4090 tokens/s where the benchmark gives one, peak GPU GiB, peak
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
                     "world size": _world(r), "status": _pick(r, "status"),
                     # the steps' own losses where the record has them (a run under 10 steps: its first and
                     # last step, not two 5-step means of the same steps), else the record's 5-step means
                     "loss first": _mean(losses, True) if _mean(losses, True) is not None else _pick(r, "first5_mean_loss"),
                     "loss last": _mean(losses, False) if _mean(losses, False) is not None else _pick(r, "last5_mean_loss"),
                     "tokens/s": _pick(r, "tokens_per_s"),
                     "RTX 4090 projection tokens/s": rounded(projection.get("tokens_per_s"), 1),
                     "peak GPU GiB": rounded(_pick(r, "peak_gpu_reserved_gib", "peak_gpu_gib", "peak_gpu_allocated_gib"), 2),
                     "peak host GiB": rounded(_pick(r, "host_peak_gib"), 2), "file": r["_file"]})
    return tidy_frame(pd.DataFrame(rows), rehearsal=False)


def quality_record(directory: str | os.PathLike | None = None) -> dict | None:
    """The newest GPU loss-curve record in the reference folder (a file whose ``kind`` is ``quality_curves``,
    written by ``python -m benchmarks.quality_gpu --merge``; the last by file name), with ``_file``; None when
    there is none."""
    found = None
    for name, data, error in reference_files(directory or REFERENCE_DIR):
        if not error and isinstance(data, Mapping) and data.get("kind") == "quality_curves":
            found = dict(data, _file=name)
    return found


def _quality_basics(rec: Mapping) -> tuple[str | None, dict, str | None]:
    """(the steps in the record's ``last<k>_mean_loss`` key, that dict, "GPU capped at N GiB") of a
    :func:`quality_record`."""
    key = next((k for k in rec if re.fullmatch(r"last\d+_mean_loss", k)), None)
    gpu = str((rec.get("machine") or {}).get("gpu") or "").split(",")[0] or None
    cap = (((rec.get("runs") or {}).get("exact_adam") or {}).get("plan") or {}).get("gpu_memory_gib")
    return (key[4:-10] if key else None), (rec.get(key) or {} if key else {}), (
        f"{gpu} capped at {cap:g} GiB" if gpu and cap else gpu)


def quality_frame(directory: str | os.PathLike | None = None):
    """:func:`quality_record` as a table, one row per optimizer variant: the last-20 mean loss, its gap to exact
    Adam (absolute and in %), the first optimizer step whose loss is more than 2 % apart from exact Adam's
    (:func:`benchmarks.quality_cpu.compare`), tokens/s, host peak GiB, the projected RTX 4090
    tokens/s (docs/benchmarks.md section 5's model) and the file. An empty DataFrame when no record exists."""
    import pandas as pd
    rec = quality_record(directory)
    if rec is None:
        return pd.DataFrame()
    n, tail, hardware = _quality_basics(rec)
    n = n or "20"
    rows = []
    for name, run in (rec.get("runs") or {}).items():
        gap = (rec.get("gaps_vs_exact_adam") or {}).get(name) or {}
        speed = (rec.get("speed") or {}).get(name) or {}
        tps, proj = speed.get("tokens_per_s") or run.get("tokens_per_s"), speed.get("projection_rtx4090_tokens_per_s")
        rows.append({"variant": name.replace("_", " "), "hardware": hardware,
                     "steps": len([x for x in (rec.get("curves") or {}).get(name, []) if x is not None]),
                     "lr": f"{run['lr']:g}" if isinstance(run.get("lr"), (int, float)) else None,
                     f"last-{n} mean loss": rounded(tail.get(name), 3),
                     "gap vs exact Adam": rounded(gap.get(f"last{n}_mean_minus_exact"), 3),
                     "gap %": rounded(100 * gap[f"last{n}_relative_gap"], 1) if f"last{n}_relative_gap" in gap else None,
                     "losses > 2 % apart from step": (str(gap["first_step_losses_differ_by_2pct"])
                                                      if gap.get("first_step_losses_differ_by_2pct") else None),
                     "tokens/s": f"{tps:,.0f}" if tps else None,
                     "peak host GiB": rounded(run.get("host_peak_gib"), 1),
                     "RTX 4090 projection tokens/s": f"{proj:,.0f}" if proj else None, "file": rec["_file"]})
    return tidy_frame(pd.DataFrame(rows), rehearsal=False)


def quality_line(directory: str | os.PathLike | None = None) -> str | None:
    """One sentence per approximate variant of :func:`quality_record` against exact Adam: the mean loss of the
    last steps of each, the gap in %, the first step whose losses are more than 2 % apart, the hardware and the
    file; None when no record exists."""
    rec = quality_record(directory)
    if rec is None:
        return None
    n, tail, hardware = _quality_basics(rec)
    if n is None:
        return None
    ex = (rec.get("runs") or {}).get("exact_adam") or {}
    parts = []
    for name, gap in (rec.get("gaps_vs_exact_adam") or {}).items():
        rel = gap.get(f"last{n}_relative_gap")
        step = gap.get("first_step_losses_differ_by_2pct")
        parts.append(f"{name.replace('_', ' ')} {tail.get(name, float('nan')):.3f} vs exact Adam "
                     f"{tail.get('exact_adam', float('nan')):.3f}" + (f" ({100 * rel:+.1f} %)" if rel is not None else "")
                     + (f", losses > 2 % apart from step {step}" if step else ""))
    if not parts:
        return None
    steps = len((rec.get("curves") or {}).get("exact_adam") or [])
    lr = f", lr {ex['lr']:g}" if isinstance(ex.get("lr"), (int, float)) else ""
    return (f"Optimizer arithmetic measured on {hardware or 'a GPU'} ({steps} steps{lr}): mean loss of the last {n} steps, "
            + "; ".join(parts) + f" ({rec['_file']})")


def beside_reference(runs: Mapping[str, Any], notebook: str, directory: str | os.PathLike | None = None):
    """This notebook's runs and the GPU measurements for the same notebook in one table, each row
    labelled with the hardware it came from (columns: hardware, run, status, world size, loss first,
    loss last — :func:`cookbook.results.loss_pair`: first and last step under 10 steps, else 5-step means —, tokens/s, peak GPU GiB, peak host GiB, source).

    Args:
        runs: label -> :class:`~cookbook.launch.RunResult` or :func:`run_record` dict (this run).
        notebook: ``"02"`` or ``"02_zero2"`` (see :func:`reference_results`).
    """
    import pandas as pd
    from .results import loss_pair
    rows = []
    for label, run in runs.items():
        r = as_record(run)
        pair = loss_pair(r) or {}  # first → last step under 10 steps, else the 5-step means
        rows.append({"hardware": r.get("hardware"), "run": label, "status": r.get("status"),
                     "world size": r.get("world_size"), "loss first": rounded(pair.get("first"), 3),
                     "loss last": rounded(pair.get("last"), 3), "tokens/s": rounded(r.get("tokens_per_s"), 1),
                     "peak GPU GiB": rounded(r.get("peak_gpu_reserved_gib"), 2),
                     "peak host GiB": rounded(r.get("host_peak_gib"), 2), "source": "this run"})
    ref = reference_frame(notebook, directory)
    for _, r in ref.iterrows():
        name = r.get("name")  # which run of the benchmark (e.g. trainer-article): several share a ZeRO variant
        # the run's name first: a long variant label is what pandas cuts at its column width, not the name
        rows.append({"hardware": r["hardware"], "run": (f"{name}: " if isinstance(name, str) and name else "")
                     + f"{r['run']} ({r['model']})",
                     "status": r["status"],
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


__all__ = ["quality_frame", "quality_line", "quality_record", "reference_ceilings", "reference_projection", "FACTS_DIR", "REFERENCE_DIR", "REFERENCE_SELECTION", "beside_reference", "check_recorded", "host_memory_why",
           "reference_frame", "reference_notes", "reference_results"]
