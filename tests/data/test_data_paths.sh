#!/usr/bin/env bash
# Datasets of their own per split (Megatron-LM's --train-data-path, --valid-data-path and
# --test-data-path): the training dataset is taken whole, so training on it is training on
# --data-path with --split 100,0,0, bit for bit; a --valid-data-path changes no training bit and
# its validation loss is that of its own data (not the training data's); without one there is no
# validation. A --test-data-path changes no training bit either, and its loss after training is
# that of the validation set of the same data evaluated from its start at the last iteration, bit
# for bit (the same weights and, one epoch of it in both, the same samples); --split's third part
# gives a test loss too, and none when it is empty.
source "$(dirname "$0")/../model/runs.sh"
bash "$SRC/scripts/fetch_data.sh" > /dev/null
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$SRC/data/gpt2/vocab.json" --merge-file "$SRC/data/gpt2/merges.txt")
head -n 4 "$SRC/data/shakespeare.jsonl" > "$tmp/a.jsonl"
tail -n 3 "$SRC/data/shakespeare.jsonl" > "$tmp/b.jsonl"
for p in a b; do
  "$LOOM" preprocess --input "$tmp/$p.jsonl" --output-prefix "$tmp/$p" "${TOK[@]}" --append-eod --workers 2 > /dev/null ||
    { echo "FAIL preprocess $p"; exit 1; }
done
A=$tmp/a_text_document B=$tmp/b_text_document
base=(train "${TOK[@]}" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 2 --global-batch-size 4 --train-iters 4 --lr 1e-3 --log-interval 1
      --eval-interval 2 --eval-iters 1 --seed 5)
ITERS=4
run split --data-path "$A" --split 100,0,0 --eval-iters 0
run own --train-data-path "$A" --eval-iters 0
same split own
run own-novalid --train-data-path "$A"
same split own-novalid
run own-valid-b --train-data-path "$A" --valid-data-path "$B"
same split own-valid-b
run own-valid-a --train-data-path "$A" --valid-data-path "$A"
vals() { grep -o '"val_loss": [^,}]*' "$tmp/$1.jsonl" | tr '\n' ' '; }
# one evaluation in the loop, at iteration 4: the first of the validation set, from its start
run own-test-b --train-data-path "$A" --valid-data-path "$B" --test-data-path "$B" --eval-interval 4
same split own-test-b
test_of() { grep -o '"test_loss": [^,}]*' "$tmp/$1.jsonl" | sed 's/.*: //'; }
last_val() { grep -o '"val_loss": [^,}]*' "$tmp/$1.jsonl" | tail -1 | sed 's/.*: //'; }
first_val() { grep -o '"val_loss": [^,}]*' "$tmp/$1.jsonl" | head -1 | sed 's/.*: //'; }
if [ -n "$(test_of own-test-b)" ] && [ "$(test_of own-test-b)" = "$(first_val own-test-b)" ] &&
   [ "$(last_val own-test-b)" != "$(first_val own-test-b)" ] && [ -z "$(test_of own-valid-b)" ]; then
  echo "ok   --test-data-path: its loss after training is B's validation loss from its start at iteration 4 ($(test_of own-test-b)); the validation after training, of the next batches, differs"
else
  echo "FAIL --test-data-path: test [$(test_of own-test-b)] validation [$(first_val own-test-b) then $(last_val own-test-b)] without [$(test_of own-valid-b)]"; fail=1
fi
run split3 --data-path "$A" --split 50,25,25
run split-notest --data-path "$A" --split 50,50,0
if [ -n "$(test_of split3)" ] && [ "$(test_of split3)" != "$(last_val split3)" ] && [ -z "$(test_of split-notest)" ]; then
  echo "ok   --split's third part: a test loss of its own ($(test_of split3)); none for an empty one"
else
  echo "FAIL --split's test part: [$(test_of split3)] [$(last_val split3)] empty [$(test_of split-notest)]"; fail=1
fi
if [ -z "$(vals own-novalid)" ] && [ -n "$(vals own-valid-b)" ] && [ -n "$(vals own-valid-a)" ] &&
   [ "$(vals own-valid-b)" != "$(vals own-valid-a)" ]; then
  echo "ok   validation only with --valid-data-path, on its own data: $(vals own-valid-b)"
else
  echo "FAIL validation: none [$(vals own-novalid)] b [$(vals own-valid-b)] a [$(vals own-valid-a)]"; fail=1
fi
exit $fail
