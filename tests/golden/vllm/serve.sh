#!/usr/bin/env bash
# example: compiled by fakplan from shapes/example.yaml. Edit the shape, not this file.
# Record: plan.json sha256 d656fb01dd4a9d3e490ee509f8056c0bd8527a61d8827a823845237b63ef7b52
# engine vllm (0.11.0), model meta-llama/Llama-3.1-8B-Instruct
# 2 sequence slots x 16,384-token window, KV auto
#
# Derivation (per card, per rank)
#   rate       full attention 131,072 = 131,072 B/token/rank at auto (bf16)
#   rules      vllm v1-0.11 arithmetic (read in 0.11.0)
#   contract   2 seqs x 16,384 tokens x 131,072 B/token = 4,294,967,296 B (4,096.00 MiB)
#   tokens     num_blocks = 5,368,709,120 B // 2,097,152 B = 2,560; logged tokens = 2,560 // 1 groups x 16 = 40,960 (v1-0.11, read in 0.11.0)
#   sessions   40,960 tokens / 16,384 = 2.50 sessions at the full window
#   pair       16,384 MiB weights + 5,120 MiB KV = 21,504 MiB
#   card       24,576 MiB as stated in the shape (card.total)
#   ceiling    22,528 MiB as stated in the shape
#   unclaimed  22,528 MiB ceiling - 21,504 MiB pair = 1,024 MiB
#
# Gates
#   ok       pool ≥ contract (5,120 MiB ≥ 4,096 MiB)
#   ok       pair ≤ ceiling (21,504 MiB ≤ 22,528 MiB)
#   ok       weights fit their budget (15,317 MiB ≤ 16,384 MiB)
#   ok       max_model_len ≤ trained context (16,384 ≤ 131,072)
#   ok       the engine boots the shape (none of 7 refusal rows applies)
#   warn     unclaimed VRAM (1,024 MiB unclaimed > 512 MiB)
#            fix: set serving.max_num_seqs: 3, budget.kv: 6144 MiB (gives up nothing; gated: every gate passes)
#
# Predictions (falsifiable; each verdict is written under its prediction)
#   kv-tokens: the boot ledger reports 40,960 KV tokens (± 0.5 %)
#     closed by ledger: fakplan verify shapes/example.yaml --ledger BOOT.log
#     verdict: open
#   sessions-at-window: backs 2 sequences all at 16,384 tokens at once
#     closed by ledger: fakplan verify shapes/example.yaml --ledger BOOT.log
#     verdict: open
#   boundary: 2 concurrent prompts of max_model_len - gen tokens each: 2/2 are accepted and served in full (none refused or preempted)
#     closed by probe boundary: fakplan probe shapes/example.yaml --url URL --only boundary
#     verdict: open
#   weights: the boot's weights fit budget.weights (16,384 MiB)
#     closed by ledger: fakplan verify shapes/example.yaml --ledger BOOT.log
#     verdict: open
#   unclaimed: the pair (21,504 MiB) fits under the ceiling the boot ledger measures, 1,024 MiB unclaimed by the shape's ceiling
#     closed by ledger: fakplan verify shapes/example.yaml --ledger BOOT.log
#     verdict: open
#   decode-tps: with all 2 slots decoding at once near 16,384 tokens, each session gets 11.0..11.6 tokens/s (22.0..23.2 tokens/s in all; at the full window 11.0..11.5 tokens/s a session); decode alone: prefills the engine runs in the same steps slow it further
#     closed by probe decode-load: fakplan probe shapes/example.yaml --url URL --only decode-load
#     verdict: open
#   decode-tps-one: one session decodes at 13.8..14.6 tokens/s (the decode probe's run, context up to 1,024 tokens)
#     closed by probe decode: fakplan probe shapes/example.yaml --url URL --only decode
#     verdict: open
#
# Role: serve
# --kv-cache-memory-bytes: budget.kv = 5,368,709,120 B per GPU (vllm 0.11.0 takes the pool in bytes)
set -euo pipefail
exec vllm serve meta-llama/Llama-3.1-8B-Instruct --host 0.0.0.0 --port 8000 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-model-len 16384 --max-num-seqs 2 --kv-cache-dtype auto --kv-cache-memory-bytes 5368709120
