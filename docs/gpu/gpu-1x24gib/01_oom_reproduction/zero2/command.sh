#!/usr/bin/env bash
# The launch command(s) of this run; one line per machine.

accelerate launch --config_file /tmp/gpu-1x24gib/01_oom_reproduction/zero2/accelerate.yaml --mixed_precision bf16 --zero3_save_16bit_model false -m cookbook.train --model qwen-14b --zero-stage 2 --offload-optimizer none --offload-param none --micro-batch 1 --grad-accum 4 --seq-len 512 --precision bf16 --gradient-checkpointing --output-dir /tmp/gpu-1x24gib/01_oom_reproduction/zero2 --max-steps 3 --lr 1e-05 --lr-scheduler linear --warmup-ratio 0.05 --warmup-steps 1 --save-steps 0 --save-16bit every --random-weights --seed 1234 --emulate-gpu-memory-gib 24 --verify-save full --no-final-save --report-to none --lr-source 'launch(lr=...)'
