"""Tests for cookbook.env: rules on recorded facts files, Accelerate's and DeepSpeed's own logic as the
reference, and one live run on this CPU machine."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cookbook import env
from cookbook.cli import main as cli_main
from cookbook.plan import Plan, PlanError

FACTS = Path(__file__).parent / "fixtures" / "facts"


def facts(name: str) -> dict:
    return env.load_facts(FACTS / f"{name}.json")


def status(report, name):
    return report[name].status


# ---------------------------------------------------------------- RTX 40xx rule (accelerate)
def test_rtx4090x4_driver535_without_nccl_vars_fails_with_fix():
    r = env.check(None, facts("rtx4090x4_driver535"))
    c = r["rtx40_p2p"]
    assert c.status == "fail" and not r.ok
    assert "NCCL_P2P_DISABLE=1" in c.fix and "NCCL_IB_DISABLE=1" in c.fix and "550.40.07" in c.fix
    assert "CUDA_VISIBLE_DEVICES" in c.reason and "NotImplementedError" in c.reason
    assert r.recommended_env == {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"}
    assert r.env_block() == "export NCCL_P2P_DISABLE=1\nexport NCCL_IB_DISABLE=1"
    assert r.failed == (c,)


def test_misspelled_nccl_vars_have_no_effect():
    r = env.check(None, facts("rtx4090x4_driver535_misspelled"))
    assert status(r, "rtx40_p2p") == "fail"
    assert "NCCL_P2P5ISABLE" in r["rtx40_p2p"].reason
    n = r["nccl_env"]
    assert n.status == "fail"
    assert "NCCL_P2P5ISABLE (did you mean NCCL_P2P_DISABLE?)" in n.value
    assert "NCCL_IB-DISABLE (did you mean NCCL_IB_DISABLE?)" in n.value
    block = r.env_block()
    assert "export NCCL_P2P_DISABLE=1" in block and "unset NCCL_P2P5ISABLE" in block
    assert "# NCCL_IB-DISABLE is not a valid variable name" in block


def test_driver_560_ok():
    r = env.check(None, facts("rtx4090x4_driver560"))
    assert status(r, "rtx40_p2p") == "ok"
    assert r.ok, [c for c in r.failed]
    assert r.recommended_env == {}


def test_one_rtx4090_ok():
    r = env.check(None, facts("rtx4090x1_driver535"))
    assert status(r, "rtx40_p2p") == "ok"
    assert "more than one" in r["rtx40_p2p"].reason
    assert r.ok


def test_cuda_visible_devices_does_not_avoid_the_rule():
    f = facts("rtx4090x4_driver535")
    f["cuda_visible_devices"] = "0"
    c = env.check(None, f)["rtx40_p2p"]
    assert c.status == "fail" and "CUDA_VISIBLE_DEVICES='0'" in c.reason


def test_nccl_vars_set_pass_and_zero_value_warns():
    f = facts("rtx4090x4_driver535")
    f["env"].update(NCCL_P2P_DISABLE="1", NCCL_IB_DISABLE="1")
    r = env.check(None, f)
    assert status(r, "rtx40_p2p") == "ok" and status(r, "recommended_env") == "ok" and r.ok
    f["env"]["NCCL_P2P_DISABLE"] = "0"  # accelerate only checks presence: starts, but P2P stays on
    assert status(env.check(None, f), "rtx40_p2p") == "warn"


@pytest.mark.parametrize("names,driver", [
    (["NVIDIA GeForce RTX 4090"] * 4, "535.104.05"),
    (["NVIDIA GeForce RTX 4090"] * 4, "550.40.07"),
    (["NVIDIA GeForce RTX 4090"] * 4, "550.40.06"),
    (["NVIDIA GeForce RTX 4090"] * 2, "560.35.03"),
    (["NVIDIA GeForce RTX 4090"], "535.104.05"),
    (["NVIDIA GeForce RTX 3090"] * 4, "470.57.02"),
    (["NVIDIA RTX 4000 Ada Generation"] * 2, "535.54.03"),
    (["NVIDIA GeForce RTX 4090", "NVIDIA A100-SXM4-80GB"], "535.54.03"),
    (["NVIDIA RTX A4000"] * 2, "535.54.03"),
])
def test_rule_matches_accelerates_own_function(monkeypatch, names, driver):
    """Feed Accelerate's check_cuda_p2p_ib_support the same nvidia-smi answers as the facts."""
    import accelerate.utils.environment as ae
    monkeypatch.setattr(ae, "get_gpu_info", lambda: (names, len(names)))
    monkeypatch.setattr(ae, "get_driver_version", lambda: driver)
    f = {"gpus": [{"name": n, "memory_gib": 24.0, "compute_capability": [8, 9]} for n in names],
         "driver_version": driver}
    assert env.accelerate_p2p_unsupported(f) == (not ae.check_cuda_p2p_ib_support())


# ---------------------------------------------------------------- CUDA toolkit / DeepSpeed ops
def test_torch_cu118_with_toolkit_121_fails_with_fix():
    r = env.check(None, facts("torch_cu118_toolkit121"))
    c = r["cuda_toolkit"]
    assert c.status == "fail" and not r.ok
    assert "11.8" in c.value and "12.1" in c.value
    assert "CUDA_HOME=/usr/local/cuda-11.8" in c.fix and "whl/cu121" in c.fix


def test_ds_skip_cuda_check_downgrades_to_warning():
    f = facts("torch_cu118_toolkit121")
    f["env"]["DS_SKIP_CUDA_CHECK"] = "1"
    assert status(env.check(None, f), "cuda_toolkit") == "warn"


def test_cuda_table_is_deepspeeds():
    from deepspeed.ops.op_builder.builder import cuda_minor_mismatch_ok
    assert env.CUDA_MINOR_MISMATCH_OK == cuda_minor_mismatch_ok


@pytest.mark.parametrize("torch_cuda,toolkit,ok", [
    ("11.8", "12.1", False), ("12.1", "12.1", True), ("12.1", "12.4", True), ("12.4", "12.8", True),
    ("12.8", "13.0", False), ("11.7", "11.8", True), ("13.0", "13.0", True), ("13.0", "13.1", False),
])
def test_cuda_pairs(torch_cuda, toolkit, ok):
    # the last case follows DeepSpeed: 13.x is not in its minor-mismatch table
    assert env.cuda_versions_compatible(torch_cuda, toolkit) is ok


def test_missing_build_tools_fail_only_when_plan_needs_jit_ops():
    f = facts("rtx4090x4_driver560")
    f["python_headers"], f["ninja"] = False, False
    assert status(env.check(None, f), "build_tools") == "warn"
    plan = Plan(model="llama-7b", num_gpus=4, zero_stage=2, offload_optimizer="cpu")
    c = env.check(plan, f)["build_tools"]
    assert c.status == "fail" and "python3-dev" in c.fix and "pip install ninja" in c.fix


def test_bf16_on_turing_fails_for_bf16_plan():
    f = facts("rtx4090x1_driver535")
    f["gpus"] = [{"name": "Tesla T4", "memory_gib": 15.0, "compute_capability": [7, 5]}]
    plan = Plan(model="tiny-qwen2", num_gpus=1, gpu_memory_gib=15.0, precision="bf16")
    c = env.check(plan, f)["bf16"]
    assert c.status == "fail" and "fp16" in c.fix


def test_plan_needs_more_gpus_than_present():
    c = env.check(Plan(model="tiny-qwen2", num_gpus=8), facts("rtx4090x4_driver560"))["gpus"]
    assert c.status == "fail" and "--gpus 4" in c.fix


def test_cpu_torch_on_gpu_box_fails():
    f = facts("rtx4090x4_driver560")
    f["torch_version"], f["torch_cuda_version"] = "2.5.1+cpu", None
    assert status(env.check(None, f), "torch_cuda_build") == "fail"


def test_old_driver_for_torch_cuda():
    f = facts("rtx4090x1_driver535")
    f["driver_version"], f["torch_cuda_version"] = "520.61.05", "12.4"  # CUDA 12.x needs >= 525.60.13
    c = env.check(None, f)["driver"]
    assert c.status == "fail" and "525.60.13" in c.reason


# ---------------------------------------------------------------- host memory / shm / NVMe
def test_qwen14b_full_offload_on_256gib_host_fails():
    from cookbook.memory import estimate
    plan = Plan(model="qwen-14b", num_gpus=8, zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
    need = estimate(plan).host_gib["total"]
    assert need > 256
    r = env.check(plan, facts("host256_8xrtx4090"))
    c = r["host_memory"]
    assert c.status == "fail" and not r.ok
    assert f"{need:.1f} GiB of 256.0 GiB" in c.value
    assert "pinned" in c.reason and "Swap (64 GiB) does not count" in c.reason
    # the same plan with the optimizer alone on the CPU is much lighter on RAM
    lighter = plan.replace(offload_param="none")
    assert estimate(lighter).host_gib["total"] < need


def test_recorded_machines_table_says_why_host_memory_fails():
    """Notebook 00's table (reference.check_recorded): a host_memory fail carries RAM needed vs present."""
    from cookbook import reference
    from cookbook.memory import estimate
    plan = Plan(model="qwen-14b", num_gpus=8, zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
    frame, records = reference.check_recorded(plan, {"8 × RTX 4090, 256 GiB": "host256_8xrtx4090.json",
                                                     "4 × RTX 4090, driver 560": "rtx4090x4_driver560.json"})
    row = frame.set_index("machine").loc["8 × RTX 4090, 256 GiB"]
    need = estimate(plan).host_gib["total"]  # 8 GPUs in that facts file
    assert row["host_memory"] == "fail"
    assert f"needs ≈ {need:.1f} GiB of host RAM" in row["host_memory why"]
    assert "this machine has 256.0 GiB" in row["host_memory why"]
    need4 = estimate(plan.replace(num_gpus=4)).host_gib["total"]
    total4 = facts("rtx4090x4_driver560")["host_memory_gib"]
    why4 = records["4 × RTX 4090, driver 560"]["host_memory_why"]
    assert f"on 4 rank(s) needs ≈ {need4:.1f} GiB" in why4 and f"has {total4:.1f} GiB" in why4


def test_small_shm_in_container():
    f = facts("rtx4090x4_driver560")
    f["shm_gib"] = 64 / 1024  # docker's default 64 MiB
    c = env.check(None, f)["shm"]
    assert c.status == "fail" and "--ipc=host" in c.fix and c.value == "/dev/shm 64 MiB"


NVME_PLAN = Plan(model="llama-7b", num_gpus=4, zero_stage=3, offload_optimizer="nvme", offload_param="nvme",
                 nvme_path="/mnt/nvme/ds_offload")


def test_nvme_without_libaio_fails_with_package():
    r = env.check(NVME_PLAN, facts("nvme_no_libaio"))
    c = r["libaio"]
    assert c.status == "fail" and "libaio-dev" in c.fix and "libaio-devel" in c.fix
    assert status(r, "deepspeed_ops") == "fail"
    assert status(r, "nvme_path") == "ok"
    # 6,738,415,616 params × (16 + 2) bytes = 112.96 GiB (fp32 master weights, Adam m and v and the fp32
    # gradients all go to the SSD, + bf16 weights; cookbook.nvme.estimate_nvme), free 1700 GiB
    assert 6_738_415_616 * 18 / 2**30 == pytest.approx(112.96, abs=0.01)
    # the swap files + the margin launch() asks for: × 1.05 + 1 GiB (nvme.nvme_disk_needed)
    assert round(6_738_415_616 * 18 / 2**30 * 1.05 + 1, 1) == 119.6
    assert r["nvme_disk"].value == "need 119.6 GiB, free 1700.0 GiB" and status(r, "nvme_disk") == "ok"


def test_nvme_disk_too_small_and_missing_folder():
    f = facts("nvme_no_libaio")
    f.update(libaio=True, disk_free_gib=50.0, nvme_path_exists=False)
    f["ds_ops"]["async_io"] = True
    r = env.check(NVME_PLAN, f)
    assert status(r, "libaio") == "ok"
    assert status(r, "nvme_disk") == "fail" and status(r, "nvme_path") == "fail"
    assert "mkdir -p /mnt/nvme/ds_offload" in r["nvme_path"].fix


def test_no_nvme_checks_without_nvme_plan():
    r = env.check(Plan(model="llama-7b", num_gpus=4, zero_stage=3), facts("nvme_no_libaio"))
    assert "libaio" not in r.names()


# ---------------------------------------------------------------- OpenMP binding vs DeepSpeed's CPU Adam
OFFLOAD_PLAN = Plan(model="llama-7b", num_gpus=1, zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
RAW = Path(__file__).resolve().parent.parent / "data" / "reference" / "raw"


def test_omp_proc_bind_close_with_cpu_offload_warns_with_cost_and_fix():
    f = facts("h200x2_recorded")
    f["env"]["OMP_PROC_BIND"] = "close"
    r = env.check(OFFLOAD_PLAN, f)
    c = r["omp_binding"]
    assert c.status == "warn" and c in r.warnings and c not in r.failed  # a warning, never a failure
    assert c.value == "OMP_PROC_BIND=close"
    assert "10.7× slower" in c.reason and "18.1 s vs 1.7 s" in c.reason and "omp_binding.cpu_adam" in c.reason
    assert "793 vs 4,332 tokens/s" in c.reason and "0.18×" in c.reason
    assert c.fix.startswith("unset OMP_PROC_BIND before launching")
    assert "--bind_cores_to_rank" in c.fix and "--enable_cpu_affinity" in c.fix
    line = env.cpu_adam_binding_warning(f["env"], OFFLOAD_PLAN)
    assert line == f"[env] warning: omp_binding: OMP_PROC_BIND=close: {c.reason}. Fix: {c.fix}"
    assert "[WARN] omp_binding: OMP_PROC_BIND=close" in str(r)
    # NVMe optimizer offload runs the same CPU Adam
    nvme = OFFLOAD_PLAN.replace(offload_optimizer="nvme", offload_param="nvme", nvme_path="/mnt/nvme")
    assert env.check(nvme, f)["omp_binding"].status == "warn"


def test_omp_places_warns_and_names_every_variable_in_the_unset():
    f = facts("rtx4090x1_driver535")
    f["env"].update(OMP_PLACES="cores", GOMP_CPU_AFFINITY="1-15")
    c = env.check(OFFLOAD_PLAN.replace(zero_stage=2, offload_param="none"), f)["omp_binding"]
    assert c.status == "warn" and c.value == "OMP_PLACES=cores, GOMP_CPU_AFFINITY=1-15"
    assert c.fix.startswith("unset OMP_PLACES GOMP_CPU_AFFINITY before launching")
    # the block to paste carries the unset too
    r = env.check(OFFLOAD_PLAN.replace(zero_stage=2, offload_param="none"), f)
    assert "unset OMP_PLACES GOMP_CPU_AFFINITY  # pinned OpenMP threads" in r.env_block()
    f["env"].pop("OMP_PLACES"), f["env"].pop("GOMP_CPU_AFFINITY")
    assert "unset OMP" not in env.check(OFFLOAD_PLAN.replace(zero_stage=2, offload_param="none"), f).env_block()


def test_omp_binding_off_or_no_optimizer_offload_is_no_finding():
    f = facts("h200x2_recorded")
    f["env"]["OMP_PROC_BIND"] = "false"
    c = env.check(OFFLOAD_PLAN, f)["omp_binding"]
    assert c.status == "ok" and c.value == "no OpenMP thread binding set"
    assert env.cpu_adam_binding_warning(f["env"], OFFLOAD_PLAN) is None
    f["env"]["OMP_PROC_BIND"] = "close"
    for plan in (None, Plan(model="llama-7b", num_gpus=1, zero_stage=3),
                 Plan(model="llama-7b", num_gpus=1, zero_stage=3, offload_param="cpu")):  # parameters only: GPU Adam
        assert "omp_binding" not in env.check(plan, f).names()
        assert env.cpu_adam_binding_warning(f["env"], plan) is None


@pytest.mark.parametrize("variables,found", [
    ({"OMP_PROC_BIND": "TRUE"}, {"OMP_PROC_BIND": "TRUE"}),
    ({"OMP_PROC_BIND": "spread,close"}, {"OMP_PROC_BIND": "spread,close"}),
    ({"OMP_PROC_BIND": "primary"}, {"OMP_PROC_BIND": "primary"}),
    ({"OMP_PROC_BIND": ""}, {}),
    ({"OMP_PROC_BIND": "False", "OMP_PLACES": "cores"}, {}),  # OpenMP: false disables affinity, places included
    ({"KMP_AFFINITY": "granularity=fine,compact,1,0"}, {"KMP_AFFINITY": "granularity=fine,compact,1,0"}),
    ({"KMP_AFFINITY": "disabled"}, {}),
    ({"KMP_AFFINITY": "verbose,none"}, {}),
    ({"OMP_NUM_THREADS": "15"}, {}),
])
def test_omp_binding_vars(variables, found):
    assert env.omp_binding_vars(variables) == found


def test_binding_variables_reach_the_facts_and_the_measured_layout_warns():
    """The live facts' env (relevant_env) keeps every binding variable, and the env of the measured run
    (7b-16x1-bind in the raw record) fires the check; the message's numbers are that record's."""
    raw = json.loads((RAW / "h200_levers_session5_call3_7b_levers.json").read_text())
    bound = next(r for r in raw["runs"] if r["name"] == "7b-16x1-bind")
    free = next(r for r in json.loads((RAW / "h200_levers_session5_call2_7b_levers.json").read_text())["runs"]
                if r["name"] == "7b-16x1")
    assert bound["variant"]["env"] == {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores", "OMP_NUM_THREADS": "15"}
    assert bound["plan"]["offload_optimizer"] == "cpu"
    kept = env.relevant_env({**bound["variant"]["env"], "GOMP_CPU_AFFINITY": "1-15", "KMP_AFFINITY": "compact",
                             "HOME": "/root"})
    assert kept == {"GOMP_CPU_AFFINITY": "1-15", "KMP_AFFINITY": "compact", **bound["variant"]["env"]}
    c = env.cpu_adam_binding_check(kept, Plan(**bound["plan"]))
    assert c.status == "warn" and "OMP_PROC_BIND=close" in c.value and "OMP_PLACES=cores" in c.value
    assert c.fix.startswith("unset OMP_PROC_BIND OMP_PLACES GOMP_CPU_AFFINITY KMP_AFFINITY ")

    def median(xs):
        xs = sorted(xs)
        return (xs[len(xs) // 2] + xs[(len(xs) - 1) // 2]) / 2
    step = {name: median([b["optimizer_step"] for b in r["breakdown"] if "optimizer_step" in b]) / 1000
            for name, r in (("bound", bound), ("free", free))}
    cost = env.OMP_BINDING_COST
    assert round(step["bound"], 1) == cost["optimizer_step_s_bound"] == 18.1
    assert round(step["free"], 1) == cost["optimizer_step_s_free"] == 1.7
    assert round(step["bound"] / step["free"], 1) == cost["slowdown"] == 10.7
    assert round(bound["tokens_per_s"]) == cost["tokens_per_s_bound"] == 793
    assert round(free["tokens_per_s"]) == cost["tokens_per_s_free"] == 4332


# ---------------------------------------------------------------- all-reduce results in facts
def test_p2p_hang_becomes_fail_with_fix():
    f = facts("rtx4090x4_driver560")
    f["allreduce"] = {"p2p_on": {"status": "timeout", "timeout_s": 60},
                      "p2p_off": {"status": "ok", "busbw_gbps": 18.2, "algbw_gbps": 12.1, "seconds": 0.0055}}
    r = env.check(None, f)
    c = r["allreduce"]
    assert c.status == "fail" and c.fix == "export NCCL_P2P_DISABLE=1"
    assert r.recommended_env == {"NCCL_P2P_DISABLE": "1"}


def test_allreduce_both_fine_prefers_faster():
    f = facts("rtx4090x4_driver560")
    f["allreduce"] = {"p2p_on": {"status": "ok", "busbw_gbps": 22.0}, "p2p_off": {"status": "ok", "busbw_gbps": 18.0}}
    c = env.check(None, f)["allreduce"]
    assert c.status == "ok" and "P2P on" in c.reason


def test_allreduce_timeout_kills_child_quickly():
    """The timeout path: a child that cannot finish in 0.3 s (importing torch alone takes longer) is killed."""
    t = time.monotonic()
    res = env._allreduce_once("0", 2, 0.3, 1, 1)
    assert res["status"] == "timeout"
    assert time.monotonic() - t < 10


# ---------------------------------------------------------------- facts files, secrets, report rendering
def test_missing_keys_mean_unknown_not_crash():
    r = env.check(None, {})
    assert r.ok is True or all(c.status != "fail" for c in r.checks)
    assert r["gpus"].status == "warn"
    r = env.check(Plan(model="qwen-14b", num_gpus=8, zero_stage=3, offload_optimizer="nvme",
                       nvme_path="/x"), {"gpus": [{"name": "NVIDIA GeForce RTX 4090"}] * 2})
    assert r["rtx40_p2p"].status == "warn"  # driver unknown


def test_bad_facts_file_errors(tmp_path):
    with pytest.raises(env.FactsError, match="cannot be read"):
        env.load_facts(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(env.FactsError, match="not valid JSON"):
        env.load_facts(bad)
    bad.write_text(json.dumps({"gpus": [{"name": "x", "compute_capability": "8.9"}]}))
    with pytest.raises(env.FactsError, match=r"compute_capability='8.9' must be \[major, minor\]"):
        env.load_facts(bad)
    bad.write_text(json.dumps({"host_memory_gib": "256"}))
    with pytest.raises(env.FactsError, match="host_memory_gib='256' must be"):
        env.load_facts(bad)


def test_secrets_masked_everywhere(tmp_path):
    f = facts("rtx4090x4_driver535")
    f["env"].update(HF_TOKEN="hf_realvalue123", WANDB_API_KEY="abc999", MY_PASSWORD="pw1", DB_SECRET="s3")
    r = env.check(None, f)
    out = r.to_json() + str(r) + r._repr_html_() + r.to_frame().to_string()
    path = env.dump_facts(f, tmp_path / "f.json")
    out += path.read_text()
    for secret in ("hf_realvalue123", "abc999", "pw1", "s3\""):
        assert secret not in out
    assert json.loads(path.read_text())["env"]["WANDB_API_KEY"] == "<set>"
    assert env.relevant_env({"HF_TOKEN": "x", "NCCL_DEBUG": "INFO", "HOME": "/root"}) == \
        {"HF_TOKEN": "<set>", "NCCL_DEBUG": "INFO"}


def test_report_renders_as_table():
    r = env.check(None, facts("rtx4090x4_driver535"))
    df = r.to_frame()
    assert list(df.columns) == ["name", "status", "value", "reason", "fix"]
    assert len(df) == len(r.checks)
    assert df.set_index("name").loc["rtx40_p2p", "status"] == "fail"
    assert "<table>" in r._repr_html_() and "export NCCL_P2P_DISABLE=1" in r._repr_html_()
    d = json.loads(r.to_json())
    assert d["ok"] is False and d["recommended_env"]["NCCL_IB_DISABLE"] == "1"


def test_plan_from_ds_config(tmp_path):
    cfg = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                 "offload_param": {"device": "cpu"}},
           "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 4}
    p = env.plan_from_ds_config(cfg, model="qwen-14b", world_size=8)
    assert (p.zero_stage, p.offload_optimizer, p.offload_param, p.grad_accum, p.micro_batch, p.num_gpus) == \
        (3, "cpu", "cpu", 4, 1, 8)
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    r = env.check(Plan(model="qwen-14b", num_gpus=8), facts("host256_8xrtx4090"), config=str(path))
    assert r.plan == p
    assert r["host_memory"].status == "fail"
    assert cli_main(["env", "--facts", str(FACTS / "host256_8xrtx4090.json"), "--config", str(path),
                     "--world-size", "8", "--model", "qwen-14b"]) == 1
    with pytest.raises(PlanError, match="cannot read"):
        env.plan_from_ds_config(tmp_path / "missing.json", model="qwen-14b", world_size=8)


# ---------------------------------------------------------------- CLI
def test_cli_on_facts_files(capsys):
    assert cli_main(["env", "--facts", str(FACTS / "rtx4090x4_driver560.json")]) == 0
    assert "cookbook env — OK" in capsys.readouterr().out
    assert cli_main(["env", "--facts", str(FACTS / "rtx4090x4_driver535.json"), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False
    assert cli_main(["env", "--facts", str(FACTS / "host256_8xrtx4090.json"), "--model", "qwen-14b", "--gpus", "8",
                     "--zero-stage", "3", "--offload-optimizer", "cpu", "--offload-param", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] host_memory" in out
    assert cli_main(["env", "--facts", str(FACTS / "nvme_no_libaio.json"), "--config", "/nonexistent.json"]) == 2
    assert cli_main(["env", "--facts", "/nonexistent/facts.json"]) == 2


def test_cli_json_output(capsys):
    assert cli_main(["env", "--facts", str(FACTS / "rtx4090x4_driver535_misspelled.json"), "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] is False
    assert {c["name"]: c["status"] for c in d["checks"]}["nccl_env"] == "fail"


def test_live_check_on_this_cpu_machine(monkeypatch, tmp_path, capsys):
    """The live run: warnings (no GPU), no failure, secrets masked, facts file written, in seconds."""
    monkeypatch.setenv("HF_TOKEN", "hf_livesecret42")
    dump = tmp_path / "facts.json"
    t = time.monotonic()
    rc = cli_main(["env", "--dump-facts", str(dump), "--json"])
    elapsed = time.monotonic() - t
    out = capsys.readouterr().out
    d = json.loads(out)
    assert rc == 0 and d["ok"] is True, [c for c in d["checks"] if c["status"] == "fail"]
    statuses = {c["name"]: c["status"] for c in d["checks"]}
    assert statuses["gpus"] == "warn"
    assert d["recommended_env"]["DS_ACCELERATOR"] == "cpu"
    facts_live = env.load_facts(dump)
    cores = facts_live["cpu_count_physical"] or facts_live["cpu_count"]
    assert d["recommended_env"]["OMP_NUM_THREADS"] == str(max(1, cores))
    assert facts_live["gpus"] == [] and facts_live["torch_cuda_version"] is None
    assert facts_live["env"]["HF_TOKEN"] == "<set>"
    assert "hf_livesecret42" not in out and "hf_livesecret42" not in dump.read_text()
    # the recorded facts reproduce the live verdicts
    again = env.check(None, facts_live)
    assert {c.name: c.status for c in again.checks} == statuses
    assert elapsed < 30


def test_recorded_h200x2_facts_reproduce_their_verdicts():
    """Facts gathered live on the lent 2× H200 box (all-reduce measured there) give the same verdicts here."""
    f = facts("h200x2_recorded")
    assert f["allreduce"]["p2p_on"]["correct"] and f["allreduce"]["p2p_off"]["correct"]
    r = env.check(None, f)
    got = {c.name: c.status for c in r.checks}
    assert got["deepspeed"] == "fail"  # not installed on that image
    assert got["rtx40_p2p"] == "ok" and got["peer_access"] == "ok" and got["cuda_toolkit"] == "ok"
    assert got["allreduce"] == "ok" and "P2P on" in r["allreduce"].reason
    assert r.recommended_env == {}
    assert [c.name for c in r.failed] == ["deepspeed"]


def test_cli_config_without_model_runs_the_checks_that_need_none(tmp_path, capsys):
    cfg = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/mnt/nvme"},
                                 "offload_param": {"device": "nvme", "nvme_path": "/mnt/nvme"}},
           "train_micro_batch_size_per_gpu": "auto"}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    code = cli_main(["env", "--facts", str(FACTS / "nvme_no_libaio.json"), "--config", str(path), "--world-size", "1"])
    out = capsys.readouterr().out
    assert code == 1  # libaio missing for the NVMe config
    names = {line.split("]")[1].split(":")[0].strip() for line in out.splitlines() if line.startswith("[")}
    assert {"torch", "deepspeed", "cuda_toolkit", "build_tools", "nccl_env", "libaio", "nvme_path"} <= names
    assert "[FAIL] libaio" in out
    assert "[WARN] model: not given" in out and "host_memory" in out and "nvme_disk" in out and "--model" in out
    assert "no model" in out.splitlines()[0]
    # the same through the Python API
    r = env.check(facts=facts("nvme_no_libaio"), config=cfg, world_size=1)
    assert r["model"].status == "warn" and r["libaio"].status == "fail" and "--model" in r["host_memory"].reason
    # no --world-size: from the config when it states one, else a refusal naming the flag
    cfg.update(train_batch_size=16, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=4)
    path.write_text(json.dumps(cfg))
    cli_main(["env", "--facts", str(FACTS / "nvme_no_libaio.json"), "--config", str(path)])
    cap = capsys.readouterr()
    assert "world size 2: from the config" in cap.err and "2 GPU(s)" in cap.out
    del cfg["train_batch_size"]
    path.write_text(json.dumps(cfg))
    assert cli_main(["env", "--facts", str(FACTS / "nvme_no_libaio.json"), "--config", str(path)]) == 2
    assert "--config needs --world-size N" in capsys.readouterr().err


def test_env_refuses_an_unknown_model_as_estimate_does(capsys):
    """`cookbook env --model qwen-15b` was "OK with 3 warning(s)", exit 0, the unknown name inside a host_memory
    warning; estimate and train refuse it (exit 2): env does too, before any check runs."""
    from cookbook import cli
    assert cli.main(["env", "--model", "qwen-15b", "--gpus", "8", "--no-allreduce", "--no-nvme-probe"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --model: model='qwen-15b': not a shipped name")


def test_versions_against_the_tested_set(tmp_path):
    from cookbook.env import _version_vs_tested, tested_versions
    c = tmp_path / "constraints.txt"
    c.write_text("deepspeed==0.19.8\ntransformers==5.17.0  # pinned\n# torch tested: 2.13.0 (CPU), 2.11.0 (CUDA)\n")
    tested = tested_versions(c)
    assert tested == {"deepspeed": ["0.19.8"], "transformers": ["5.17.0"], "torch": ["2.13.0", "2.11.0"]}
    assert _version_vs_tested("deepspeed", "0.19.8", tested).status == "ok"
    assert _version_vs_tested("torch", "2.11.0+cu130", tested).status == "ok"
    w = _version_vs_tested("transformers", "5.24.0", tested)
    assert w.status == "warn" and "5.24.0 differs from the tested 5.17.0" in w.reason and "-c constraints.txt" in w.fix
    assert _version_vs_tested("accelerate", "1.16.0", tested).status == "ok"  # not pinned: nothing to compare
    assert tested_versions(tmp_path / "missing.txt") == {}
    assert set(tested_versions()) >= {"deepspeed", "transformers", "accelerate", "torch"}  # the repository's file


def test_host_memory_gib_typed_is_the_machine_checked():
    """Issue 31 class 6: `env --host-memory-gib` was ignored when the facts had this machine's RAM."""
    from cookbook.env import _check_memory
    from cookbook.plan import Plan
    plan = Plan(model="llama-7b", num_gpus=1, zero_stage=3, offload_optimizer="cpu", offload_param="cpu",
                host_memory_gib=512)
    facts = {"host_memory_gib": 23.5, "host_available_gib": 20.0, "swap_gib": 0, "shm_gib": 8}
    c = [c for c in _check_memory(facts, plan) if c.name == "host_memory"][0]
    assert c.status == "ok" and "of 512.0 GiB (--host-memory-gib; this machine has 23.5 GiB)" in c.value
    c = [c for c in _check_memory(facts, plan.replace(host_memory_gib=16)) if c.name == "host_memory"][0]
    assert c.status == "fail" and "of 16.0 GiB" in c.value
    c = [c for c in _check_memory(facts, plan.replace(host_memory_gib=None)) if c.name == "host_memory"][0]
    assert c.status == "fail" and "of 23.5 GiB (20.0 GiB available now)" in c.value


def test_plan_typed_without_model_keeps_its_op_checks(tmp_path):
    """Issue 31 class 6: `env --zero-stage 3 --offload-optimizer nvme ...` without --model was dropped silently,
    and with it the async_io / libaio checks the plan needs."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "cookbook.cli", "env", "--zero-stage", "3", "--offload-optimizer", "nvme",
                        "--offload-param", "nvme", "--nvme-path", str(tmp_path), "--json", "--no-allreduce",
                        "--no-nvme-probe"], capture_output=True, text=True, timeout=300)
    report = json.loads(r.stdout)
    names = {c["name"] for c in report["checks"]}
    assert "libaio" in names and "deepspeed_ops" in names, names
    assert "plan without --model" in r.stderr
    ops = [c for c in report["checks"] if c["name"] == "deepspeed_ops"][0]
    assert "async_io" in ops["value"]


def test_bad_host_memory_gib_refused_without_model():
    """`env --host-memory-gib -5` without --model was ignored (exit 0); it is refused as with --model."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "cookbook.cli", "env", "--host-memory-gib", "-5", "--no-allreduce",
                        "--no-nvme-probe"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--host-memory-gib -5.0: must be a positive number of GiB" in r.stderr, r.stderr


# ---------------------------------------------------------------- fp16 on GPUs without bf16 (issue 31, class 5)
def _v100_facts():
    f = facts("rtx4090x4_driver560")
    f["gpus"] = [{"index": i, "name": "Tesla V100-SXM2-32GB", "memory_gib": 31.7, "compute_capability": [7, 0]}
                 for i in range(4)]
    return f


def test_fp16_on_v100_says_what_loss_scaling_does():
    plan = Plan(model="llama-7b", num_gpus=4, gpu_memory_gib=31.7, zero_stage=3, precision="fp16")
    c = env.check(plan, _v100_facts())["fp16_loss_scaling"]
    assert c.status == "warn" and "cannot decrease scale anymore" in c.reason
    # DeepSpeed's defaults: 2^16, 1 hysteresis step + 16 halvings + 1 at the floor of 1
    assert c.value == "fp16 on compute capability 7.0; dynamic loss scale 2^16, exits after 18 overflows in a row"
    assert "warm the lr up" in c.fix and "initial_scale_power" in c.fix and "fp32" in c.fix
    # bf16 cards and bf16 plans: no such check
    assert "fp16_loss_scaling" not in [x.name for x in env.check(plan, facts("rtx4090x4_driver560")).checks]
    assert "fp16_loss_scaling" not in [x.name for x in env.check(plan.replace(precision="fp32"), _v100_facts()).checks]


def test_cli_env_config_fp16_block_on_v100(tmp_path, capsys):
    """The config's own loss-scaling keys are the ones reported: min_loss_scale 128 ends the run after 11."""
    fpath = tmp_path / "facts.json"
    fpath.write_text(json.dumps(_v100_facts()))
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4,
                               "fp16": {"enabled": True, "loss_scale": 0, "min_loss_scale": 128},
                               "zero_optimization": {"stage": 2}}))
    cli_main(["env", "--facts", str(fpath), "--config", str(cfg), "--world-size", "4", "--json"])
    out = json.loads(capsys.readouterr().out)
    c = [x for x in out["checks"] if x["name"] == "fp16_loss_scaling"][0]
    assert "exits after 11 overflows" in c["value"] and "min_loss_scale 128" in c["fix"]


# ---------------------------------------------------------------- libaio vs DeepSpeed's async_io probe (issue 31, class 6)
def _tree(root, files):
    for rel in files:
        p = root / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    return root


def test_libaio_files_finds_dev_and_runtime_files(tmp_path):
    root = _tree(tmp_path, ["/usr/include/libaio.h", "/usr/lib/x86_64-linux-gnu/libaio.so",
                            "/usr/lib/x86_64-linux-gnu/libaio.so.1t64"])
    got = env.libaio_files({}, root=root)
    assert got == {"header": "/usr/include/libaio.h", "library": "/usr/lib/x86_64-linux-gnu/libaio.so",
                   "runtime": "/usr/lib/x86_64-linux-gnu/libaio.so.1t64", "default_paths": True}
    # Ubuntu 24.04 with only libaio1t64 (no libaio-dev): the run-time library alone
    runtime_only = env.libaio_files({}, root=_tree(tmp_path / "rt", ["/usr/lib/x86_64-linux-gnu/libaio.so.1t64"]))
    assert runtime_only["header"] is None and runtime_only["library"] is None and runtime_only["runtime"]
    # a libaio built from source under /opt: found through CFLAGS/LDFLAGS, outside the default folders without them
    opt = _tree(tmp_path / "opt", ["/opt/libaio/include/libaio.h", "/opt/libaio/lib/libaio.so"])
    assert env.libaio_files({}, root=opt)["header"] is None
    named = env.libaio_files({"CFLAGS": "-O2 -I/opt/libaio/include", "LDFLAGS": "-L /opt/libaio/lib"}, root=opt)
    assert named["header"] == "/opt/libaio/include/libaio.h" and named["default_paths"]
    conda = _tree(tmp_path / "conda", ["/env/include/libaio.h", "/env/lib/libaio.so"])
    c = env.libaio_files({"CONDA_PREFIX": "/env"}, root=conda)
    assert c["library"] == "/env/lib/libaio.so" and not c["default_paths"]


def _nvme_facts(**over):
    f = facts("nvme_no_libaio")  # DeepSpeed's probe said async_io=False there
    f.update(over)
    return f


def test_libaio_installed_but_probe_fails_is_not_install_libaio():
    """The reported case: libaio-dev is installed, DeepSpeed's probe fails for another reason."""
    f = _nvme_facts(libaio=True, libaio_files={"header": "/usr/include/libaio.h",
                                               "library": "/usr/lib/x86_64-linux-gnu/libaio.so",
                                               "runtime": "/usr/lib/x86_64-linux-gnu/libaio.so.1", "default_paths": True},
                    cxx=False)
    c = env.check(NVME_PLAN, f)["libaio"]
    assert c.status == "fail" and c.value.startswith("libaio installed (/usr/include/libaio.h")
    assert "not the fix" in c.reason and "has_function" in c.reason and "no C/C++ compiler" in c.reason
    assert "build-essential" in c.fix and 'CFLAGS="-I/usr/include" LDFLAGS="-L/usr/lib/x86_64-linux-gnu"' in c.fix
    assert "DS_BUILD_AIO=1 pip install" in c.fix and "deepspeed==0.16.4" in c.fix
    assert "libaio-dev" not in c.fix
    assert "see the libaio check" in env.check(NVME_PLAN, f)["deepspeed_ops"].fix


def test_libaio_outside_default_paths_gets_cflags_ldflags():
    f = _nvme_facts(libaio=False, libaio_files={"header": "/env/include/libaio.h", "library": "/env/lib/libaio.so",
                                                "runtime": None, "default_paths": False})
    c = env.check(NVME_PLAN, f)["libaio"]
    assert "outside the compiler's default folders" in c.reason
    assert 'export CFLAGS="-I/env/include" LDFLAGS="-L/env/lib"' in c.fix


def test_libaio_runtime_only_names_the_dev_files():
    f = _nvme_facts(libaio=False, libaio_files={"header": None, "library": None,
                                                "runtime": "/usr/lib/x86_64-linux-gnu/libaio.so.1t64",
                                                "default_paths": False})
    c = env.check(NVME_PLAN, f)["libaio"]
    assert c.status == "fail" and "libaio.h" in c.reason and "libaio.so (the link-time library)" in c.reason
    assert "libaio-dev" in c.fix


def test_prebuilt_async_io_needs_no_probe_nor_python_headers():
    f = _nvme_facts(libaio=True, python_headers=False, python_version="3.12.3",
                    python_include="/usr/include/python3.12",
                    libaio_files={"header": None, "library": None, "runtime": "/usr/lib/x86_64-linux-gnu/libaio.so.1",
                                  "default_paths": False},
                    ds_prebuilt_ops={"async_io": True, "cpu_adam": True, "fused_adam": False})
    r = env.check(NVME_PLAN, f)
    assert r["libaio"].status == "ok" and "prebuilt" in r["libaio"].value
    assert r["build_tools"].status == "warn" and "prebuilt" in r["build_tools"].reason
    assert r["deepspeed_ops"].status == "ok"


def test_missing_python_h_is_an_error_only_for_a_jit_op():
    """Issue 31, class 6: CPU Adam (optimizer offload) not prebuilt: missing Python.h stops the run at start."""
    f = facts("rtx4090x4_driver560")
    f.update(python_headers=False, python_version="3.12.3", python_include="/home/u/.venv-py/include/python3.12")
    offload = Plan(model="llama-7b", num_gpus=4, zero_stage=2, offload_optimizer="cpu")
    c = env.check(offload, f)["build_tools"]
    assert c.status == "fail" and "JIT-build cpu_adam" in c.reason and "jit_load" in c.reason
    assert "python3.12-dev" in c.fix and "python3-dev" in c.fix and "/home/u/.venv-py/include/python3.12" in c.fix
    assert env.check(Plan(model="llama-7b", num_gpus=4, zero_stage=3), f)["build_tools"].status == "warn"
    f["ds_prebuilt_ops"] = {"cpu_adam": True}
    assert env.check(offload, f)["build_tools"].status == "warn"


# ---------------------------------------------------------------- WSL2 and pinned memory
@pytest.mark.parametrize("proc_version,environ,wsl", [
    ("Linux version 5.15.153.1-microsoft-standard-WSL2 (root@941d701f84f1) (gcc (GCC) 11.2.0) #1 SMP", {}, True),
    ("Linux version 4.4.0-19041-Microsoft (Microsoft@Microsoft.com) (gcc version 5.4.0) #1237-Microsoft", {}, True),
    ("Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075) (x86_64-linux-gnu-gcc-13) #45-Ubuntu SMP", {}, False),
    (None, {"WSL_DISTRO_NAME": "Ubuntu-22.04"}, True),
    (None, {}, False),
])
def test_detect_wsl(proc_version, environ, wsl):
    assert env.detect_wsl(proc_version, environ) is wsl


def test_wsl_with_offload_recommends_pin_memory_false_with_its_measured_cost():
    from cookbook.dsconfig import PIN_MEMORY_OFF_COST
    f = facts("rtx4090x1_driver535")
    f["wsl"] = True
    plan = Plan(model="llama-7b", num_gpus=1, zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
    c = env.check(plan, f)["wsl"]
    assert c.status == "warn" and "Pinned system memory" in c.reason and "CUDA on WSL User Guide" in c.reason
    assert '"pin_memory": false' in c.fix and "PIN_MEMORY_OFF_COST" in c.fix
    slower = PIN_MEMORY_OFF_COST["pinned_tokens_per_s"] / PIN_MEMORY_OFF_COST["unpinned_tokens_per_s"]
    assert f"{slower:.1f}x slower" in c.fix and round(1381 / 458, 1) == 3.0
    assert env.check(Plan(model="llama-7b", num_gpus=1, zero_stage=2), f)["wsl"].status == "ok"
    assert "wsl" not in [x.name for x in env.check(plan, facts("rtx4090x1_driver535")).checks]
