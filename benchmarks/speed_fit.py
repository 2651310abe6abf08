"""Fit the speed model's free constants (:mod:`cookbook.speed`) on the committed GPU runs and write the
prediction table: ``data/calibration/speed/speed_model.json`` (constants, fitting and held-out sets, one row per
reconstructable run with predicted vs measured tokens/s)::

    python -m benchmarks.speed_fit            # rewrites data/calibration/speed/speed_model.json
    python -m benchmarks.speed_fit --check    # prints the table, writes nothing

Every run of ``data/reference/*.json`` that ended ok with a tokens/s is a row, unless the model does not
describe it (:data:`EXCLUDED`, each with its reason). Rows in :data:`FIT_SET` fit the constants (least squares
on log(predicted/measured) tokens/s, Nelder–Mead); all other rows are held out and their error is reported apart.
Measured inputs that are not fitted: the pinned PCIe copy rate (the reference files' ``ceilings``), each NVMe
run's own disk bandwidth, 16 CPU threads per rank (every run here).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "data" / "calibration" / "speed" / "speed_model.json"

#: (file, run name, occurrence in that file) of the fitting set, and why each is there. The rest is held out.
FIT_SET = {
    ("h200_levers_2026-12-01.json", "recipe", 0): "3.4B recipe, bf16 states: GPU fraction (sdpa, head dim 100), bf16 CPU Adam",
    ("h200_levers_2026-12-01.json", "liger", 0): "micro 32: the same terms at another micro batch",
    ("h200_levers_2026-12-02.json", "recipe-packed", 0): "packed rows through sdpa: the masked-sdpa GPU fraction",
    ("h200_levers_2026-12-02c.json", "recipe-fp32", 0): "fp32 states: fp32 CPU Adam rate",
    ("h200_levers_2026-12-02c.json", "liger-fp32-24", 0): "fp32 states at micro 24",
    ("h200_levers_2026-12-02c.json", "7b-16x1", 0): "LLaMA-7B ZeRO-3 full offload: flash-sdpa fraction, parameter fetch hidden",
    ("h200_levers_2026-12-02c.json", "7b-2x8", 0): "the same at micro 2: the ZeRO-3 transfer rate",
    ("h200_levers_2026-12-02c.json", "7b-8x2", 0): "the same at micro 8: the overlap rule",
    ("h200x2_2026-11-30.json", "stock-accelerate", 0): "3.4B ZeRO-3 full offload at micro 2: with 7b-2x8, ZeRO-3's "
                                                         "per-submodule fetch latency apart from its bytes",
    ("h200_levers_2026-12-02d.json", "7b-z3opt-8x2", 0): "ZeRO-3 + optimizer offload, parameters on the GPU: the "
                                                          "blocking copy back's rate",
    ("h200_attention.json", "l3b-flex-m16", 0): "FlexAttention's GPU fraction",
    ("h200_attention.json", "7b-full-sdpa-16", 0): "packed rows through sdpa where the head dim (128) has fast kernels",
    ("h200_attention.json", "7b-full-flex-16", 0): "FlexAttention where the head dim (128) has fast sdpa kernels",
    ("h200_nvme_runs_2026-12-02.json", "nvme-1b-default", 0): "NVMe: how far reads and writes overlap",
}

#: why a run is not a row: the model does not describe what it measured.
EXCLUDED = {
    "zenflow": "ZenFlow moves the optimizer step off the critical path; not modelled",
    "combo": "ZenFlow + Liger; not modelled (ZenFlow)",
    "zenflow-fp32": "ZenFlow; not modelled",
    "zenflow-fp32-seq": "ZenFlow; not modelled",
    "zenflow-liger-fp32-24": "ZenFlow; not modelled",
    "7b-16x1-bind": "DeepSpeed's core binding (ds-bind) made the optimizer step ~10x slower than the same run "
                    "unbound (the record's ratios_across_calls); not modelled",
    "7b-2x8-nopin": "pin_memory false: pageable copies; the model assumes pinned buffers",
    "7b-exact-sg1e9": "host RAM exhausted (0.7 GiB free, 10-28 % I/O wait during the steps, docs/gpu/attention.md "
                      "call 7): the model assumes the states stay in RAM",
}

#: the pinned-copy rate is measured against this link: PCIe 5.0 x16, 32 GT/s × 16 × 128/130 / 8 GB/s.
H200_LINK_GB_S = 32 * 16 * 128 / 130 / 8

START = {"gpu_fraction": {"sdpa_flash": 0.45, "sdpa_no_flash": 0.42, "sdpa_masked": 0.25, "flex": 0.3,
                          "sdpa_masked_flash_head": 0.45, "flex_flash_head": 0.45},
         "cpu_adam_params_per_s_per_core": {"fp32": 1.7e8, "bf16": 3e8},
         "zero3_transfer_fraction": 0.6, "overlap": 0.95, "nvme_overlap": 0.8,
         "zero3_fetch_latency_s": 2e-4, "zero3_copy_back_gb_s": 8.0}


def _model_path(name: str) -> str:
    base = Path(str(name)).name
    if (ROOT / "benchmarks" / "models" / base).is_dir():
        return f"benchmarks/models/{base}"
    return base


def _bf16_states(r: dict) -> bool:
    if r.get("states") in ("bf16", "fp32"):
        return r["states"] == "bf16"
    if isinstance(r.get("bf16_states"), bool):
        return r["bf16_states"]
    if isinstance(r.get("lever"), dict) and "bf16_states" in r["lever"]:
        return bool(r["lever"]["bf16_states"])
    bf16 = (r.get("deepspeed_config") or {}).get("bf16") or {}
    return bool(bf16.get("bf16_optimizer_states"))


def rows_from_reference() -> tuple[list[dict], list[dict]]:
    """Every reference run that ended ok with a tokens/s → ``(rows, excluded)``; a row holds the run's
    :class:`cookbook.speed.Workload` fields, its machine (cores, disk) and the measurement."""
    from cookbook.models import model_spec
    from cookbook.reference import reference_results
    rows, skipped, seen = [], [], {}
    for r in reference_results():
        f, name = r["_file"], r.get("name")
        occ = seen.setdefault((f, name), 0)
        seen[(f, name)] += 1
        if not str(r.get("status", "")).startswith("ok") or not r.get("tokens_per_s"):
            continue
        if name in EXCLUDED:
            skipped.append({"file": f, "name": name, "why": EXCLUDED[name]})
            continue
        p = r.get("plan") if isinstance(r.get("plan"), dict) else {}
        g = lambda k, d=None: r.get(k) if r.get(k) is not None else p.get(k, d)  # noqa: E731
        nvme = r.get("kind") == "nvme_run"
        model = _model_path(r.get("model") or p.get("model"))
        spec = model_spec(model)
        world = int(g("num_gpus") or r.get("world_size") or 1)
        cmd = str(r.get("command") or "")
        packed = (bool(r.get("packing")) or nvme or "packed" in name or "--packing" in cmd
                  or (f == "h200_attention.json" and "--no-packing" not in cmd and not str(name).startswith("trainer")))
        att = str(r.get("attention") or "sdpa")
        attention = "flex" if att.startswith("flex") else ("sdpa_masked" if packed else "sdpa")
        work = {"params": spec.num_params, "num_layers": spec.num_layers, "hidden": spec.hidden_size,
                "head_dim": spec.hidden_size // spec.num_heads, "world": world, "machines": 1,
                "micro_batch": int(g("micro_batch")), "grad_accum": int(g("grad_accum")), "seq_len": int(g("seq_len")),
                "zero_stage": 3 if nvme else int(g("zero_stage")),
                "offload_optimizer": "nvme" if nvme else g("offload_optimizer"),
                "offload_param": "nvme" if nvme else g("offload_param"), "bf16_states": False if nvme else _bf16_states(r),
                "checkpointing": bool(g("gradient_checkpointing", True)), "attention": attention,
                "liger": bool(r.get("liger") or (isinstance(r.get("lever"), dict) and r["lever"].get("liger"))),
                "nvme_read_gb": float(r.get("read_gb_per_step_estimate") or 0.0),
                "nvme_write_gb": float(r.get("write_gb_per_step_estimate") or 0.0)}
        machine = {"gpu": "H200", "cpu_cores": 16 * world,
                   "nvme_read_gb_s": float(r["bandwidth_read_gb_s"]) if nvme else None,
                   "nvme_write_gb_s": float(r["bandwidth_write_gb_s"]) if nvme else None}
        key = (f, name, occ)
        rows.append({"file": f, "name": name, "occurrence": occ, "set": "fit" if key in FIT_SET else "held_out",
                     "why_fit": FIT_SET.get(key), "model": model, "workload": work, "machine": machine,
                     "measured_tokens_per_s": float(r["tokens_per_s"]),
                     "trainer": "HF Trainer" if str(name).startswith("trainer") else "cookbook"})
    return rows, skipped


def _predict(row: dict, consts: dict) -> dict:
    from cookbook.speed import Machine, Workload, gpu_spec, step_terms
    w = Workload(**row["workload"])
    m = row["machine"]
    terms = step_terms(w, Machine(gpu_spec(m["gpu"]), m["cpu_cores"], m["nvme_read_gb_s"], m["nvme_write_gb_s"]),
                       consts)
    return {"tokens_per_s": w.tokens_per_step / terms["step_s"], "terms": terms}


_FREE = [("gpu_fraction", "sdpa_flash"), ("gpu_fraction", "sdpa_no_flash"), ("gpu_fraction", "sdpa_masked"),
         ("gpu_fraction", "flex"), ("gpu_fraction", "sdpa_masked_flash_head"), ("gpu_fraction", "flex_flash_head"), ("cpu_adam_params_per_s_per_core", "fp32"),
         ("cpu_adam_params_per_s_per_core", "bf16"), ("zero3_transfer_fraction", None), ("overlap", None),
         ("nvme_overlap", None), ("zero3_fetch_latency_s", None), ("zero3_copy_back_gb_s", None)]
_BOUNDED = {"overlap", "nvme_overlap", "zero3_transfer_fraction"}  # fractions in (0, 1]


def _unpack(x, base: dict) -> dict:
    c = json.loads(json.dumps(base))
    for v, (k, sub) in zip(x, _FREE):
        val = 1 / (1 + math.exp(-v)) if k in _BOUNDED else math.exp(v)
        if sub is None:
            c[k] = val
        else:
            c[k][sub] = val
    return c


def _pack(c: dict) -> list[float]:
    out = []
    for k, sub in _FREE:
        val = c[k] if sub is None else c[k][sub]
        out.append(math.log(val / (1 - val)) if k in _BOUNDED else math.log(val))
    return out


def nelder_mead(f, x0, step=0.3, iters=4000, tol=1e-10):
    """Minimise ``f`` from ``x0`` (Nelder & Mead 1965, standard coefficients 1, 2, 0.5, 0.5)."""
    n = len(x0)
    pts = [list(x0)] + [[x0[j] + (step if j == i else 0.0) for j in range(n)] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=vals.__getitem__)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if vals[-1] - vals[0] < tol:
            break
        cen = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        refl = [cen[j] + (cen[j] - pts[-1][j]) for j in range(n)]
        fr = f(refl)
        if fr < vals[0]:
            exp = [cen[j] + 2 * (cen[j] - pts[-1][j]) for j in range(n)]
            fe = f(exp)
            pts[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = [cen[j] + 0.5 * (pts[-1][j] - cen[j]) for j in range(n)]
            fc = f(con)
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:
                pts = [pts[0]] + [[pts[0][j] + 0.5 * (p[j] - pts[0][j]) for j in range(n)] for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    best = min(range(n + 1), key=vals.__getitem__)
    return pts[best], vals[best]


def fit(rows: list[dict], base: dict) -> dict:
    fitting = [r for r in rows if r["set"] == "fit"]

    def loss(x):
        c = _unpack(x, base)
        return sum(math.log(_predict(r, c)["tokens_per_s"] / r["measured_tokens_per_s"]) ** 2 for r in fitting)

    x, _ = nelder_mead(loss, _pack(base))
    for _ in range(3):  # restarts from the best point
        x, _ = nelder_mead(loss, x, step=0.1)
    return _unpack(x, base)


def _round(c):
    if isinstance(c, dict):
        return {k: _round(v) for k, v in c.items()}
    return float(f"{c:.4g}") if isinstance(c, float) else c


LIGER_PROBE = ("h200_levers_2026-12-01.json", "liger_probe")


def liger_compute_factor() -> float:
    """Forward+backward time with Liger's fused linear cross-entropy over the time with transformers' loss at the
    same micro batch, mean over the micro batches of the probe (``LIGER_PROBE``: its warm second timing,
    ``time_s_1``), measured not fitted."""
    probe = json.loads((ROOT / "data" / "reference" / LIGER_PROBE[0]).read_text())[LIGER_PROBE[1]]["rows"]
    t = {(r["liger"], r["micro_batch"]): r["time_s_1"] for r in probe if r.get("status") == "ok"}
    ratios = [t[(True, m)] / t[(False, m)] for (lig, m) in t if lig and (False, m) in t]
    return round(statistics.mean(ratios), 4)


def build() -> dict:
    from cookbook.reference import reference_ceilings
    rows, skipped = rows_from_reference()
    ceil = reference_ceilings()
    base = dict(json.loads(json.dumps(START)))
    base["pcie_pinned_fraction"] = round((ceil["h2d_gb_s"] + ceil["d2h_gb_s"]) / 2 / H200_LINK_GB_S, 4)
    base["inter_node_gb_s"] = 12.5
    base["liger_compute_factor"] = liger_compute_factor()
    consts = _round(fit(rows, base))
    table = []
    for r in rows:
        pred = _predict(r, consts)
        err = round((pred["tokens_per_s"] / r["measured_tokens_per_s"] - 1) * 100, 1)
        table.append({**{k: v for k, v in r.items() if k != "why_fit"}, **({"why_fit": r["why_fit"]} if r["why_fit"] else {}),
                      "predicted_tokens_per_s": round(pred["tokens_per_s"], 1), "error_pct": err,
                      "predicted_step_s": round(pred["terms"]["step_s"], 3)})

    def stats(sel):
        errs = [abs(t["error_pct"]) for t in table if t["set"] == sel]
        return {"rows": len(errs), "median_abs_error_pct": round(statistics.median(errs), 1) if errs else None,
                "max_abs_error_pct": max(errs) if errs else None,
                "within_25_pct": sum(e <= 25 for e in errs)}
    return {
        "what": "the speed model's fitted constants (cookbook.speed) and its prediction for every committed GPU run "
                "it can reconstruct (data/reference/*.json), predicted vs measured tokens/s",
        "built_by": "python -m benchmarks.speed_fit",
        "model": {"name": "cookbook.speed", "version": 1},
        "units": "tokens/s over the world; error_pct = (predicted / measured − 1) × 100; GB/s = 1e9 bytes/s",
        "constants": consts,
        "constants_sources": {
            "gpu_fraction": "fitted: achieved fraction of the H200's 989.4 TFLOP/s dense bf16 per attention class "
                            "(_flash_head: masked sdpa / flex where the head dim meets sdpa's flash condition)",
            "cpu_adam_params_per_s_per_core": "fitted: DeepSpeedCPUAdam parameters/s per CPU thread (16 threads a rank "
                                              "here), the optimizer phase's whole time (Adam + its copies on the CPU)",
            "zero3_transfer_fraction": "fitted: ZeRO-3's per-submodule copies as a fraction of the pinned PCIe rate",
            "overlap": "fitted: share of the smaller of compute and transfers hidden in a micro step",
            "nvme_overlap": "fitted: share of the smaller of NVMe read and write time hidden",
            "zero3_fetch_latency_s": "fitted: seconds per ZeRO-3 submodule fetch beyond its bytes (9 per layer + 3)",
            "zero3_copy_back_gb_s": "fitted: GB/s of ZeRO-3's blocking fp32 CPU -> 16-bit GPU copy after the step",
            "pcie_pinned_fraction": "measured: pinned 1 GiB copies on the H200 (reference ceilings, h2d and d2h mean) "
                                    "over PCIe 5.0 x16's 63.0 GB/s; assumed the same fraction on other cards",
            "inter_node_gb_s": "assumed, not measured: 100 Gb/s between machines (one 100 GbE or EDR InfiniBand port)",
            "liger_compute_factor": "measured: forward+backward time with Liger's fused linear cross-entropy over "
                                    "transformers' loss at equal micro batch (data/reference/h200_levers_2026-12-01.json "
                                    "liger_probe, mean over micro 16/24/32); Liger's gain is the micro batch it lets fit"},
        "fitting_set": "the rows with set 'fit' (each says why_fit): the 3.4B recipe and LLaMA-7B lever runs of "
                       "2026-12-01/02 (one H200 capped at 24 GiB), one FlexAttention run, one NVMe run",
        "held_out": "every other row: the 2026-11-30 runs on the two-GPU machine (the ZeRO ladder, 2-rank runs with "
                    "collectives, the stock configs), the packed-chat and seq-2048 calibration runs (Qwen2.5-3B among "
                    "them), ZeRO-3 + optimizer offload with the parameters on the GPU (the 2026-12-02d LLaMA-7B runs: "
                    "a variant no fitting row has), the HF Trainer runs, the other attention-kernel runs, the other "
                    "NVMe runs: shapes, variants, machines and days the fit did not see",
        "excluded": skipped,
        "summary": {"fit": stats("fit"), "held_out": stats("held_out")},
        "rows": table,
    }


DOC = ROOT / "docs" / "speed.md"


def markdown(out: dict) -> str:
    """docs/speed.md: the model in short, its constants, and the table (every row, fit and held out)."""
    c = out["constants"]
    lines = ["# Predicted speed: the model and its error against every committed GPU run", "",
             "Written by `python -m benchmarks.speed_fit` from `data/calibration/speed/speed_model.json`; the model is "
             "`cookbook/speed.py` (its docstring has every formula and the DeepSpeed 0.19.8 source it follows). "
             "`cookbook estimate ... --gpu NAME --cpu-cores N [--max-steps S] --json` puts its prediction in each "
             "variant's `predicted`; `--sweep` shows it beside every option.", "",
             "**A step** = micro steps × (max(compute, transfers) + (1 − overlap) × min(compute, transfers)) + the "
             "serial optimizer phase (CPU Adam, the 16-bit copy up, ZeRO-1/2's all-gather, NVMe). Compute: 8·N "
             "FLOPs a token with gradient checkpointing (6·N without) plus PaLM's attention term, at a fitted fraction "
             "of the card's dense bf16 peak per attention kernel. Transfers: the PCIe bytes DeepSpeed moves for the "
             "variant, ZeRO-3's per-submodule fetches at a fitted latency each, ring collectives at (w−1)/w × bytes "
             "over NVLink or, without peer-to-peer (RTX 4090/3090), through host memory at half the PCIe link.", "",
             "**Attention and Liger** (`cookbook estimate --attention {auto,sdpa,flex,flash,eager} --liger "
             "{auto,on,off}`): one GPU fraction per attention class — sdpa on full rows, masked sdpa (packed rows) and "
             "flex, each split at sdpa's flash condition on the head dim (multiple of 8, at most 256: `_flash_head`), "
             "since where the head dim has fast kernels flex gains nothing (LLaMA-7B, head dim 128: 0.96× packed sdpa) "
             "and where it has none it does (the 3.4B shape, head dim 100: 1.38×; data/reference/h200_attention.json). "
             "flash and eager were not measured: predicted as sdpa on full rows. Liger's fused linear cross-entropy "
             "multiplies the compute by `liger_compute_factor`, measured at equal micro batch (≈1: its gain is the "
             "larger micro batch it lets fit, which the memory estimate counts).", "",
             "**Assumed, not measured:** the GPU fraction fitted on an H200 holds on other cards; the pinned PCIe "
             f"fraction measured on the H200 ({c['pcie_pinned_fraction']:.1%} of the link) holds on other links; each "
             "GPU has its own x16 link; CPU Adam scales linearly with cores; 100 Gb/s between machines. Not "
             "modelled: ZenFlow, SuperOffload, DeepSpeed's core binding, pin_memory false (rows excluded below).", "",
             "## Constants", "", "| constant | value | what |", "| --- | --- | --- |"]
    for k, v in c.items():
        lines.append(f"| `{k}` | {json.dumps(v)} | {out['constants_sources'].get(k, '')} |")
    s = out["summary"]
    lines += ["", "## Error", "",
              f"Fitting set ({s['fit']['rows']} rows): median |error| {s['fit']['median_abs_error_pct']} %, max "
              f"{s['fit']['max_abs_error_pct']} %. **Held out ({s['held_out']['rows']} rows): median |error| "
              f"{s['held_out']['median_abs_error_pct']} %, max {s['held_out']['max_abs_error_pct']} %, "
              f"{s['held_out']['within_25_pct']} of {s['held_out']['rows']} within ±25 %.** The fitting set's error says "
              "little: it has about as many rows as the model has constants; the held-out rows are the model's accuracy.", "",
              "Held out: " + out["held_out"] + ".", "",
              "Error = predicted / measured − 1. All runs: one H200 per rank capped at 24 GiB, 16 CPU threads a rank, "
              "bf16, gradient checkpointing.", "",
              "| set | file | run | ZeRO | opt/param offload | ranks × micro × accum × seq | states | attention | "
              "measured tokens/s | predicted | error |", "| --- | --- | --- | --- | --- | --- | --- | --- | ---: | ---: | ---: |"]
    for t in out["rows"]:
        w = t["workload"]
        lines.append(f"| {t['set']} | {t['file']} | {t['name']} | {w['zero_stage']} | {w['offload_optimizer']}/"
                     f"{w['offload_param']} | {w['world']} × {w['micro_batch']} × {w['grad_accum']} × {w['seq_len']} | "
                     f"{'bf16' if w['bf16_states'] else 'fp32'} | {w['attention']} | {t['measured_tokens_per_s']:,.0f} | "
                     f"{t['predicted_tokens_per_s']:,.0f} | {t['error_pct']:+.1f} % |")
    lines += ["", "## Where it misses (held out, beyond ±25 %)", ""]
    for t in out["rows"]:
        if t["set"] == "held_out" and abs(t["error_pct"]) > 25:
            lines.append(f"- {t['name']} ({t['file']}): {t['error_pct']:+.1f} %")
    lines += ["", "Runs not in the table (the model does not describe them):", ""]
    lines += [f"- {x['name']} ({x['file']}): {x['why']}" for x in out["excluded"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="print the table, write nothing")
    a = p.parse_args(argv)
    out = build()
    for t in out["rows"]:
        w = t["workload"]
        print(f"{t['set']:<8} {t['file'][:30]:<30} {t['name']:<32} z{w['zero_stage']} {w['offload_optimizer']:>4}/"
              f"{w['offload_param']:<4} {w['world']}x{w['micro_batch']}x{w['grad_accum']}x{w['seq_len']} "
              f"{'bf16' if w['bf16_states'] else 'fp32'} {w['attention']:<12} {t['measured_tokens_per_s']:>9.0f} "
              f"{t['predicted_tokens_per_s']:>9.0f} {t['error_pct']:>+7.1f}%")
    print(json.dumps(out["constants"]), json.dumps(out["summary"]))
    if not a.check:
        OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
        DOC.write_text(markdown(out))
        print(f"wrote {OUT.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
