#!/usr/bin/env bash
# The launch command(s) of this run; one line per machine.

accelerate launch --config_file /tmp/gpu-1x24gib/06_final_1x4090/cpu_offload/accelerate.yaml --mixed_precision bf16 --zero3_save_16bit_model true -m cookbook.train --model llama-7b --zero-stage 3 --offload-optimizer cpu --offload-param cpu --micro-batch 16 --grad-accum 1 --seq-len 1024 --precision bf16 --gradient-checkpointing --output-dir /tmp/gpu-1x24gib/06_final_1x4090/cpu_offload --max-steps 3 --lr 1e-05 --lr-scheduler linear --warmup-ratio 0.05 --warmup-steps 1 --save-steps 0 --save-16bit every --random-weights --seed 1234 --bf16-states --emulate-gpu-memory-gib 24 --verify-save full --no-final-save --report-to none --lr-source 'launch(lr=...)'
