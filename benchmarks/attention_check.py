"""Packed rows keep their loss with each attention implementation (issue 32), and what flex costs to compile.

The shipped chats, tokenized with the shipped tokenizer and packed into ``ROWS`` rows of ``SEQ`` tokens as
``cookbook train --packing`` packs them, go through one random-init model (same seed) with ``sdpa`` (dense
block-diagonal mask) and ``flex_attention`` (document ``BlockMask``), in fp32 and in bf16. Printed and written
as JSON: the loss of each, the largest per-token loss difference, and for flex the seconds of the first
forward + backward (``torch.compile`` of the flex kernels) and of the next ones::

    python3 -m benchmarks.attention_check benchmarks/models/llama-1b 4 1024 > $OUT/attention_check.json  # GPU
    python3 -m benchmarks.attention_check tiny-llama 1 256 --cpu                                         # CPU, forward only
"""
from __future__ import annotations

import argparse
import json
import time


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="a shipped name or a config folder")
    p.add_argument("rows", type=int, help="packed rows in the micro batch")
    p.add_argument("seq", type=int, help="tokens per row")
    p.add_argument("--cpu", action="store_true", help="forward only on the CPU (FlexAttention has no CPU backward)")
    a = p.parse_args(argv)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from cookbook.data import load_records, load_tokenizer, make_rows, tokenize
    from cookbook.models import CHAT_DATASET_PATH, model_spec

    dev = "cpu" if a.cpu else "cuda"
    tok = load_tokenizer()
    data = tokenize(load_records(CHAT_DATASET_PATH), tok, a.seq, packing=True)
    rows = make_rows(data, a.seq, packing=True, seed=0, pad_id=tok.pad_token_id)
    batch = {k: v.to(dev) for k, v in rows.batch(list(range(a.rows)), tok.pad_token_id).items()}
    cfg = AutoConfig.from_pretrained(model_spec(a.model).path)
    out = {"model": a.model, "rows": a.rows, "seq": a.seq, "device": dev, "torch": torch.__version__,
           "real_tokens": int(sum(rows.real_tokens[:a.rows]))}
    for dtype in (torch.float32, torch.bfloat16):
        per_token = {}
        for impl in ("sdpa", "flex_attention"):
            torch.manual_seed(0)
            with torch.device(dev):
                m = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=impl)
            times = []
            for i in range(1 if a.cpu else 3):
                if dev == "cuda":
                    torch.cuda.synchronize()
                t = time.perf_counter()
                with torch.set_grad_enabled(not a.cpu):
                    logits = m(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits.float()
                    lab = batch["labels"][:, 1:]
                    tl = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), lab, ignore_index=-100,
                                                           reduction="none")
                    loss = tl.sum() / (lab != -100).sum()
                    if not a.cpu:
                        loss.backward()
                        m.zero_grad(set_to_none=True)
                if dev == "cuda":
                    torch.cuda.synchronize()
                times.append(round(time.perf_counter() - t, 3))
            per_token[impl] = tl.detach()[lab != -100]
            out[f"{impl}_{str(dtype)[6:]}"] = {"loss": float(loss), "fwd_bwd_s": times}
            del m
            if dev == "cuda":
                torch.cuda.empty_cache()
        d = (per_token["sdpa"] - per_token["flex_attention"]).abs()
        out[f"max_token_loss_diff_{str(dtype)[6:]}"] = float(d.max())
        out[f"mean_token_loss_diff_{str(dtype)[6:]}"] = float(d.mean())
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
