"""--attention: the rule `auto` applies, the refusals, and the same loss on packed rows with each implementation."""
import pytest

from cookbook.attention import CHOICES, ZERO3_SDPA_WHY, AttentionError, choose
from cookbook.data import load_tokenizer, make_rows, normalise, packing_attention, tokenize
from cookbook.models import model_spec


def test_auto_rule():
    # flash-attn installed on a GPU: its varlen kernels, packed or not
    assert choose("auto", on_gpu=True, packing=True, flash=True, flex=True)[0] == "flash_attention_2"
    # packed rows on a GPU without flash-attn: flex (document BlockMask), also when packing is left to its default
    assert choose("auto", on_gpu=True, packing=True, flash=False, flex=True)[0] == "flex_attention"
    assert choose("auto", on_gpu=True, packing=None, flash=False, flex=True)[0] == "flex_attention"
    # unpacked rows, a CPU run, or a torch without FlexAttention: sdpa, with the reason
    impl, why = choose("auto", on_gpu=True, packing=False, flash=False, flex=True)
    assert impl == "sdpa" and "not packed" in why
    impl, why = choose("auto", on_gpu=False, packing=True, flash=True, flex=True)
    assert impl == "sdpa" and "no GPU" in why
    assert choose("auto", on_gpu=True, packing=True, flash=False, flex=False)[0] == "sdpa"
    # an explicit choice is taken as typed
    assert choose("eager", on_gpu=False, packing=True) == ("eager", "--attention eager")
    assert choose("flex", on_gpu=True, packing=False, flex=True)[0] == "flex_attention"
    assert set(CHOICES) == {"auto", "sdpa", "flex", "flash", "eager"}


@pytest.mark.parametrize("requested,kw,words", [
    ("flex", dict(on_gpu=False, flex=True), ["--attention flex", "no backward on the CPU", "--attention sdpa"]),
    ("flash", dict(on_gpu=True, flash=False), ["--attention flash", "not installed", "pip install flash-attn"]),
    ("flash", dict(on_gpu=False, flash=False), ["--attention flash", "NVIDIA GPU", "--attention sdpa"]),
    ("flex", dict(on_gpu=False, flex=False), ["--attention flex", "no backward on the CPU"]),
    ("fast", dict(on_gpu=True), ["--attention 'fast'", "auto, sdpa, flex, flash, eager"]),
])
def test_refusals_name_the_flag_and_the_fix(requested, kw, words):
    with pytest.raises(AttentionError) as e:
        choose(requested, packing=True, **kw)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_train_cli_refuses_flex_on_cpu_before_loading(tmp_path):
    """`cookbook train --attention flex` on a CPU machine stops with the flag named, not inside torch."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "cookbook.cli", "train", "--model", "tiny-llama", "--random-weights",
                        "--attention", "flex", "--max-steps", "1", "--output-dir", str(tmp_path / "run"),
                        "--zero-stage", "0"], capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "DS_ACCELERATOR": "cpu"})
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "--attention flex" in out and "Traceback" not in out, out[-2000:]
    assert "nothing was launched" in out and "accelerate launch" not in out  # refused before the ranks start
    assert not (tmp_path / "run" / "logs" / "rank0.log").exists()


def test_packed_rows_same_loss_with_every_implementation_on_cpu():
    """One packed row of three chats: sdpa, eager and flex_attention (forward; FlexAttention has no CPU
    backward) give the same loss, and the packing check accepts flex's BlockMask as keeping examples apart."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    tok = load_tokenizer()
    chat = [{"role": "user", "content": "Add 2 and 3."}, {"role": "assistant", "content": "2 + 3 = 5"},
            {"role": "user", "content": "Thanks!"}, {"role": "assistant", "content": "You're welcome."}]
    data = tokenize(normalise([{"messages": chat}, {"messages": chat[:2]}, {"messages": chat[2:]}]), tok, 512)
    # one 128-token row (72 tokens of chats, then padding). Seen on the CPU with transformers 5.24: a row shorter
    # than FlexAttention's 128-token block gives wrong (at times NaN) outputs on its first example through
    # transformers' flex path, though torch's flex_attention with the same BlockMask is exact there
    rows = make_rows(data, 128, packing=True, seed=0, pad_id=tok.pad_token_id)
    assert len(rows) == 1 and rows.real_tokens == [sum(data.lengths)]
    batch = rows.batch([0], tok.pad_token_id)
    cfg = AutoConfig.from_pretrained(model_spec("tiny-llama").path)
    losses, checks = {}, {}
    for impl in ("sdpa", "eager", "flex_attention"):
        torch.manual_seed(0)
        m = AutoModelForCausalLM.from_config(cfg, attn_implementation=impl).eval()
        checks[impl] = packing_attention(m)
        with torch.no_grad():
            losses[impl] = float(m(**batch).loss)
    assert losses["eager"] == pytest.approx(losses["sdpa"], rel=1e-5)
    assert losses["flex_attention"] == pytest.approx(losses["sdpa"], rel=1e-5)
    assert checks["flex_attention"]["within_examples"] and not checks["flex_attention"]["dense_mask"]
    assert "BlockMask" in checks["flex_attention"]["how"]
    assert checks["sdpa"]["within_examples"] and checks["sdpa"]["dense_mask"]


def test_console_names_the_attention_before_launch(tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "cookbook.cli", "train", "--model", "tiny-llama", "--random-weights",
                        "--dry-run", "--output-dir", str(tmp_path / "d")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "[attention] sdpa (auto: no GPU" in r.stdout, r.stdout[-2000:]


def test_run_file_key_attention(tmp_path):
    """`attention:` in a run file is read like the flag, and a bad value names the file, the key and the choices."""
    import subprocess
    import sys
    bad, good = tmp_path / "bad.yaml", tmp_path / "good.yaml"
    bad.write_text("model: tiny-llama\nrandom-weights: true\nattention: bogus\n")
    good.write_text("model: tiny-llama\nrandom-weights: true\nattention: eager\n")
    run = lambda f, o: subprocess.run([sys.executable, "-m", "cookbook.cli", "train", str(f), "--dry-run",  # noqa: E731
                                       "--output-dir", str(tmp_path / o)], capture_output=True, text=True, timeout=300)
    r = run(bad, "b")
    assert r.returncode != 0 and "attention: 'bogus' is not one of auto, sdpa, flex, flash, eager" in r.stdout + r.stderr
    r = run(good, "g")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "--attention eager" in (tmp_path / "g" / "command.sh").read_text()


def test_auto_keeps_sdpa_under_zero3_where_flex_was_no_lever():
    """ZeRO-3: flex measured 0.96x sdpa on LLaMA-7B (evidence attention.zero3_llama7b_flex) and its compile workers
    tipped the exact-Adam 7B run into a host OOM: auto keeps sdpa there and says why; ZeRO-0/1/2 and unknown stages
    keep flex for packed rows; an explicit --attention flex is honoured at any stage."""
    from cookbook import evidence
    r = evidence.get("attention.zero3_llama7b_flex")
    assert r.ratio < 1.0 and "0.96x" in ZERO3_SDPA_WHY and f"{r.ratio:.2f}" == "0.96"
    impl, why = choose("auto", on_gpu=True, packing=True, flash=False, flex=True, zero_stage=3)
    assert impl == "sdpa" and why == ZERO3_SDPA_WHY and "--attention flex" in why
    for stage in (None, 0, 1, 2):
        assert choose("auto", on_gpu=True, packing=True, flash=False, flex=True, zero_stage=stage)[0] == "flex_attention"
    assert choose("flex", on_gpu=True, packing=True, flex=True, zero_stage=3)[0] == "flex_attention"
    assert choose("auto", on_gpu=True, packing=True, flash=True, flex=True, zero_stage=3)[0] == "flash_attention_2"
