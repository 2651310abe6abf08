"""Write the shipped model configs under data/models/ (config.json only, no weights).

Sources of the numbers:
  * qwen-14b: Qwen/Qwen-14B config.json (hidden 5120, 40 layers, 40 heads, intermediate 27392 in
    Qwen's own code = 2 x 13696 per projection, vocab 152064, untied embeddings, q/k/v biases).
    Qwen-14B ships custom modelling code (trust_remote_code); we represent it with the native Qwen2
    architecture at the same sizes: 14,167,290,880 parameters, as Qwen's own module tree gives.
  * llama-7b: huggyllama/llama-7b config.json (LLaMA-1 7B): 6,738,415,616 parameters.
  * qwen2.5-7b, qwen2.5-14b: Qwen/Qwen2.5-7B and Qwen/Qwen2.5-14B config.json.
  * qwen2-14b-share8 (and share4, share2 for 2 and 4 ranks): one rank's share of Qwen-14B on 8 ranks under ZeRO-3 (with or without offload):
    a Qwen2-architecture model with 1/8 of Qwen-14B's parameters (1,770,747,904 = 14,167,290,880 / 8
    within 0.01 %; the real vocabulary 152064, hidden 2048, 22 layers, 16 heads of 128, MLP 5760), so
    its model states (16-bit parameters and gradients, fp32 master weights, Adam moments) on ONE rank
    equal Qwen-14B's per-rank model states on 8 ranks: ZeRO-3 partitions all of them 1/8 per rank
    (Rajbhandari et al. 2020, ZeRO, section 5). The gathered-layer buffer is the share's own (smaller)
    layer; activations are one micro batch through 22 layers, not 40. tests/test_memory.py checks the
    equality with cookbook.memory's estimator.
  * tiny-qwen2, tiny-llama: the same architectures shrunk for tests, with the vocabulary of the
    tokenizer shipped in data/tokenizer.
Run: python scripts/make_model_configs.py
"""
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "data" / "models"

QWEN2 = dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu",
             attention_dropout=0.0, initializer_range=0.02, use_cache=False, use_sliding_window=False,
             sliding_window=None, max_window_layers=0, torch_dtype="bfloat16")
LLAMA = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
             attention_bias=False, mlp_bias=False, attention_dropout=0.0, initializer_range=0.02,
             pretraining_tp=1, rope_scaling=None, use_cache=False, torch_dtype="float16")

CONFIGS = {
    "qwen-14b": dict(QWEN2, hidden_size=5120, intermediate_size=13696, num_hidden_layers=40,
                     num_attention_heads=40, num_key_value_heads=40, vocab_size=152064,
                     max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=10000.0,
                     tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151643,
                     _cookbook_note=("Qwen-14B (first generation) represented with the native Qwen2 "
                                     "architecture at the same sizes; the original ships custom code.")),
    "qwen2.5-7b": dict(QWEN2, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                       max_position_embeddings=131072, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151643),
    "qwen2.5-14b": dict(QWEN2, hidden_size=5120, intermediate_size=13824, num_hidden_layers=48,
                        num_attention_heads=40, num_key_value_heads=8, vocab_size=152064,
                        max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=1000000.0,
                        tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151643),
    "llama-7b": dict(LLAMA, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                     max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=10000.0,
                     tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0),
}

def share(k: int, hidden: int, mlp: int, layers: int) -> dict:
    """Qwen-14B's share on k-fold fewer ranks: a Qwen2-architecture model with 1/k of its parameters (the
    real vocabulary and head size 128), so that on 8/k ranks each rank holds the model states one of 8
    Qwen-14B ranks holds under ZeRO-3 (16 bytes per parameter, partitioned evenly)."""
    return dict(QWEN2, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
                num_attention_heads=hidden // 128, num_key_value_heads=hidden // 128, vocab_size=152064,
                max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                bos_token_id=151643, eos_token_id=151643,
                _cookbook_note=(f"1/{k} of Qwen-14B's parameters in the Qwen2 architecture (random weights, not a "
                                f"pretrained model): on {8 // k} rank(s) under ZeRO-3 each rank holds the model "
                                "states one of Qwen-14B's 8 ranks holds."))


#: Shapes found by a search over hidden (multiples of 128), MLP and layers for 1/k of 14,167,290,880:
#: share8 1,770,747,904 (-0.009 %), share4 3,541,855,744 (+0.001 %), share2 7,084,442,880 (+0.011 %).
CONFIGS.update({"qwen2-14b-share8": share(8, 2048, 5760, 22), "qwen2-14b-share4": share(4, 3584, 9472, 16),
                "qwen2-14b-share2": share(2, 3840, 9984, 34)})


def tiny(vocab_size: int, bos: int, eos: int, pad: int) -> dict:
    common = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=vocab_size, max_position_embeddings=1024,
                  rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                  bos_token_id=bos, eos_token_id=eos, pad_token_id=pad, torch_dtype="float32")
    return {"tiny-qwen2": dict(QWEN2, **common), "tiny-llama": dict(LLAMA, **common)}


def main() -> None:
    tok_cfg = json.loads((ROOT.parent / "tokenizer" / "tokenizer.json").read_text())
    vocab = tok_cfg["model"]["vocab"]
    added = {t["content"]: t["id"] for t in tok_cfg.get("added_tokens", [])}
    size = max(max(vocab.values()), max(added.values(), default=0)) + 1
    configs = dict(CONFIGS, **tiny(size, added["<|bos|>"], added["<|eos|>"], added["<|pad|>"]))
    for name, cfg in configs.items():
        (ROOT / name).mkdir(parents=True, exist_ok=True)
        cfg = {k: v for k, v in cfg.items()}
        (ROOT / name / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        print("wrote", ROOT / name / "config.json")


if __name__ == "__main__":
    main()
