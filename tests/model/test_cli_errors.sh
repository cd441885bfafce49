#!/usr/bin/env bash
# Bad input to train, convert and generate: each case exits non-zero, before any work, with one
# line "loom: error: ..." that names the flag, file or value at fault.
set -uo pipefail
LOOM=${LOOM:-build/loom}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
# expect_error "what" "text the message must contain" command...
expect_error() {
  local what=$1 needle=$2
  shift 2
  local out rc
  out=$(timeout 60 "$@" 2>&1 >/dev/null)
  rc=$?
  local lines
  lines=$(printf '%s\n' "$out" | grep -c '^loom: error:')
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$lines" -eq 1 ] && grep -qF -- "$needle" <<< "$out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $what (exit $rc): $out"
  fi
}
T=(train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
   --vocab-size 50 --train-iters 2 --eval-iters 0)
expect_error "unknown flag" "--no-such-flag" "$LOOM" "${T[@]}" --no-such-flag 3
expect_error "missing value" "--lr needs a value" "$LOOM" "${T[@]}" --lr
expect_error "not a number" "--lr" "$LOOM" "${T[@]}" --lr fast
expect_error "bad choice" "--normalization" "$LOOM" "${T[@]}" --normalization BatchNorm
expect_error "heads vs hidden" "--num-attention-heads 5 does not divide --hidden-size 32" "$LOOM" train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 5 --train-iters 1
expect_error "query groups" "--num-query-groups 3" "$LOOM" "${T[@]}" --group-query-attention --num-query-groups 3
expect_error "groups without gqa" "--group-query-attention" "$LOOM" "${T[@]}" --num-query-groups 2
expect_error "no data" "--data-path" "$LOOM" train --num-layers 2 --train-iters 1
expect_error "no iterations" "--train-iters" "$LOOM" train --mock-data
expect_error "batch split" "--global-batch-size 3" "$LOOM" "${T[@]}" --micro-batch-size 2 --global-batch-size 3
expect_error "positions" "--max-position-embeddings 8" "$LOOM" "${T[@]}" --max-position-embeddings 8
expect_error "dropout" "--hidden-dropout" "$LOOM" "${T[@]}" --hidden-dropout 1.5
expect_error "tp vs world" "--tensor-model-parallel-size 2" "$LOOM" "${T[@]}" --tensor-model-parallel-size 2
expect_error "layers vs pp" "--pipeline-model-parallel-size 3 does not divide --num-layers 2" "$LOOM" "${T[@]}" --pipeline-model-parallel-size 3
expect_error "attention backend choice" "--attention-backend" "$LOOM" "${T[@]}" --attention-backend triton
expect_error "attention backend on cpu" "--attention-backend flash: the cpu backend has one attention kernel" "$LOOM" "${T[@]}" --attention-backend flash
expect_error "deterministic with fused" "--deterministic-mode and --attention-backend fused" "$LOOM" "${T[@]}" --deterministic-mode --attention-backend fused
expect_error "kept activation layers" "--kept-activation-layers must be 0 or more" "$LOOM" "${T[@]}" --kept-activation-layers -1
expect_error "rotary base" "--rotary-base (rope_theta) must be positive (got 0)" "$LOOM" "${T[@]}" --position-embedding-type rope --rotary-base 0
expect_error "weight decay" "--weight-decay must be >= 0 (got -0.1)" "$LOOM" "${T[@]}" --weight-decay -0.1
S=(train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
   --vocab-size 50 --eval-iters 0 --micro-batch-size 2 --global-batch-size 4)
expect_error "iters and samples" "--train-iters and --train-samples exclude each other" "$LOOM" "${S[@]}" --train-iters 2 --train-samples 8
expect_error "no length" "give --train-iters or --train-samples" "$LOOM" "${S[@]}" --train-samples -8
expect_error "samples flag with iters" "--lr-decay-samples goes with --train-samples" "$LOOM" "${S[@]}" --train-iters 2 --lr-decay-samples 8
expect_error "iters flag with samples" "--lr-warmup-iters goes with --train-iters" "$LOOM" "${S[@]}" --train-samples 8 --lr-warmup-iters 1
expect_error "warmup fraction range" "--lr-warmup-fraction must be in [0, 1] (got 1.5)" "$LOOM" "${S[@]}" --train-iters 2 --lr-warmup-fraction 1.5
expect_error "warmup twice" "give one of --lr-warmup-fraction and --lr-warmup-iters" "$LOOM" "${S[@]}" --train-iters 2 --lr-warmup-fraction 0.1 --lr-warmup-iters 1
expect_error "negative decay" "--lr-decay-iters" "$LOOM" "${S[@]}" --train-iters 2 --lr-decay-iters -5
expect_error "warmup init" "--lr-warmup-init" "$LOOM" "${S[@]}" --train-iters 2 --lr 1e-3 --lr-warmup-init 1e-2
expect_error "samples below a batch" "--train-samples 3 is less than one global batch (--global-batch-size 4)" "$LOOM" "${S[@]}" --train-samples 3
expect_error "warmup past decay" "the learning-rate warmup (5 iterations) must end by the end of the decay (4 iterations" "$LOOM" "${S[@]}" --train-iters 4 --lr-warmup-iters 5
expect_error "warmup past decay, samples" "the learning-rate warmup (40 samples) must end by the end of the decay (32 samples" "$LOOM" "${S[@]}" --train-samples 64 --lr-decay-samples 32 --lr-warmup-samples 40
expect_error "wsd without its decay" "--lr-decay-style WSD needs --lr-wsd-decay-iters" "$LOOM" "${S[@]}" --train-iters 4 --lr-decay-style WSD
expect_error "wsd samples with iters" "--lr-wsd-decay-samples goes with --train-samples" "$LOOM" "${S[@]}" --train-iters 4 --lr-decay-style WSD --lr-wsd-decay-samples 8
expect_error "cyclic sampler" "--dataloader-type cyclic: only 'single'" "$LOOM" "${T[@]}" --dataloader-type cyclic
expect_error "sgd" "--optimizer: 'sgd' is not one of adam|onebit-adam" "$LOOM" "${T[@]}" --optimizer sgd
expect_error "bf16 moments" "--exp-avg-dtype bf16: only fp32" "$LOOM" "${T[@]}" --exp-avg-dtype bf16
expect_error "eod mask without a tokenizer" "--eod-mask-loss needs the tokenizer's end-of-document id" "$LOOM" "${T[@]}" --eod-mask-loss
expect_error "position reset without a tokenizer" "--reset-position-ids needs the tokenizer's end-of-document id" "$LOOM" "${T[@]}" --reset-position-ids
expect_error "document mask without a tokenizer" "--reset-attention-mask needs the tokenizer's end-of-document id" "$LOOM" "${T[@]}" --reset-attention-mask
expect_error "document mask with cuDNN's attention" "--reset-attention-mask and --attention-backend fused exclude each other" "$LOOM" "${T[@]}" --tokenizer-type NullTokenizer --vocab-size 49 --reset-position-ids --reset-attention-mask --attention-backend fused
expect_error "dist ckpt" "--use-dist-ckpt: checkpoints are safetensors" "$LOOM" "${T[@]}" --use-dist-ckpt
printf '{"text": "a"}\n' > "$tmp/in.jsonl"
expect_error "sentencepiece model missing" "cannot open $tmp/missing.model" "$LOOM" preprocess \
  --input "$tmp/in.jsonl" --output-prefix "$tmp/out" --tokenizer-type Llama2Tokenizer \
  --tokenizer-model "$tmp/missing.model"
expect_error "ckpt-step without load" "--ckpt-step needs --load" "$LOOM" "${T[@]}" --ckpt-step 3
expect_error "ckpt-step missing" "--ckpt-step 7: --load $tmp has no checkpoint of that iteration (no $tmp/iter_0000007/meta.json)" "$LOOM" "${T[@]}" --load "$tmp" --ckpt-step 7
expect_error "negative duration" "--exit-duration-in-mins must be >= 0 (got -1)" "$LOOM" "${T[@]}" --exit-duration-in-mins -1
expect_error "negative bucket" "--ddp-bucket-size -5: give a number of parameters, at least 1 (0: --ddp-bucket-size-mb's size)" "$LOOM" "${T[@]}" --ddp-bucket-size -5
expect_error "overlapped parameter gather" "--overlap-param-gather overlaps the distributed optimizer's gather: it needs --use-distributed-optimizer" "$LOOM" "${T[@]}" --overlap-param-gather
expect_error "recompute" "--recompute-granularity full: activation recomputation is limited to the MLP's activation" "$LOOM" "${T[@]}" --recompute-granularity full
expect_error "recompute modules" "--recompute-modules: activation recomputation is limited" "$LOOM" "${T[@]}" --recompute-modules mlp
expect_error "tensorboard folder" "--tensorboard-dir /proc/loom-tb: cannot create directory /proc/loom-tb" "$LOOM" "${T[@]}" --tensorboard-dir /proc/loom-tb
expect_error "kv channels" "--kv-channels must be positive, or 0 for --hidden-size / --num-attention-heads (got -4)" "$LOOM" "${T[@]}" --kv-channels -4
expect_error "odd head size with rope" "--position-embedding-type rope needs an even head size (got 7, --kv-channels)" "$LOOM" "${T[@]}" --kv-channels 7 --position-embedding-type rope
expect_error "head size on cuda" "head size 320 (--kv-channels): the CUDA attention kernels take head sizes up to 256" "$LOOM" "${T[@]}" --kv-channels 320 --device cuda
expect_error "head size for cuDNN" "--attention-backend fused: cuDNN's attention takes head sizes that are multiples of 8 up to 128, not 12 (--kv-channels)" "$LOOM" "${T[@]}" --kv-channels 12 --attention-backend fused
expect_error "decoupled lr" "--decoupled-lr must be >= 0 (got -0.5)" "$LOOM" "${T[@]}" --decoupled-lr -0.5
expect_error "bf16 gradient reduction" "--grad-reduce-in-bf16: gradients are reduced in fp32" "$LOOM" "${T[@]}" --grad-reduce-in-bf16
expect_error "extra ids" "--vocab-extra-ids adds T5's sentinel ids: it goes with --model t5" "$LOOM" "${T[@]}" --vocab-extra-ids 100
expect_error "encoder seq length" "--encoder-seq-length 32 contradicts --seq-length 16" "$LOOM" "${T[@]}" --encoder-seq-length 32
expect_error "energy" "--log-energy: energy use is not measured" "$LOOM" "${T[@]}" --log-energy
expect_error "full validation" "--full-validation: validation takes --eval-iters batches each time" "$LOOM" "${T[@]}" --full-validation
expect_error "optimizer instances" "--num-distributed-optimizer-instances 2: only 1" "$LOOM" "${T[@]}" --num-distributed-optimizer-instances 2
expect_error "rope scaling factor alone" "--rope-scaling-factor 4 needs --use-rope-scaling" "$LOOM" "${T[@]}" --position-embedding-type rope --rope-scaling-factor 4
expect_error "rope scaling factor" "--rope-scaling-factor must be positive (got -2)" "$LOOM" "${T[@]}" --position-embedding-type rope --use-rope-scaling --rope-scaling-factor -2
expect_error "rope scaling without rope" "--use-rope-scaling needs --position-embedding-type rope" "$LOOM" "${T[@]}" --use-rope-scaling
expect_error "rope interpolation" "--rotary-seq-len-interpolation-factor must be positive (got -1)" "$LOOM" "${T[@]}" --position-embedding-type rope --rotary-seq-len-interpolation-factor -1
expect_error "rope interpolation without rope" "--rotary-seq-len-interpolation-factor needs --position-embedding-type rope" "$LOOM" "${T[@]}" --rotary-seq-len-interpolation-factor 2
expect_error "weight hash interval" "--check-weight-hash-across-dp-replicas-interval must be >= 0 (got -2)" "$LOOM" "${T[@]}" --check-weight-hash-across-dp-replicas-interval -2
expect_error "retain interval" "--save-retain-interval must be >= 0 (got -1)" "$LOOM" "${T[@]}" --save-retain-interval -1
expect_error "tensorboard interval" "--tensorboard-log-interval must be >= 1 (got 0)" "$LOOM" "${T[@]}" --tensorboard-log-interval 0
expect_error "context parallel" "--context-parallel-size 2: context parallelism is not implemented" "$LOOM" "${T[@]}" --context-parallel-size 2
expect_error "partial rotary, odd" "--rotary-percent 0.1 rotates 0 of each head's 8 values: that must be an even count of at least 2" "$LOOM" "${T[@]}" --position-embedding-type rope --rotary-percent 0.1
expect_error "partial rotary, range" "--rotary-percent must be in (0, 1] (got 1.5)" "$LOOM" "${T[@]}" --position-embedding-type rope --rotary-percent 1.5
expect_error "partial rotary without rope" "--rotary-percent 0.5 needs --position-embedding-type rope" "$LOOM" "${T[@]}" --rotary-percent 0.5
expect_error "old and new rope flags" "--use-rotary-position-embeddings contradicts --position-embedding-type learned_absolute" "$LOOM" "${T[@]}" --use-rotary-position-embeddings --position-embedding-type learned_absolute
expect_error "null tokenizer" "--tokenizer-type NullTokenizer takes --vocab-size" "$LOOM" train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --train-iters 1 --tokenizer-type NullTokenizer
expect_error "rampup with iters" "--rampup-batch-size needs --train-samples" "$LOOM" "${T[@]}" --rampup-batch-size 4 4 100
expect_error "rampup two values" "--rampup-batch-size takes three integers, START INCREMENT SAMPLES (got '4 4')" "$LOOM" "${S[@]}" --train-samples 64 --rampup-batch-size 4 4
expect_error "rampup not integers" "--rampup-batch-size takes three integers" "$LOOM" "${S[@]}" --train-samples 64 --rampup-batch-size 4 4 1e3
expect_error "rampup zero increment" "--rampup-batch-size 2 0 8: START, INCREMENT and SAMPLES must be positive" "$LOOM" "${S[@]}" --train-samples 64 --rampup-batch-size 2 0 8
expect_error "rampup past the batch" "--rampup-batch-size 6 2 8: the ramp must reach --global-batch-size 4" "$LOOM" "${S[@]}" --train-samples 64 --rampup-batch-size 6 2 8
expect_error "rampup off the batch" "--rampup-batch-size 1 2 8: the ramp must reach --global-batch-size 4" "$LOOM" "${S[@]}" --train-samples 64 --rampup-batch-size 1 2 8
expect_error "rampup off the micro-batch" "--rampup-batch-size 1 1 8: its global batch 1 is not a multiple of --micro-batch-size 2" "$LOOM" "${S[@]}" --train-samples 64 --micro-batch-size 2 --rampup-batch-size 1 1 8
expect_error "samples within the ramp" "--train-samples 20 ends inside the batch-size ramp-up (--rampup-batch-size 2 2 40 takes 44 samples" "$LOOM" "${S[@]}" --train-samples 20 --micro-batch-size 2 --rampup-batch-size 2 2 40
expect_error "data path twice" "--data-path (one dataset split by --split) and --train-data-path exclude each other" "$LOOM" train --num-layers 2 --train-iters 1 --data-path x --train-data-path y
expect_error "valid path alone" "--valid-data-path needs --train-data-path" "$LOOM" train --num-layers 2 --train-iters 1 --mock-data --valid-data-path y
expect_error "test path alone" "--test-data-path needs --train-data-path" "$LOOM" train --num-layers 2 --train-iters 1 --mock-data --test-data-path y
expect_error "test path and data path" "--data-path (one dataset split by --split) and --test-data-path exclude each other" "$LOOM" train --num-layers 2 --train-iters 1 --data-path x --test-data-path y
mkdir -p "$tmp/badgelu/iter_0000001" && echo 1 > "$tmp/badgelu/latest_checkpointed_iteration.txt"
"$LOOM" "${T[@]}" --save "$tmp/gck" > /dev/null 2>&1
sed 's/"gelu": "tanh"/"gelu": "cubic"/' "$tmp/gck/iter_0000002/meta.json" > "$tmp/badgelu/iter_0000001/meta.json"
expect_error "bad gelu in meta.json" "\"gelu\" must be \"tanh\" or \"erf\"" "$LOOM" "${T[@]}" --load "$tmp/badgelu"
# the model family: --model names one loom knows; a checkpoint's "family" must be one too
expect_error "unknown model family" "--model: 'vit' is not one of gpt|bert|t5" "$LOOM" "${T[@]}" --model vit
sed 's/"family": "gpt"/"family": "vit"/' "$tmp/gck/iter_0000002/meta.json" > "$tmp/badgelu/iter_0000001/meta.json"
expect_error "unknown family in meta.json" "\"family\" \"vit\" is not a model family loom knows (gpt|bert|t5)" "$LOOM" "${T[@]}" --load "$tmp/badgelu"
# BERT's settings and data flags: learned positions and LayerNorm only, its data flags with it
# alone, GPT's end-of-document flags not with it, its dataset read with a WordPiece tokenizer
expect_error "bert with rope" "--position-embedding-type rope: BERT models take learned absolute positions only" \
  "$LOOM" "${T[@]}" --model bert --position-embedding-type rope
expect_error "bert with RMSNorm" "--normalization RMSNorm: BERT models take LayerNorm only" \
  "$LOOM" "${T[@]}" --model bert --normalization RMSNorm
expect_error "--mask-prob with gpt" "--mask-prob shapes BERT's and T5's samples: it goes with --model bert or t5" \
  "$LOOM" "${T[@]}" --mask-prob 0.2
expect_error "--mask-prob out of range" "--mask-prob must be in [0, 1] (got 1.5)" \
  "$LOOM" "${T[@]}" --model bert --mask-prob 1.5
expect_error "bert with --eod-mask-loss" "--eod-mask-loss: --model bert's samples have no end-of-document token" \
  "$LOOM" "${T[@]}" --model bert --eod-mask-loss
expect_error "bert data without WordPiece" "--model bert with --data-path needs the WordPiece tokenizer" \
  "$LOOM" train --model bert --data-path x --train-iters 2
expect_error "bert data blend" "--model bert reads one sentence-split dataset (PREFIX), not a blend" \
  "$LOOM" train --model bert --data-path "0.5 a 0.5 b" --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$LOOM_SRC/data/bert/vocab.txt" --train-iters 2
expect_error "bert mock vocabulary" "--mock-data for BERT needs --vocab-size of at least 5" \
  "$LOOM" samples --model bert --mock-data --vocab-size 3 --seq-length 16 --train-iters 1
# the training state's counts and the schedule's values are >= 0: a negative one is refused
for bad in 's/"consumed_samples": [0-9]*/"consumed_samples": -8/' 's/"iteration": [0-9]*/"iteration": 1.5/' \
    's/"consumed_valid_samples": [0-9]*/"consumed_valid_samples": -1/' 's/"max_lr": [0-9.e-]*/"max_lr": -1/' \
    's/"decay_samples": [0-9]*/"decay_samples": -8/'; do
  sed "$bad" "$tmp/gck/iter_0000002/meta.json" > "$tmp/badgelu/iter_0000001/meta.json"
  key=$(echo "$bad" | sed 's/^s\/"\([a-z_]*\)".*/\1/')
  what="\"$key\" must be an integer >= 0"
  case $key in max_lr | decay_samples) what="\"lr_schedule\" \"$key\" must be >= 0" ;; esac
  cmp -s "$tmp/gck/iter_0000002/meta.json" "$tmp/badgelu/iter_0000001/meta.json" &&
    { echo "FAIL meta.json edit $bad changed nothing"; exit 1; }
  expect_error "negative $key in meta.json" "$what" "$LOOM" "${T[@]}" --load "$tmp/badgelu" \
      --use-checkpoint-opt_param-scheduler
done
expect_error "both schedule sources" "--override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler exclude each other" "$LOOM" "${T[@]}" --override-opt_param-scheduler --use-checkpoint-opt_param-scheduler
expect_error "wd ends without a style" "--start-weight-decay needs --weight-decay-incr-style linear or cosine" "$LOOM" "${T[@]}" --start-weight-decay 0.1
expect_error "wd style without ends" "--weight-decay-incr-style cosine needs --start-weight-decay and --end-weight-decay" "$LOOM" "${T[@]}" --weight-decay-incr-style cosine --end-weight-decay 0.1
expect_error "missing checkpoint" "$tmp/nothing" "$LOOM" "${T[@]}" --load "$tmp/nothing"
expect_error "missing data file" "$tmp/missing" "$LOOM" train --data-path "$tmp/missing" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 50 --train-iters 1
expect_error "device" "--device" "$LOOM" "${T[@]}" --device tpu
# a checkpoint, then flags that contradict it
"$LOOM" "${T[@]}" --save "$tmp/ck" > /dev/null 2>&1
expect_error "contradicting checkpoint" "--hidden-size 64 contradicts the checkpoint" "$LOOM" train --mock-data --train-iters 4 --load "$tmp/ck" --hidden-size 64
expect_error "contradicting norm" "--normalization RMSNorm contradicts" "$LOOM" train --mock-data --train-iters 4 --load "$tmp/ck" --normalization RMSNorm
expect_error "contradicting query-key norms" "--qk-layernorm contradicts the checkpoint $tmp/ck, which was trained without it" "$LOOM" train --mock-data --train-iters 4 --load "$tmp/ck" --qk-layernorm
expect_error "contradicting head size" "--kv-channels 16 contradicts the checkpoint $tmp/ck (8); leave it out" "$LOOM" train --mock-data --train-iters 4 --load "$tmp/ck" --kv-channels 16
# and one that agrees loads fine (--kv-channels 8: the checkpoint's hidden / heads)
if "$LOOM" train --mock-data --train-iters 4 --lr-decay-iters 2 --eval-iters 0 --load "$tmp/ck" --hidden-size 32 --kv-channels 8 > /dev/null 2>&1; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: resuming with agreeing flags"; fi
# a checkpoint whose meta.json has no kv_channels (as before it was recorded): hidden / heads
cp -r "$tmp/ck" "$tmp/ck-old"
for m in "$tmp"/ck-old/iter_*/meta.json; do grep -v '"kv_channels"' "$m" > "$m.new" && mv "$m.new" "$m"; done
if grep -q kv_channels "$tmp"/ck/iter_0000002/meta.json && ! grep -q kv_channels "$tmp"/ck-old/iter_0000002/meta.json; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: kv_channels not in meta.json, or not removed"; fi
expect_error "contradicting head size, older meta" "--kv-channels 12 contradicts the checkpoint $tmp/ck-old (8)" "$LOOM" train --mock-data --train-iters 4 --load "$tmp/ck-old" --kv-channels 12
# and one from before meta.json recorded the model family ("format": "loom-gpt" alone) loads as
# gpt, as does one that names it: with --model gpt, and without (the checkpoint's family)
for m in "$tmp"/ck-old/iter_*/meta.json; do grep -v '"family"' "$m" > "$m.new" && mv "$m.new" "$m"; done
if grep -q '"family": "gpt"' "$tmp"/ck/iter_0000002/meta.json && ! grep -q '"family"' "$tmp"/ck-old/iter_0000002/meta.json &&
   "$LOOM" train --mock-data --train-iters 4 --lr-decay-iters 2 --eval-iters 0 --load "$tmp/ck-old" > /dev/null 2>&1 &&
   "$LOOM" train --mock-data --train-iters 4 --lr-decay-iters 2 --eval-iters 0 --load "$tmp/ck" --model gpt > /dev/null 2>&1; then
  pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: resuming a checkpoint without \"family\", or with --model gpt"; fi
# a checkpoint of another head size (12 on hidden 32 with 4 heads): resuming with a contradicting
# --kv-channels, and a GPT-2-style model's export to Hugging Face (GPT-2 has no head_dim)
"$LOOM" "${T[@]}" --kv-channels 12 --save "$tmp/hdck" > /dev/null 2>&1
expect_error "contradicting head size 12" "--kv-channels 8 contradicts the checkpoint $tmp/hdck (12)" "$LOOM" train --mock-data --train-iters 4 --load "$tmp/hdck" --kv-channels 8
expect_error "GPT-2 export of another head size" "head size 12 (--kv-channels): Hugging Face's GPT-2 has no head_dim, its heads are hidden / heads = 32 / 4 wide" "$LOOM" convert --loader loom --saver hf --load-dir "$tmp/hdck" --save-dir "$tmp/hdhf"
[ ! -e "$tmp/hdhf/model.safetensors" ] || { fail=$((fail + 1)); echo "FAIL: a refused export left a file"; }
# a longer run whose decay follows --train-iters is another schedule (Megatron-LM's rule)
expect_error "longer schedule" "decay over 4 samples here (--lr-decay-iters x global batch, by default --train-iters), 2 there" "$LOOM" train --mock-data --train-iters 4 --eval-iters 0 --load "$tmp/ck"
# convert
expect_error "convert pair" "--loader and --saver are both" "$LOOM" convert --loader hf --saver hf --load-dir a --save-dir b
expect_error "convert missing" "config.json" "$LOOM" convert --loader hf --saver loom --load-dir "$tmp/none" --save-dir "$tmp/out"
mkdir -p "$tmp/bad" && echo '{"model_type": "bert"}' > "$tmp/bad/config.json"
expect_error "convert type" "model_type \"bert\"" "$LOOM" convert --loader hf --saver loom --load-dir "$tmp/bad" --save-dir "$tmp/out"
echo '{"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2, "vocab_size": 10}' > "$tmp/bad/config.json"
printf 'junk' > "$tmp/bad/model.safetensors"
expect_error "convert weights" "model.safetensors" "$LOOM" convert --loader hf --saver loom --load-dir "$tmp/bad" --save-dir "$tmp/out"
[ ! -e "$tmp/out/model.safetensors" ] || { fail=$((fail + 1)); echo "FAIL: a failed convert left a file"; }
# query-key norms go to Hugging Face only as Qwen3 (RMSNorm, SwiGLU, rope, no biases)
"$LOOM" "${T[@]}" --qk-layernorm --save "$tmp/qkck" > /dev/null 2>&1
expect_error "convert GPT-2 with query-key norms" "query-key norms (--qk-layernorm) export only as Qwen3, which needs RMSNorm, SwiGLU, rope and no biases (this model: LayerNorm, GELU, no rope, biases)" "$LOOM" convert --loader loom --saver hf --load-dir "$tmp/qkck" --save-dir "$tmp/qkhf"
"$LOOM" "${T[@]}" --qk-layernorm --normalization RMSNorm --swiglu --position-embedding-type rope --save "$tmp/qkck2" > /dev/null 2>&1
expect_error "convert RMSNorm query-key norms with biases" "(this model: biases)" "$LOOM" convert --loader loom --saver hf --load-dir "$tmp/qkck2" --save-dir "$tmp/qkhf"
[ ! -e "$tmp/qkhf/model.safetensors" ] || { fail=$((fail + 1)); echo "FAIL: a refused export left a file"; }
qwen='"model_type": "qwen3", "num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 10'
echo "{$qwen, \"head_dim\": 16, \"use_sliding_window\": true}" > "$tmp/bad/config.json"
expect_error "convert qwen3 sliding window" "use_sliding_window is not supported" "$LOOM" convert --loader hf --saver loom --load-dir "$tmp/bad" --save-dir "$tmp/out"
# a qkv bias alone (--add-qkv-bias) goes to Hugging Face only as Qwen2 (no query-key norms)
"$LOOM" "${T[@]}" --disable-bias-linear --add-qkv-bias --save "$tmp/qbck" > /dev/null 2>&1
expect_error "convert GPT-2-style qkv bias alone" "a qkv bias alone (--add-qkv-bias) exports only as Qwen2" "$LOOM" convert --loader loom --saver hf --load-dir "$tmp/qbck" --save-dir "$tmp/qbhf"
[ ! -e "$tmp/qbhf/model.safetensors" ] || { fail=$((fail + 1)); echo "FAIL: a refused export left a file"; }
expect_error "qkv bias against the checkpoint" "--add-qkv-bias contradicts the checkpoint $tmp/ck, which was trained without it" "$LOOM" train --mock-data --train-iters 4 --load "$tmp/ck" --add-qkv-bias
# Llama 3.1's rope scaling is taken; other kinds and partial rotary are not Hugging Face's Llama
llama='"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 10'
echo "{$llama, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}" > "$tmp/bad/config.json"
expect_error "rope scaling kind" "rope_scaling of rope_type \"yarn\" is not supported (llama3 or linear)" "$LOOM" convert --loader hf --saver loom --load-dir "$tmp/bad" --save-dir "$tmp/out"
echo "{$llama, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1}}" > "$tmp/bad/config.json"
expect_error "rope scaling fields" "rope_scaling \"high_freq_factor\" missing or not a number" "$LOOM" convert --loader hf --saver loom --load-dir "$tmp/bad" --save-dir "$tmp/out"
echo "{$llama, \"partial_rotary_factor\": 0.5}" > "$tmp/bad/config.json"
expect_error "partial rotary import" "partial_rotary_factor 0.5: llama rotates whole heads (1 only)" "$LOOM" convert --loader hf --saver loom --load-dir "$tmp/bad" --save-dir "$tmp/out"
"$LOOM" "${T[@]}" --normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights --rotary-percent 0.5 --save "$tmp/rpck" > /dev/null 2>&1
expect_error "partial rotary export" "its Llama rotates whole heads (--rotary-percent 0.5)" "$LOOM" convert --loader loom --saver hf --load-dir "$tmp/rpck" --save-dir "$tmp/rphf"
[ ! -e "$tmp/rphf/model.safetensors" ] || { fail=$((fail + 1)); echo "FAIL: a refused export left a file"; }
"$LOOM" "${T[@]}" --normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights --use-rope-scaling --rotary-seq-len-interpolation-factor 2 --save "$tmp/rsck" > /dev/null 2>&1
expect_error "two rope scalings export" "its rope_scaling is one kind, Llama 3.1's (--use-rope-scaling) or linear (--rotary-seq-len-interpolation-factor), not both" "$LOOM" convert --loader loom --saver hf --load-dir "$tmp/rsck" --save-dir "$tmp/rphf"
echo '{"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2, "head_dim": 3, "vocab_size": 10}' > "$tmp/bad/config.json"
expect_error "GPT-2 import of another head size" "head_dim 3: GPT-2's heads are n_embd / n_head wide (8 / 2)" "$LOOM" convert --loader hf --saver loom --load-dir "$tmp/bad" --save-dir "$tmp/out"
echo '{"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 2, "head_dim": -2, "intermediate_size": 16, "vocab_size": 10}' > "$tmp/bad/config.json"
expect_error "Llama head_dim" "head_dim must be positive (got -2)" "$LOOM" convert --loader hf --saver loom --load-dir "$tmp/bad" --save-dir "$tmp/out"
# generate
expect_error "generate no load" "--load" "$LOOM" generate --vocab-file x
expect_error "generate top-p" "--top-p" "$LOOM" generate --load "$tmp/ck" --vocab-file x --top-p 2
# Output folders that cannot be made fail before training (not at the first save); a model or a
# batch larger than the memory the system has is refused when its buffers are made, naming what
# to lower (the cpu backend keeps its blocks within MemAvailable instead of being killed later)
: > "$tmp/afile"
expect_error "--save under a file" "--save $tmp/afile/ckpt: cannot create directory" "$LOOM" "${T[@]}" --save "$tmp/afile/ckpt"
expect_error "--save-grads under a file" "--save-grads $tmp/afile/g: cannot create directory" "$LOOM" "${T[@]}" --save-grads "$tmp/afile/g"
if "$LOOM" "${T[@]}" --save "$tmp/afile/ckpt" 2> /dev/null | grep -q iteration; then
  fail=$((fail + 1)); echo "FAIL: --save under a file trained before failing"
else
  pass=$((pass + 1))
fi
expect_error "parameters beyond memory" "MiB of parameters and as much of gradients on cpu (the model's size" "$LOOM" "${T[@]}" --seq-length 2000000000
expect_error "activations beyond memory" "MiB of activations on cpu (lower --micro-batch-size)" "$LOOM" "${T[@]}" --micro-batch-size 1000000 --global-batch-size 1000000
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
