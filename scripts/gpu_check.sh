#!/usr/bin/env bash
# The GPU acceptance check, for a machine with one or more NVIDIA GPUs (the device tool's
# nvidia-h200-x2: `bash scripts/gpu_check.sh`, with .deps/root in the call's carry when the
# machine lacks the jansson/PCRE2 headers: see scripts/device_deps.sh).
#
#   bash scripts/gpu_check.sh [PHASE...]      phases, in order (default: build single multi, or
#                                             build single staged with fewer than two GPUs)
#     build    configure (CUDA, MPI, NCCL) and build everything
#     single   on one GPU: CTest label "cuda" (op parity, bf16 products, train cuda vs cpu);
#              GPT-2 124M and a Llama-style model training end to end, fp32 and --bf16;
#              --fp16 loss scaling; --deterministic-mode twice, the same bits; the nccl
#              backend with one rank (comm_device_check, and training the same bits)
#     multi    on two GPUs: comm_device_check nccl under mpirun (every collective and p2p of
#              the nccl backend on device buffers); TP=2, PP=2 (1F1B and interleaved) and
#              DP=2 of a small GPT, a small Llama-style model and that model with documents
#              packed into samples (--reset-position-ids, --reset-attention-mask) and
#              --apply-layernorm-1p against one GPU, 10 iterations:
#              loss, grad norm and every parameter within 1e-5 relative (tests/ref/compare_runs.py);
#              TP=2, PP=2 and DP=2 of a GPT in --bf16 against one GPU within 2e-2; DP=2 with
#              --use-distributed-optimizer the same losses as without, and
#              --overlap-param-gather the same bits as without it
#     staged   comm_device_check mpi-staged with 2 ranks sharing GPU 0, then the layouts of
#              multi with --comm mpi (device buffers through host memory, no NCCL): the 2 ranks
#              may share one GPU, so the layouts' GPU code runs on one GPU
#              (GPU_CHECK_MODELS="gpt", "llama", "llamadocs" or "llamaqk" runs one model's fp32
#              part)
# NVLink multicast (NVLS) stays off in every NCCL run. Logs go to $OUT when set (the device
# tool's output folder), else to build-gpu/logs. Exit status: the number of failed checks.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${GPU_CHECK_BUILD:-build-gpu}
LOGS=${OUT:-$ROOT/$BUILD/logs}
mkdir -p "$LOGS"
# default: multi with two GPUs or more, else staged (its layouts with the ranks sharing one GPU)
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${NGPU:-0}" -ge 2 ]; then DEFAULT_PHASES="build single multi"; else DEFAULT_PHASES="build single staged"; fi
PHASES=${*:-$DEFAULT_PHASES}
JOBS=$(nproc 2>/dev/null || echo 4)
PY=${PYTHON:-python3}
export PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
# Open MPI on one host: shared memory without the ptrace-based single copy, no binding
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none
LOOM=$ROOT/$BUILD/loom
fail=0 pass=0
section() { printf '\n== %s ==\n' "$*"; }
result() { # result STATUS LABEL
  if [ "$1" -eq 0 ]; then pass=$((pass + 1)); echo "ok   $2"; else fail=$((fail + 1)); echo "FAIL $2"; fi
}
mpin() { # mpin N ARGS...: N ranks, at most 300 s, so that a hang cannot eat the whole check
  local n=$1
  shift
  timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" -x NCCL_NVLS_ENABLE \
    -x OMP_NUM_THREADS -x PATH -x LD_LIBRARY_PATH "$@"
}
mpi2() { mpin 2 "$@"; }
# comm_check BACKEND N [mpirun flags...]: comm_device_check BACKEND with N ranks, its failures
# shown; the status is the program's (77: the backend is not built in)
comm_check() {
  local backend=$1 n=$2 log="$LOGS/comm_device_check-$1-$2.log"
  shift 2
  mpin "$n" "$@" "$BUILD/tests/comm_device_check" "$backend" > "$log" 2>&1
  local r=$?
  if [ $r -eq 77 ]; then echo "skipped: $(tail -1 "$log")"; return 77; fi
  grep -vE "^ok " "$log" | head -30
  grep -cE "^ok " "$log" | sed 's/^/ok lines: /'
  return $r
}

# TP=2, PP=2 (1F1B and interleaved) and DP=2 of a small GPT and a small Llama-style model under
# mpirun -np 2 against one GPU, fp32 to 1e-5, and of a GPT in bf16 to 2e-2. Arguments: extra
# train flags for the 2-rank runs (--comm mpi: the device buffers through host memory).
layouts() {
  local comm=("$@") via=""
  [ $# -gt 0 ] && via="with $*"
  section "parallel layouts, 2 ranks against 1 GPU (10 iterations, 1e-5)${via:+ $via}"
  common=(--mock-data --num-layers 8 --seq-length 64 --vocab-size 97 --make-vocab-size-divisible-by 32
          --micro-batch-size 2 --global-batch-size 16 --train-iters 10 --lr 3e-3 --min-lr 3e-4
          --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0
          --hidden-dropout 0.1 --attention-dropout 0.1 --log-interval 1 --eval-iters 0 --seed 11
          --device cuda)
  gpt=(--hidden-size 64 --num-attention-heads 4)
  llama=(--hidden-size 64 --num-attention-heads 8 --group-query-attention --num-query-groups 4
         --ffn-hidden-size 96 --normalization RMSNorm --swiglu --position-embedding-type rope
         --disable-bias-linear --untie-embeddings-and-output-weights)
  # the Llama-style model with documents packed into samples and zero-centred norm weights
  # (NullTokenizer's 96 ids and end-of-document one: 97, padded to 128 in every layout, as above)
  llamadocs=("${llama[@]}" --tokenizer-type NullTokenizer --vocab-size 96 --reset-position-ids
             --reset-attention-mask --apply-layernorm-1p)
  # and with query-key norms on heads of 16 columns (--qk-layernorm, --kv-channels 16 on hidden 64)
  llamaqk=("${llama[@]}" --qk-layernorm --kv-channels 16)
  tmp="$LOGS/layouts${1:+-staged}"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  for model in ${GPU_CHECK_MODELS:-gpt llama llamadocs llamaqk}; do
    declare -n margs=$model
    ref="$tmp/$model-ref"
    if ! CUDA_VISIBLE_DEVICES=0 "$LOOM" train "${common[@]}" "${margs[@]}" --save "$ref" \
        --metrics-file "$ref.jsonl" > "$ref.log" 2>&1; then
      tail -5 "$ref.log"; result 1 "$model on 1 GPU"; continue
    fi
    for l in "2 1" "1 2" "1 1" "1 2 vpp"; do
      set -- $l
      tp=$1 pp=$2 extra=()
      [ "${3:-}" = vpp ] && extra=(--num-layers-per-virtual-pipeline-stage 2)
      label="$model TP=$tp PP=$pp DP=$((2 / (tp * pp))) ${3:-}"
      out="$tmp/$model-$tp-$pp${3:-}"
      if ! mpi2 "$LOOM" train "${common[@]}" "${margs[@]}" "${comm[@]}" --tensor-model-parallel-size "$tp" \
          --pipeline-model-parallel-size "$pp" "${extra[@]}" --save "$out" --metrics-file "$out.jsonl" \
          > "$out.log" 2>&1; then
        tail -6 "$out.log"; result 1 "$label: the run failed"; continue
      fi
      "$PY" tests/ref/compare_runs.py "$ref.jsonl" "$ref" "$out.jsonl" "$out" 1e-5 "$label" | sed 's/^/  /'
      result "${PIPESTATUS[0]}" "$label"
    done
  done

  section "bf16 layouts, 2 ranks against 1 GPU (10 iterations, 2e-2)${via:+ $via}"
  # head size 64 and no dropout, so that the tensor-core attention runs too; the layouts split
  # the products differently, so they agree to bf16 rounding, not bit for bit
  bf=(--mock-data --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 256
      --vocab-size 1000 --micro-batch-size 2 --global-batch-size 16 --train-iters 10 --lr 1e-3
      --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0 --hidden-dropout 0 --attention-dropout 0
      --log-interval 1 --eval-iters 0 --seed 5 --device cuda --bf16)
  ref="$tmp/bf16-ref"
  if CUDA_VISIBLE_DEVICES=0 "$LOOM" train "${bf[@]}" --save "$ref" --metrics-file "$ref.jsonl" \
      > "$ref.log" 2>&1; then
    for l in "2 1" "1 2" "1 1"; do
      set -- $l
      label="bf16 TP=$1 PP=$2 DP=$((2 / ($1 * $2)))"
      out="$tmp/bf16-$1-$2"
      if ! mpi2 "$LOOM" train "${bf[@]}" "${comm[@]}" --tensor-model-parallel-size "$1" \
          --pipeline-model-parallel-size "$2" --save "$out" --metrics-file "$out.jsonl" > "$out.log" 2>&1; then
        tail -6 "$out.log"; result 1 "$label: the run failed"; continue
      fi
      "$PY" tests/ref/compare_runs.py "$ref.jsonl" "$ref" "$out.jsonl" "$out" 2e-2 "$label" | sed 's/^/  /'
      result "${PIPESTATUS[0]}" "$label"
    done
    # the distributed optimizer: DP=2 with it trains as without, the same losses bit for bit
    # (--deterministic-mode: the same product algorithms in both runs), with less device memory
    for d in whole dist overlap; do
      flag=()
      [ $d = dist ] && flag=(--use-distributed-optimizer)
      [ $d = overlap ] && flag=(--use-distributed-optimizer --overlap-param-gather)
      mpi2 "$LOOM" train "${bf[@]}" "${comm[@]}" --deterministic-mode "${flag[@]}" \
        --metrics-file "$tmp/bf16-dp2-$d.jsonl" > "$tmp/bf16-dp2-$d.log" 2>&1 || tail -6 "$tmp/bf16-dp2-$d.log"
    done
    "$PY" - "$tmp/bf16-dp2-whole.jsonl" "$tmp/bf16-dp2-dist.jsonl" <<'EOF2'
import json, sys
a, b = ([r for r in map(json.loads, open(f)) if "loss" in r] for f in sys.argv[1:])
# the losses bit for bit; the grad norms to 1e-13 (the distributed one adds the ranks' sums of
# squares over their pieces of the buckets: another order of the same additions)
same = len(a) == len(b) == 10 and all(x["loss"] == y["loss"] and
                                      abs(x["grad_norm"] - y["grad_norm"]) <= 1e-13 * x["grad_norm"]
                                      for x, y in zip(a, b))
print(f"  peak device memory per rank {a[-1].get('peak_mem_bytes', 0) / 2**20:.1f} MiB whole, "
      f"{b[-1].get('peak_mem_bytes', 0) / 2**20:.1f} MiB distributed; same bits: {same}")
sys.exit(0 if same else 1)
EOF2
    result $? "bf16 DP=2 --use-distributed-optimizer: the same losses and gradient norms"
    "$PY" - "$tmp/bf16-dp2-dist.jsonl" "$tmp/bf16-dp2-overlap.jsonl" <<'EOF2'
import json, sys
a, b = ([r for r in map(json.loads, open(f)) if "loss" in r] for f in sys.argv[1:])
same = len(a) == len(b) == 10 and all((x["loss"], x["grad_norm"]) == (y["loss"], y["grad_norm"]) for x, y in zip(a, b))
print(f"  --overlap-param-gather: the distributed run's bits: {same}")
sys.exit(0 if same else 1)
EOF2
    result $? "bf16 DP=2 --overlap-param-gather: the distributed run's losses and gradient norms"
  else
    tail -5 "$ref.log"; result 1 "bf16 on 1 GPU"
  fi
}

for phase in $PHASES; do
case $phase in
build)
  section environment
  {
    uname -srm
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1
    nvcc --version 2>&1 | tail -1
    command -v mpirun && mpirun --version 2>&1 | head -1
    ls /usr/include/nccl.h /usr/local/cuda/include/nccl.h 2>/dev/null
  } 2>&1 | tee "$LOGS/env.log"
  source "$ROOT/scripts/device_env.sh"
  section build
  t0=$(date +%s)
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  if ! cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON -DLOOM_MPI=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 > "$LOGS/build.log" 2>&1; then
    tail -30 "$LOGS/build.log"; echo "gpu_check: configure failed"; exit 100
  fi
  grep -E "loom: (NCCL|no NCCL)" "$LOGS/build.log"
  if ! cmake --build "$BUILD" -j"$JOBS" >> "$LOGS/build.log" 2>&1; then
    grep -E "error" "$LOGS/build.log" | head -30; echo "gpu_check: build failed"; exit 100
  fi
  grep -E "warning" "$LOGS/build.log" | head -10
  echo "built in $(( $(date +%s) - t0 )) s"
  ;;

single)
  export CUDA_VISIBLE_DEVICES=${SINGLE_GPU:-0}
  section "ctest -L cuda (GPU $CUDA_VISIBLE_DEVICES)"
  t0=$(date +%s)
  LOOM_REQUIRE_CUDA=1 PYTHON=$(command -v "$PY") ctest --test-dir "$BUILD" -L cuda -V --timeout 400 \
    > "$LOGS/ctest.log" 2>&1
  r=$?
  grep -E "^[0-9]+: (ok |FAIL|[0-9]+ passed|skipped)" "$LOGS/ctest.log" | sed 's/^[0-9]*: //' | grep -vE "^ok " | head -40
  grep -cE "^[0-9]+: ok " "$LOGS/ctest.log" | sed 's/^/ok lines: /'
  grep -E "tests passed|tests failed|\(Failed\)|\(Skipped\)" "$LOGS/ctest.log"
  result $r "ctest -L cuda in $(( $(date +%s) - t0 )) s"

  section "end to end on one GPU"
  # no dropout: --bf16 then also takes the tensor-core attention
  e2e=(--mock-data --seq-length 1024 --vocab-size 50257 --micro-batch-size 16 --train-iters 5
       --log-interval 1 --eval-iters 0 --lr 3e-4 --lr-warmup-iters 1 --hidden-dropout 0
       --attention-dropout 0)
  gpt2=(--num-layers 12 --hidden-size 768 --num-attention-heads 12)
  llama=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --group-query-attention
         --num-query-groups 4 --ffn-hidden-size 2048 --normalization RMSNorm --swiglu
         --position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights)
  for model in gpt2 llama; do
    declare -n margs=$model
    for prec in fp32 bf16; do
      extra=()
      [ $prec = bf16 ] && extra=(--bf16)
      log="$LOGS/e2e-$model-$prec.log"
      "$LOOM" train "${e2e[@]}" "${margs[@]}" --device cuda "${extra[@]}" --metrics-file "$log.jsonl" > "$log" 2>&1
      r=$?
      grep -E "iteration +5/|peak device|warning|error" "$log" | cut -c1-330
      if [ $r -eq 0 ] && grep -q "allocated after the first iteration" "$log"; then r=1; fi
      result $r "$model $prec: 5 iterations at B=16 T=1024"
    done
    "$PY" - "$LOGS/e2e-$model-fp32.log.jsonl" "$LOGS/e2e-$model-bf16.log.jsonl" <<'EOF'
import json, sys
a = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
b = [r for r in map(json.loads, open(sys.argv[2])) if "loss" in r]
d = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
ok = len(a) == len(b) == 5 and d < 1e-2
print(f"{'ok  ' if ok else 'FAIL'} bf16 against fp32 loss: worst relative difference {d:.2e} over {len(b)} iterations (tolerance 1e-2)")
sys.exit(0 if ok else 1)
EOF
    result $? "$model bf16 loss follows fp32"
  done
  # --fp16 with dynamic loss scaling from Megatron's default 2^32: the first iterations overflow
  # the fp16 operands, are skipped and halve the scale; then the loss must go down
  log="$LOGS/e2e-gpt2-fp16.log"
  "$LOOM" train "${e2e[@]}" "${gpt2[@]}" --train-iters 16 --device cuda --fp16 \
    --metrics-file "$log.jsonl" > "$log" 2>&1
  r=$?
  grep -E "iteration +16/|skipped iterations|warning|error" "$log" | tail -3 | cut -c1-200
  if [ $r -eq 0 ]; then
    "$PY" - "$log.jsonl" <<'EOF'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
skipped = sum(r["skipped_iterations"] for r in rows)
first, last = rows[0], rows[-1]
ok = len(rows) == 16 and 0 < skipped < 16 and last["loss_scale"] < first["loss_scale"] <= 2.0**32 \
    and last["loss"] < first["loss"]
print(f"{'ok  ' if ok else 'FAIL'} fp16: {skipped} of {len(rows)} iterations skipped, loss scale "
      f"{first['loss_scale']:.4g} -> {last['loss_scale']:.4g}, loss {first['loss']:.4f} -> {last['loss']:.4f}")
sys.exit(0 if ok else 1)
EOF
    r=$?
  fi
  result $r "gpt2 fp16: dynamic loss scaling skips overflowing steps, then trains"
  # --deterministic-mode: two runs of the program give the same losses and gradient norms, bit
  # for bit (without it the products' algorithms are timed and cuDNN's attention backward adds
  # with atomics, so two runs may differ in the last bits)
  # (the third run keeps every layer's MLP activation instead of remaking it: the same bits too)
  r=0
  for run in 1 2 3; do
    kept=()
    [ $run = 3 ] && kept=(--kept-activation-layers 12)
    "$LOOM" train "${e2e[@]}" "${gpt2[@]}" --device cuda --bf16 --deterministic-mode "${kept[@]}" \
      --metrics-file "$LOGS/e2e-det$run.jsonl" > "$LOGS/e2e-det$run.log" 2>&1 || r=1
  done
  same_runs() {
    "$PY" -c 'import json,sys
a, b = ([(j["loss"], j["grad_norm"]) for j in map(json.loads, open(f)) if "loss" in j] for f in sys.argv[1:])
print(0 if len(a) == 5 and a == b else 1)' "$@"
  }
  [ $r -eq 0 ] && r=$(same_runs "$LOGS/e2e-det1.jsonl" "$LOGS/e2e-det2.jsonl")
  result $r "gpt2 bf16 --deterministic-mode: two runs, the same losses and gradient norms"
  r=$(same_runs "$LOGS/e2e-det1.jsonl" "$LOGS/e2e-det3.jsonl")
  result $r "gpt2 bf16 --kept-activation-layers 12: the same losses and gradient norms"
  # the nccl backend with one rank (NCCL refuses two ranks on one GPU): its set-up through MPI,
  # every collective on a one-rank communicator, and training through it, the same bits as the
  # run without mpirun
  section "the nccl backend with one rank"
  comm_check nccl 1
  r=$?
  if [ $r -ne 77 ]; then
    result $r "comm_device_check nccl (1 rank)"
    mpin 1 "$LOOM" train "${e2e[@]}" "${gpt2[@]}" --device cuda --bf16 --deterministic-mode \
      --comm nccl --metrics-file "$LOGS/e2e-nccl1.jsonl" > "$LOGS/e2e-nccl1.log" 2>&1
    r=$?
    grep -E "iteration +5/|comm|error" "$LOGS/e2e-nccl1.log" | head -5 | cut -c1-200
    [ $r -eq 0 ] && r=$(same_runs "$LOGS/e2e-det1.jsonl" "$LOGS/e2e-nccl1.jsonl")
    result $r "gpt2 bf16 through --comm nccl with one rank: the same losses and gradient norms"
  fi
  unset CUDA_VISIBLE_DEVICES
  ;;

multi)
  section "comm_device_check nccl (2 ranks)"
  comm_check nccl 2
  result $? "comm_device_check nccl"

  layouts
  ;;
staged)
  section "comm_device_check mpi-staged (2 ranks sharing GPU 0)"
  CUDA_VISIBLE_DEVICES=0 comm_check mpi-staged 2 -x CUDA_VISIBLE_DEVICES
  result $? "comm_device_check mpi-staged"

  layouts --comm mpi
  ;;
*)
  echo "gpu_check: unknown phase '$phase'; valid: build single multi staged"; exit 100 ;;
esac
done
section summary
echo "gpu_check: $pass passed, $fail failed"
exit $fail
