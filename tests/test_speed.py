"""The speed model (cookbook.speed): its terms against hand-computed values, card names, the prediction table
(data/calibration/speed/speed_model.json) rebuilt row by row against the recorded measurements, and
`cookbook estimate --gpu/--cpu-cores`'s good and bad input."""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from cookbook import speed
from cookbook.cli import main as cli_main

REPO = Path(__file__).resolve().parent.parent
TABLE = json.loads((REPO / "data" / "calibration" / "speed" / "speed_model.json").read_text())

#: round constants so every term below can be computed by hand.
C = {"gpu_fraction": {"sdpa_flash": 0.5, "sdpa_no_flash": 0.4, "sdpa_masked": 0.25, "flex": 0.5},
     "cpu_adam_params_per_s_per_core": {"fp32": 1e8, "bf16": 2e8}, "zero3_transfer_fraction": 0.5,
     "overlap": 0.5, "nvme_overlap": 0.5, "zero3_fetch_latency_s": 1e-3, "zero3_copy_back_gb_s": 5.0,
     "pcie_pinned_fraction": 0.8, "inter_node_gb_s": 12.5}


def _w(**kw):
    base = dict(params=1_000_000_000, num_layers=10, hidden=1000, head_dim=100, world=1, machines=1, micro_batch=4,
                grad_accum=2, seq_len=1000, zero_stage=2, offload_optimizer="cpu", offload_param="none")
    return speed.Workload(**{**base, **kw})


def test_zero2_offload_terms_by_hand():
    """ZeRO-2 + optimizer offload on one RTX 4090, 16 cores: every term from its formula."""
    g = speed.gpu_spec("RTX 4090")
    t = speed.step_terms(_w(), speed.Machine(g, 16), C)
    pcie = 16 * 16 * 128 / 130 / 8 * 0.8 * 1e9            # PCIe 4.0 x16 × pinned fraction, bytes/s
    fpt = 8 * 1e9 + 16 * 10 * 1000 * 1000                  # checkpointing: 8N + 16·L·h·s
    c_micro = 4000 * fpt / (165.2e12 * 0.4)                # head dim 100: sdpa without flash
    x_micro = 2 * 1e9 / pcie                               # 16-bit gradients down each micro step
    micro = max(c_micro, x_micro) + 0.5 * min(c_micro, x_micro)
    adam = 1e9 / (1e8 * 16)                                # fp32 states, 16 cores
    up = 2 * 1e9 / pcie                                    # updated 16-bit weights up once a step
    assert t["compute_s"] == pytest.approx(2 * c_micro)
    assert t["pcie_fwd_bwd_s"] == pytest.approx(2 * x_micro)
    assert t["cpu_adam_s"] == pytest.approx(adam) and t["pcie_step_s"] == pytest.approx(up)
    assert t["step_s"] == pytest.approx(2 * micro + adam + up)
    assert t["comm_fwd_bwd_s"] == 0 and t["nvme_s"] == 0


def test_zero3_eight_4090s_go_through_host_and_h200s_over_nvlink():
    """ZeRO-3 full offload on 8 ranks: fetches, the per-submodule latency and the ring collectives (3 a micro
    step at (w−1)/w × 2N bytes) — through host memory (half the PCIe link) on 4090s, NVLink on H200s."""
    w = _w(world=8, zero_stage=3, offload_param="cpu", bf16_states=True, head_dim=128)
    part, ring = 1e9 / 8, 7 / 8
    for name, inter in (("RTX 4090", 16 * 16 * 128 / 130 / 8 * 0.8 / 2), ("H200", 450.0)):
        g = speed.gpu_spec(name)
        pcie = g.pcie_link_gb_s * 0.8 * 1e9
        t = speed.step_terms(w, speed.Machine(g, 32), C)
        fetch = 2 * 2 * part / (pcie * 0.5) + 2 * (9 * 10 + 3) * 1e-3
        grads = 2 * part / (pcie * 0.5) + (9 * 10 + 3) * 1e-3
        comm = 3 * ring * 2 * 1e9 / (inter * 1e9)
        assert t["pcie_fwd_bwd_s"] == pytest.approx(2 * (fetch + grads)), name
        assert t["comm_fwd_bwd_s"] == pytest.approx(2 * comm), name
        assert t["cpu_adam_s"] == pytest.approx(part / (2e8 * 32 / 8)), name   # 4 cores a rank, bf16 states
        assert t["pcie_step_s"] == 0.0                                          # the CPU partition is updated in place
        assert t["interconnect_gb_s"] == pytest.approx(inter)


def test_zero3_optimizer_offload_copies_back_at_the_fitted_blocking_rate_and_nvme_overlaps():
    g = speed.gpu_spec("H100")
    t = speed.step_terms(_w(zero_stage=3), speed.Machine(g, 16), C)
    assert t["pcie_step_s"] == pytest.approx(2 * 1e9 / 5e9)
    t = speed.step_terms(_w(zero_stage=3, offload_optimizer="nvme", offload_param="nvme", nvme_read_gb=20.0,
                            nvme_write_gb=10.0), speed.Machine(g, 16, 2.0, 2.0), C)
    assert t["nvme_s"] == pytest.approx(10.0 + 0.5 * 5.0)
    with pytest.raises(speed.SpeedModelError, match="nvme_read_gb_s"):
        speed.step_terms(_w(nvme_read_gb=1.0), speed.Machine(g, 16), C)


def test_prediction_of_an_estimate_and_the_run_time():
    from cookbook.memory import estimate
    from cookbook.plan import Plan
    e = estimate(Plan(model="llama-7b", num_gpus=1, zero_stage=3, offload_optimizer="cpu", offload_param="cpu",
                      micro_batch=2, grad_accum=8, seq_len=1024, host_memory_gib=128))
    m = speed.Machine(speed.gpu_spec("4090"), 16)
    p = speed.predict(e, m, steps=100)
    assert p.tokens_per_s == pytest.approx(2 * 8 * 1024 / p.step_s)
    assert p.run_s == pytest.approx(100 * p.step_s)
    by_epochs = speed.predict(e, m, epochs=2, dataset_tokens=500_000)
    assert by_epochs.steps == math.ceil(2 * 500_000 / (2 * 8 * 1024))
    d = p.to_dict()
    assert d["model"] == speed.MODEL_NAME and d["version"] == speed.MODEL_VERSION and "RTX 4090" in d["machine"]
    with pytest.raises(speed.SpeedModelError, match="dataset_tokens"):
        speed.predict(e, m, epochs=1)


@pytest.mark.parametrize("typed,name", [("RTX 4090", "RTX 4090"), ("rtx4090", "RTX 4090"), ("4090", "RTX 4090"),
                                        ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("a100", "A100"), ("H100", "H100"),
                                        ("h200", "H200"), ("RTX 3090", "RTX 3090"), ("l40s", "L40S")])
def test_card_names(typed, name):
    assert speed.gpu_spec(typed).name == name


def test_unknown_card_lists_the_known_ones():
    with pytest.raises(speed.UnknownGpuError) as exc:
        speed.gpu_spec("RTX 9999")
    assert "'RTX 9999'" in str(exc.value) and all(n in str(exc.value) for n in ("RTX 4090", "A100", "H200"))


def test_every_card_has_a_source_and_sane_numbers():
    data = json.loads(speed.GPUS_FILE.read_text())
    for g in data["gpus"]:
        assert g["source"] and 10 < g["peak_bf16_tflops"] < 2000 and g["memory_gib"] >= 16
    assert speed.gpu_spec("H200").pcie_link_gb_s == pytest.approx(63.0, abs=0.05)


# ---------------------------------------------------------------------------------------------- the table

def _reference_tokens_per_s(file: str, name: str, occurrence: int) -> float:
    """The measurement as the reference file holds it (read here, not through the fit script)."""
    data = json.loads((REPO / "data" / "reference" / file).read_text())
    runs = data if isinstance(data, list) else next(data[k] for k in ("rungs", "runs", "results") if k in data)
    return float([r for r in runs if r.get("name") == name][occurrence]["tokens_per_s"])


def test_prediction_table_rows_rebuild_from_the_model_and_the_measurements():
    consts = TABLE["constants"]
    assert consts == speed.constants()
    rows = TABLE["rows"]
    assert {r["set"] for r in rows} == {"fit", "held_out"}
    for r in rows:
        measured = _reference_tokens_per_s(r["file"], r["name"], r["occurrence"])
        assert r["measured_tokens_per_s"] == measured, r["name"]
        m = r["machine"]
        w = speed.Workload(**r["workload"])
        t = speed.step_terms(w, speed.Machine(speed.gpu_spec(m["gpu"]), m["cpu_cores"], m["nvme_read_gb_s"],
                                              m["nvme_write_gb_s"]), consts)
        predicted = w.tokens_per_step / t["step_s"]
        assert r["predicted_tokens_per_s"] == pytest.approx(predicted, abs=0.06), r["name"]
        assert r["error_pct"] == pytest.approx((predicted / measured - 1) * 100, abs=0.06), r["name"]


def test_held_out_error_is_reported_as_the_rows_say():
    for sel in ("fit", "held_out"):
        errs = sorted(abs(r["error_pct"]) for r in TABLE["rows"] if r["set"] == sel)
        s = TABLE["summary"][sel]
        assert s["rows"] == len(errs) and s["max_abs_error_pct"] == errs[-1]
        assert s["within_25_pct"] == sum(e <= 25 for e in errs)
        mid = len(errs) // 2
        median = errs[mid] if len(errs) % 2 else (errs[mid - 1] + errs[mid]) / 2
        assert s["median_abs_error_pct"] == pytest.approx(median, abs=0.051)
    assert TABLE["summary"]["held_out"]["rows"] >= 20     # most runs are held out, not fitted


# ---------------------------------------------------------------------------------------------- the CLI

ARGS = ["estimate", "llama-7b", "--gpus", "1", "--gpu-memory-gib", "24", "--host-memory-gib", "128", "--zero-stage",
        "3", "--offload-optimizer", "cpu", "--offload-param", "cpu", "--micro-batch", "2", "--grad-accum", "8",
        "--seq-len", "1024"]


def test_estimate_json_carries_the_prediction(capsys):
    assert cli_main(ARGS + ["--gpu", "rtx 4090", "--cpu-cores", "16", "--max-steps", "50", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    p = out["predicted"]
    m = speed.Machine(speed.gpu_spec("RTX 4090"), 16)
    from cookbook.memory import estimate
    from cookbook.plan import Plan
    e = estimate(Plan(model="llama-7b", num_gpus=1, host_memory_gib=128, zero_stage=3, offload_optimizer="cpu",
                      offload_param="cpu", micro_batch=2, grad_accum=8, seq_len=1024))
    want = speed.predict(e, m)
    assert p["tokens_per_s"] == pytest.approx(want.tokens_per_s, abs=0.1)
    assert p["step_s"] == pytest.approx(want.step_s, abs=1e-4) and p["run_s"] == pytest.approx(50 * want.step_s, abs=0.1)
    assert p["machine"] == "1 × RTX 4090, 16 CPU cores per machine" and p["version"] == speed.MODEL_VERSION


def test_sweep_shows_a_speed_beside_every_option(capsys):
    assert cli_main(ARGS + ["--gpu", "H100", "--cpu-cores", "8", "--sweep", "--json"]) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    assert all(v["predicted"]["tokens_per_s"] > 0 and "H100" in v["predicted"]["machine"] for v in out["variants"])
    cli_main(ARGS + ["--gpu", "H100", "--cpu-cores", "8", "--sweep"])
    text = capsys.readouterr().out
    assert "tokens/s (predicted)" in text and "speed predicted for 1 × H100, 8 CPU cores" in text


@pytest.mark.parametrize("extra,needle", [(["--gpu", "RTX 9999"], "--gpu 'RTX 9999': unknown GPU"),
                                          (["--cpu-cores", "0"], "--cpu-cores 0: must be a positive"),
                                          (["--max-steps", "0"], "--max-steps 0"),
                                          (["--num-epochs", "2"], "--num-epochs 2 needs --dataset-tokens")])
def test_bad_speed_flags_are_one_line_naming_the_flag(extra, needle, capsys):
    assert cli_main(ARGS + extra) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    if "RTX 9999" in extra:
        assert "RTX 4090" in err and "H200" in err


def test_sweep_prices_the_lossy_options_beside_the_exact_pick(capsys):
    """1 × 24 GiB, 128 GiB, Qwen2.5-7B: the exact pick is NVMe; every other option with room (bf16 states) is shown
    with its own predicted speed, so the user sees what exactness costs in time (issue 31 item 1)."""
    from cookbook.memory import decide
    from cookbook.plan import Plan
    args = ["estimate", "qwen2.5-7b", "--gpus", "1", "--gpu-memory-gib", "24", "--host-memory-gib", "128",
            "--seq-len", "1024", "--sweep", "--gpu", "RTX 4090", "--cpu-cores", "16"]
    cli_main(args)
    text = capsys.readouterr().out
    plan = Plan(model="qwen2.5-7b", num_gpus=1, gpu_memory_gib=24, host_memory_gib=128, seq_len=1024)
    d = decide(plan)
    assert not d.recommended.bf16_states and any(x.bf16_states for x in d.fitting)
    m = speed.Machine(speed.gpu_spec("RTX 4090"), 16)
    for e in (x for x in d.fitting if x is not d.recommended):
        p = speed.predict(e, m)
        assert f"{e.plan.label} (bf16 states, lossy), fits: {p.tokens_per_s:,.0f} tokens/s" in text


def test_default_cpu_cores_are_named_with_how_to_change_them(capsys):
    cli_main(ARGS + ["--gpu", "RTX 4090"])
    out = capsys.readouterr().out
    assert f"CPU cores: this machine's {speed.this_machine_cores()} — give --cpu-cores" in out


def test_gpu_whose_memory_differs_from_the_checked_memory_is_noted(capsys):
    h100 = speed.gpu_spec("H100")
    cli_main(ARGS + ["--gpu", "H100", "--gpu-memory-gib", "24"])
    err = capsys.readouterr().err
    assert f"--gpu 'H100' has {h100.memory_gib:g} GiB" in err and f"--gpu-memory-gib {h100.memory_gib:g}" in err
    cli_main(ARGS + ["--gpu", "H100", "--gpu-memory-gib", f"{h100.memory_gib:g}"])
    assert "--gpu 'H100' has" not in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- attention and Liger

@pytest.mark.parametrize("head_dim,attention,cls", [(100, "sdpa", "sdpa_no_flash"), (128, "sdpa", "sdpa_flash"),
                                                     (100, "sdpa_masked", "sdpa_masked"), (100, "flex", "flex"),
                                                     (128, "sdpa_masked", "sdpa_masked_flash_head"),
                                                     (128, "flex", "flex_flash_head")])
def test_attention_class_splits_at_sdpas_flash_condition(head_dim, attention, cls):
    assert speed.attention_class(head_dim, attention) == cls
    assert cls in speed.constants()["gpu_fraction"]


def test_liger_factor_is_the_probes_measured_ratio_and_scales_compute():
    probe = json.loads((REPO / "data" / "reference" / "h200_levers_2026-12-01.json").read_text())["liger_probe"]["rows"]
    t = {(r["liger"], r["micro_batch"]): r["time_s_1"] for r in probe}
    want = sum(t[(True, m)] / t[(False, m)] for m in (16, 24, 32)) / 3     # 1.0561/1.0499, 1.5442/1.5606, 2.0755/2.0841
    assert speed.constants()["liger_compute_factor"] == pytest.approx(want, abs=1e-4) and 0.99 < want < 1.01
    c = dict(C, liger_compute_factor=0.5)
    m = speed.Machine(speed.gpu_spec("H200"), 16)
    assert speed.step_terms(_w(liger=True), m, c)["compute_s"] == pytest.approx(
        0.5 * speed.step_terms(_w(), m, c)["compute_s"])


def _attention_run(name):
    runs = json.loads((REPO / "data" / "reference" / "h200_attention.json").read_text())["runs"]
    return [r["tokens_per_s"] for r in runs if r["name"] == name]


def test_estimate_attention_and_liger_flags_against_the_committed_runs(capsys):
    """3.4B shape (head dim 100), ZeRO-2 + optimizer offload, fp32 states, one H200: --attention flex/sdpa and
    --liger reach the speed model, and the predictions stay within ±25 % of the runs of h200_attention.json (the
    flex+Liger micro-32 runs are held out)."""
    from cookbook.memory import estimate
    from cookbook.plan import Plan
    base = ["estimate", "benchmarks/models/llama-3b", "--gpus", "1", "--gpu-memory-gib", "24", "--zero-stage", "2",
            "--offload-optimizer", "cpu", "--seq-len", "1024", "--gpu", "H200", "--cpu-cores", "16", "--json"]

    def tps(*extra):
        assert cli_main(base + list(extra)) == 0
        return json.loads(capsys.readouterr().out)
    flex, sdpa = tps("--micro-batch", "16", "--attention", "flex"), tps("--micro-batch", "16", "--attention", "sdpa")
    assert flex["predicted"]["attention"] == "flex" and sdpa["predicted"]["attention"] == "sdpa_masked"
    measured_ratio = _attention_run("l3b-flex-m16")[0] / statistics.mean(_attention_run("l3b-sdpa-m16"))
    assert 1.3 < measured_ratio < 1.45          # 6,318 vs 4,541 and 4,383
    assert flex["predicted"]["tokens_per_s"] / sdpa["predicted"]["tokens_per_s"] == pytest.approx(measured_ratio, rel=0.1)
    both = tps("--micro-batch", "32", "--attention", "flex", "--liger", "on")
    assert both["plan"]["liger"] is True and both["gpu_gib"]["total"] < 24
    e = estimate(Plan(model="benchmarks/models/llama-3b", gpu_memory_gib=24, zero_stage=2, offload_optimizer="cpu",
                      micro_batch=32, seq_len=1024, liger=True))
    want = speed.predict(e, speed.Machine(speed.gpu_spec("H200"), 16), attention="flex")
    assert both["predicted"]["tokens_per_s"] == pytest.approx(want.tokens_per_s, abs=0.1)
    for measured in _attention_run("l3b-flex-liger-m32"):          # 9,120 and 8,968 (and 9,463 unpacked, call 5)
        assert abs(both["predicted"]["tokens_per_s"] / measured - 1) < 0.25
    assert tps("--micro-batch", "16", "--attention", "auto", "--liger", "off")["predicted"]["attention"] == "flex"


@pytest.mark.parametrize("extra,needle", [(["--attention", "flex", "--cpu-rehearsal"], "--attention flex: FlexAttention"),
                                          (["--liger", "sometimes"], "argument --liger: invalid choice"),
                                          (["--attention", "fast"], "argument --attention: invalid choice")])
def test_bad_attention_and_liger_flags_name_the_flag(extra, needle, capsys):
    with pytest.raises(SystemExit) if "invalid choice" in needle else _nullcontext():
        assert cli_main(ARGS + extra) == 2
    assert needle in capsys.readouterr().err


def _nullcontext():
    import contextlib
    return contextlib.nullcontext()
