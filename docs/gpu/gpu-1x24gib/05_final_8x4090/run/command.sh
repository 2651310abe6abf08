#!/usr/bin/env bash
# The launch command(s) of this run; one line per machine.

accelerate launch --config_file /tmp/gpu-1x24gib/05_final_8x4090/run/accelerate.yaml --mixed_precision bf16 --zero3_save_16bit_model true -m cookbook.train --model qwen2-14b-share8 --zero-stage 3 --offload-optimizer cpu --offload-param none --micro-batch 1 --grad-accum 4 --seq-len 512 --precision bf16 --gradient-checkpointing --output-dir /tmp/gpu-1x24gib/05_final_8x4090/run --max-steps 4 --lr 1e-05 --lr-scheduler linear --warmup-ratio 0.05 --warmup-steps 1 --save-steps 2 --save-16bit every --random-weights --seed 1234 --emulate-gpu-memory-gib 24 --verify-save full --report-to none --lr-source 'launch(lr=...)'
