#!/usr/bin/env bash
# Every parallel layout gives the single-rank run: for (TP, PP, DP) in (2,1,1) (1,2,1) (1,1,2)
# (2,2,1) (2,2,2) (4,1,1), (1,4,1) with 2 virtual stages (interleaved schedule) and (2,1,2) with
# sequence parallelism, a GPT-2-style and a Llama-style model (RMSNorm, SwiGLU, rotary, GQA, no
# biases, untied) train 20 iterations with dropout on, in fp32 under MPI. Loss and grad norm at
# every iteration (and the parameters' norm, --log-params-norm) and every parameter after training
# must equal the single-rank run within 1e-5 relative. The GPT-2-style model again with
# --eod-mask-loss (NullTokenizer's end-of-document id 96 of the 97: about one token in a hundred
# carries no loss), its loss the mean over micro-batches of each one's mean, in three layouts.
# Both models again with documents packed into samples (--reset-position-ids and
# --reset-attention-mask; NullTokenizer's end-of-document id 6 of 7: 2 or 3 documents in a sample
# of 16; its vocabulary padded to 8 alike on one and two tensor-parallel ranks), in three layouts
# each: every stage's attention gets the mask, and each one's embedding and rotary embeddings the
# positions. Query-key normalisation (--qk-layernorm; its norms' weights replicated, their
# gradients summed over the tensor-parallel heads): the Llama-style model (RMSNorm) and the
# GPT-2-style one (LayerNorm with biases, zero-centred weights: --apply-layernorm-1p), in two
# layouts each, tensor parallelism in both. Both models again with a head size other than
# hidden / heads (Megatron-LM's --kv-channels: 12 on the GPT-2-style model's hidden 32 with 4
# heads, 16 on the Llama-style one's hidden 64 with 8 heads on 4 groups), in two layouts each,
# TP=2 x PP=2 among them; and the Llama-style model with Qwen2's qkv biases (--add-qkv-bias, the
# biases split with the heads) at TP=2 x PP=2.
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
LOOM=${LOOM:-$LOOM_BUILD/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
CMP="$(dirname "$0")/../ref/compare_runs.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--mock-data --num-layers 8 --seq-length 16 --vocab-size 97 --make-vocab-size-divisible-by 32
        --micro-batch-size 2 --global-batch-size 16 --train-iters 20 --lr 3e-3 --min-lr 3e-4
        --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0
        --hidden-dropout 0.1 --attention-dropout 0.1 --log-interval 1 --eval-iters 0 --seed 11
        --log-params-norm)
gpt=(--hidden-size 32 --num-attention-heads 4)
llama=(--hidden-size 64 --num-attention-heads 8 --group-query-attention --num-query-groups 4
       --ffn-hidden-size 96 --normalization RMSNorm --swiglu --position-embedding-type rope
       --disable-bias-linear --untie-embeddings-and-output-weights)
layouts=("2 1 1" "1 2 1" "1 1 2" "2 2 1" "2 2 2" "4 1 1" "1 4 1 vpp" "2 1 2 sp")
gpteod=("${gpt[@]}" --tokenizer-type NullTokenizer --vocab-size 96 --eod-mask-loss)
gpteod_layouts=("1 1 2" "1 2 1" "2 2 2")
docs=(--tokenizer-type NullTokenizer --vocab-size 6 --make-vocab-size-divisible-by 4
      --reset-position-ids --reset-attention-mask)
gptdocs=("${gpt[@]}" "${docs[@]}")
llamadocs=("${llama[@]}" "${docs[@]}")
gptdocs_layouts=("2 1 2 sp" "1 2 1" "1 1 2")
llamadocs_layouts=("2 1 2 sp" "1 2 1 vpp" "2 2 1")
llamaqk=("${llama[@]}" --qk-layernorm)
gptqk=("${gpt[@]}" --qk-layernorm --apply-layernorm-1p)
llamaqk_layouts=("2 2 1" "1 2 1 vpp")
gptqk_layouts=("2 1 2 sp" "1 2 1")
gpthd=("${gpt[@]}" --kv-channels 12)
llamahd=("${llama[@]}" --kv-channels 16)
gpthd_layouts=("2 2 1" "2 1 2 sp")
llamahd_layouts=("2 2 1" "1 2 1 vpp")
llamaqb=("${llama[@]}" --add-qkv-bias)
llamaqb_layouts=("2 2 1")
fail=0 pass=0
for model in ${MODELS:-gpt llama gpteod gptdocs llamadocs llamaqk gptqk gpthd llamahd llamaqb}; do
  declare -n margs=$model
  case $model in
    gpteod|gptdocs|llamadocs|llamaqk|gptqk|gpthd|llamahd|llamaqb) declare -n lays=${model}_layouts ;;
    *) declare -n lays=layouts ;;
  esac
  ref="$tmp/$model-ref"
  "$LOOM" train "${common[@]}" "${margs[@]}" --save "$ref" --metrics-file "$ref.jsonl" > "$ref.log"
  for l in "${lays[@]}"; do
    set -- $l
    tp=$1 pp=$2 dp=$3 extra=()
    [ "${4:-}" = vpp ] && extra=(--num-layers-per-virtual-pipeline-stage 1)
    [ "${4:-}" = sp ] && extra=(--sequence-parallel)
    n=$((tp * pp * dp))
    out="$tmp/$model-$tp-$pp-$dp${4:-}"
    if ! loom_mpirun "$n" "$LOOM" train "${common[@]}" "${margs[@]}" --tensor-model-parallel-size "$tp" \
        --pipeline-model-parallel-size "$pp" "${extra[@]}" --save "$out" --metrics-file "$out.jsonl" > "$out.log" 2>&1; then
      echo "FAIL $model TP=$tp PP=$pp DP=$dp ${4:-}: the run failed"; tail -5 "$out.log"; fail=$((fail + 1)); continue
    fi
    if "$PYTHON" "$CMP" "$ref.jsonl" "$ref" "$out.jsonl" "$out" 1e-5 "$model TP=$tp PP=$pp DP=$dp ${4:-}"; then
      pass=$((pass + 1)); else fail=$((fail + 1)); fi
  done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
