# Sourced first by the tests that compare training runs (test_exit, test_kept_activations,
# test_megatron_flags, test_logging, test_batch_rampup, test_lr_schedule, test_data_paths): sets
# the strict mode, LOOM (the CLI), PY (Debian's python3 with torch), SRC (the source tree), a
# folder `tmp` removed at exit and `fail`=0; the functions below then expect an array `base` of
# train arguments; ITERS is the iterations each run logs (default 4).
set -uo pipefail
LOOM=${LOOM:-build/loom}
PY=${PYTHON:-python3}
SRC=${LOOM_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
#   run NAME ARGS...   train base + ARGS; NAME.log, NAME.jsonl and NAME.txt (loss and gradient
#                      norm of each iteration) in $tmp; a failure sets fail=1
#   same A B           A's and B's losses and gradient norms identical, ITERS of them
run() {
  local name=$1
  shift
  if ! OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$LOOM" "${base[@]}" "$@" --metrics-file "$tmp/$name.jsonl" > "$tmp/$name.log" 2>&1; then
    echo "FAIL $name: loom exited non-zero"; tail -3 "$tmp/$name.log"; fail=1; return
  fi
  losses_of "$name"
}
losses_of() { # NAME.txt from NAME.jsonl's iterations (not the test loss after training)
  grep '"loss": ' "$tmp/$1.jsonl" | sed -E 's/.*"loss": ([^,]*), "grad_norm": ([^,]*),.*/\1 \2/' > "$tmp/$1.txt"
}
same() {
  if [ "$(wc -l < "$tmp/$1.txt" 2>/dev/null)" = "${ITERS:-4}" ] && cmp -s "$tmp/$1.txt" "$tmp/$2.txt"; then
    echo "ok   $2 trains as $1"
  else
    echo "FAIL $2 differs from $1"; paste "$tmp/$1.txt" "$tmp/$2.txt" 2>/dev/null; fail=1
  fi
}
