#!/usr/bin/env bash
# The launch command(s) of this run; one line per machine.

accelerate launch --config_file /tmp/runfile-2x8/accelerate.yaml --mixed_precision bf16 --zero3_save_16bit_model true -m cookbook.train --model llama-7b --zero-stage 3 --offload-optimizer cpu --offload-param none --micro-batch 2 --grad-accum 8 --seq-len 1024 --precision bf16 --gradient-checkpointing --output-dir /tmp/runfile-2x8 --max-steps 4 --num-epochs 3.0 --lr 2e-05 --lr-scheduler cosine --warmup-ratio 0.03 --warmup-steps 1 --save-steps 0 --save-total-limit 1 --save-16bit final --dataset data/chats.jsonl --eval-steps 0 --random-weights --seed 1234 --emulate-gpu-memory-gib 24.0 --verify-save off --no-final-save --report-to none --packing --lr-source 'run file notebooks/llama7b-1x4090.yaml'
