"""NVMe parameter offload and DeepSpeed's swap buffers (issue #3062): a real 1-rank CPU run that stops with
``AssertionError: Not enough buffers 0 for swapping 1`` under the builder's old settings and trains under the new
ones; the buffer count by hand; the lint rule; the disk-space guard before launch."""
from __future__ import annotations

import copy
import json
import math
import shutil

import pytest

from cookbook import nvme
from cookbook.dsconfig import build_config
from cookbook.lint import lint
from cookbook.models import model_spec
from cookbook.plan import Plan
from cookbook.sizes import _tensor_numels
from test_nvme import aio_op  # noqa: F401 - the fixture is used by name (skips where the async I/O op cannot build)

#: hidden 768: q, k, v, o (768², 589,824 elements = 1.125 MiB of bf16) and gate/up/down (768 × 1536) are all
#: >= DeepSpeed's 1 MiB swap minimum (swap_tensor/utils.py MIN_AIO_BYTES) on 1 rank, as are the embedding and
#: head (4096 × 768): 2 × 7 + 2 = 16 tensors on the SSD with max_in_cpu 0, against DeepSpeed's 5 buffers.
BUF_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 768,
             "intermediate_size": 1536, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
             "vocab_size": 4096, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
             "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
             "torch_dtype": "bfloat16", "use_cache": False}


@pytest.fixture(scope="module")
def buf_llama(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("buf-llama")
    (d / "config.json").write_text(json.dumps(BUF_LLAMA))
    return str(d)


def _plan(model, nv, gc=True):
    return Plan(model=model, num_gpus=1, zero_stage=3, offload_optimizer="nvme", offload_param="nvme",
                nvme_path=str(nv), micro_batch=1, grad_accum=1, seq_len=32, precision="bf16",
                gradient_checkpointing=gc)


def _configs(plan):
    """The builder's config and the one it wrote before the fix (stage3_max_reuse_distance 1e9, DeepSpeed's
    default; buffer_count 5), both with max_in_cpu 0 (the parameters reach the SSD, as a 7B's do) and
    buffer_size 2^22 (>= the largest partition, 3,145,728; locks 40 MiB, not 1 GB)."""
    new = build_config(plan, "accelerate", lr=1e-3, warmup_steps=1, total_steps=4)
    for z in (new["zero_optimization"],):
        z["offload_param"].update(max_in_cpu=0, buffer_size=2 ** 22)
    old = copy.deepcopy(new)
    old["zero_optimization"]["stage3_max_reuse_distance"] = 10 ** 9
    old["zero_optimization"]["offload_param"]["buffer_count"] = 5
    return old, new


def test_buffers_needed_by_hand(buf_llama, tmp_path):
    plan = _plan(buf_llama, tmp_path)
    old, new = _configs(plan)
    # builder: reuse distance 0; 5 buffers (>= 4: transformers' ZeRO-3 init swaps in q, k, v, o together)
    assert new["zero_optimization"]["stage3_max_reuse_distance"] == 0
    assert new["zero_optimization"]["offload_param"]["buffer_count"] == 5
    s_new = nvme.estimate_nvme(plan, ds_config=new, device="cpu").settings
    assert (s_new["param_buffers_init_gather"], s_new["param_buffers_kept_by_reuse"], s_new["param_buffers_needed"]) \
        == (4, 0, 4)
    # old: the whole model (~1.8e7 elements, x3 under checkpointing) lies within 1e9: all 16 tensors on the SSD
    # stay swapped in from forward to backward, + 1 for the module fetched = 17 > 5
    assert model_spec(buf_llama).num_params == 2 * 4096 * 768 + 2 * (4 * 768 ** 2 + 3 * 768 * 1536 + 2 * 768) + 768
    s_old = nvme.estimate_nvme(plan, ds_config=old, device="cpu").settings
    assert (s_old["param_buffers_kept_by_reuse"], s_old["param_buffers_needed"]) == (16, 17)
    # the function itself on a hand-made layout: embedding, 2 layers, norm, head; only layer 0's q and the head
    # on the SSD. The head (3,145,728) is used again right after itself: kept within 1e7; q is 2 x 1.67e7 away
    spec = model_spec(buf_llama)
    numels = _tensor_numels(spec)
    assert len(numels) == 1 + 2 * 9 + 2 and numels[-1] == 4096 * 768
    on = [False] * len(numels)
    on[1] = on[-1] = True
    assert numels[1] + 2 * sum(numels[2:]) > 10 ** 7 > numels[-1]
    assert nvme.param_buffers_needed(spec, numels, on, reuse=0) == {"need": 1, "init_gather": 1, "kept_by_reuse": 0}
    assert nvme.param_buffers_needed(spec, numels, on, reuse=10 ** 7) == {"need": 2, "init_gather": 1,
                                                                          "kept_by_reuse": 1}
    on[2] = on[3] = on[4] = True  # k, v, o too: the attention block gathers 4 at init
    assert nvme.param_buffers_needed(spec, numels, on, reuse=0)["init_gather"] == 4
    # the estimate without a config is the builder's (same buffer count, same reads, same host bytes)
    built = build_config(plan)
    a, b = nvme.estimate_nvme(plan), nvme.estimate_nvme(plan, ds_config=built)
    assert a.host_per_rank == b.host_per_rank and a.read_per_step_per_rank == b.read_per_step_per_rank
    # 5 locked bf16 buffers of buffer_size 1e8 elements, each rounded up to 1024 B (512 elements)
    assert built["zero_optimization"]["offload_param"]["buffer_size"] == 10 ** 8
    assert a.host_per_rank["param_swap_buffers"] == 5 * math.ceil(10 ** 8 / 512) * 512 * 2


def test_lint_names_buffer_count_and_3062(buf_llama, tmp_path):
    plan = _plan(buf_llama, tmp_path)
    old, new = _configs(plan)
    found = [f for f in lint(old, world_size=1, mode="deepspeed", model=buf_llama, plan=plan)
             if f.path == "zero_optimization.offload_param.buffer_count"]
    assert len(found) == 1 and found[0].severity == "error"
    f = found[0].to_dict()
    assert "buffer_count 5" in f["message"] and "17" in f["message"] and "#3062" in f["message"]
    assert "stage3_max_reuse_distance to 0" in f["fix"] and "at least 17" in f["fix"]
    assert not [f for f in lint(new, world_size=1, mode="deepspeed", model=buf_llama, plan=plan)
                if f.path == "zero_optimization.offload_param.buffer_count"]
    # buffer_count 17 with the old reuse distance is also enough
    enough = copy.deepcopy(old)
    enough["zero_optimization"]["offload_param"]["buffer_count"] = 17
    assert not [f for f in lint(enough, world_size=1, mode="deepspeed", model=buf_llama, plan=plan)
                if f.path == "zero_optimization.offload_param.buffer_count"]


def test_launch_refuses_when_the_swap_files_do_not_fit(tmp_path):
    """Qwen2.5-14B, optimizer and parameters on NVMe: ~250 GiB of swap files per machine, more than this disk has
    free: refused before any rank starts, naming --nvme-path, the free and needed GiB and the fixes."""
    from cookbook.launch import launch
    ok, why = nvme.async_io_available()
    if not ok:  # the launch stops at the missing libaio first (its own refusal, tests/test_nvme.py)
        pytest.skip(f"DeepSpeed's async I/O op is not usable here: {why}")
    nv = tmp_path / "nv"
    nv.mkdir()
    plan = Plan(model="qwen2.5-14b", num_gpus=1, zero_stage=3, offload_optimizer="nvme", offload_param="nvme",
                nvme_path=str(nv), micro_batch=1, grad_accum=1, seq_len=128, precision="bf16")
    disk = nvme.estimate_nvme(plan, ds_config=build_config(plan)).disk_bytes
    free = shutil.disk_usage(nv).free
    need = disk * 1.05 + 2 ** 30
    if free >= need:
        pytest.skip(f"this disk has {free / 2**30:.0f} GiB free, more than the 14B's {need / 2**30:.0f} GiB")
    res = launch(plan, tmp_path / "run", max_steps=1, lr=2e-5, random_weights=True, tokenizer="shipped", quiet=True,
                 progress=False)
    assert res.status == "config_error"
    assert f"--nvme-path {nv}" in res.message
    assert " GiB free on its file system" in res.message
    stated_free = float(res.message.split(": ", 2)[-1].split(" GiB free")[0].split()[-1])
    assert stated_free == pytest.approx(free / 2 ** 30, abs=0.5)
    assert f"need {need / 2**30:.1f} GiB" in res.message
    assert "larger SSD" in res.message and "smaller model" in res.message and "--offload-param cpu" in res.message
    assert not (tmp_path / "run" / "logs").exists() or not any((tmp_path / "run" / "logs").iterdir())
    # the same plan on a folder with room passes the guard
    assert nvme.nvme_disk_refusal(plan.replace(model="tiny-llama")) is None


@pytest.mark.slow
def test_cpu_run_old_settings_run_out_of_swap_buffers_new_ones_train(aio_op, buf_llama, tmp_path, monkeypatch):
    """A real 1-rank CPU run (DS_ACCELERATOR=cpu), ZeRO-3 with optimizer and parameters on NVMe, gradient
    checkpointing: under the old settings DeepSpeed keeps the first 5 parameters of step 2's forward swapped
    in and stops at the 6th, as on the H200 with the 1.1B; under the builder's it trains 4 steps."""
    from cookbook.launch import launch
    plan = _plan(buf_llama, tmp_path / "nv")
    (tmp_path / "nv").mkdir()
    old, new = _configs(plan)
    import cookbook.lint as lint_mod
    with monkeypatch.context() as m:  # the run, not the cookbook's own lint rule, must say it
        m.setattr(lint_mod, "_rule_nvme_param_buffers", lambda *a, **k: None)
        bad = launch(plan, tmp_path / "old", config=old, max_steps=4, lr=1e-3, warmup_steps=1, final_save=False,
                     tokenizer="shipped", hang_timeout_s=300, quiet=True, progress=False)
    assert bad.status == "failed", bad.message
    assert "Not enough buffers 0 for swapping 1" in bad.message
    log = (tmp_path / "old" / "logs" / "rank0.log").read_text()
    assert "Num available params: count = 5" in log
    shutil.rmtree(tmp_path / "nv" / "zero_stage_3", ignore_errors=True)
    ok = launch(plan, tmp_path / "new", config=new, max_steps=4, lr=1e-3, warmup_steps=1, final_save=False,
                tokenizer="shipped", hang_timeout_s=300, quiet=True, progress=False)
    assert ok.status == "ok", ok.message
    assert ok.summary["steps"] == 4 and math.isfinite(ok.summary["last_loss"])
