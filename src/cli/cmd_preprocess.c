/* loom preprocess: JSON lines -> Megatron indexed datasets, with the flags of Megatron-LM's
 * tools/preprocess_data.py. Outputs PREFIX_{key}_document.bin/.idx for each --json-keys key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "loom/args.h"
#include "loom/data.h"
#include "loom/log.h"
#include "loom/tokenizer.h"

static enum loom_status encode_with_tokenizer(const void *ctx, const char *text, size_t len,
                                              int32_t **ids, size_t *n, size_t *cap) {
    return loom_tokenizer_encode(ctx, text, len, ids, n, cap);
}

static int fail(void) {
    loom_print_error();
    return 1;
}

/* Split the space-joined --json-keys value into words (modifies `s`). */
static int split_words(char *s, const char **out, int max) {
    int n = 0;
    for (char *tok = strtok(s, " \t"); tok && n < max; tok = strtok(NULL, " \t")) out[n++] = tok;
    return n;
}

int loom_cmd_preprocess(int argc, char **argv) {
    const char *input = NULL, *json_keys = "text", *output_prefix = NULL, *tokenizer_type = NULL;
    const char *vocab_file = NULL, *merge_file = NULL, *dataset_impl = "mmap";
    const char *tokenizer_model = NULL, *tiktoken_pattern = NULL;
    int64_t vocab_size = 0, tiktoken_specials = 1000;
    int append_eod = 0, split_sentences = 0, keep_newlines = 0;
    int64_t workers = 1, log_interval = 1000;
    struct loom_flag flags[] = {
        {"--input", LOOM_FLAG_STR, &input, "JSON lines file to read (required)", NULL, 0},
        {"--json-keys", LOOM_FLAG_LIST, &json_keys,
         "keys to extract, space-separated; one output dataset per key", NULL, 0},
        {"--output-prefix", LOOM_FLAG_STR, &output_prefix,
         "outputs PREFIX_{key}_document.bin/.idx (required)", NULL, 0},
        {"--tokenizer-type", LOOM_FLAG_CHOICE, &tokenizer_type, "tokenizer (required)",
         LOOM_TOKENIZER_CHOICES, 0},
        {"--vocab-file", LOOM_FLAG_STR, &vocab_file,
         "vocabulary: vocab.json (GPT-2) or vocab.txt (BERT)", NULL, 0},
        {"--merge-file", LOOM_FLAG_STR, &merge_file, "BPE merges.txt (GPT-2 only)", NULL, 0},
        {"--tokenizer-model", LOOM_FLAG_STR, &tokenizer_model,
         "HuggingFaceTokenizer: tokenizer.json or its folder; SentencePiece types: "
         "tokenizer.model; TikTokenizer: the rank file", NULL, 0},
        {"--tiktoken-pattern", LOOM_FLAG_STR, &tiktoken_pattern,
         "TikTokenizer's split pattern: v1, v2 (Megatron-LM's), cl100k, o200k", NULL, 0},
        {"--tiktoken-num-special-tokens", LOOM_FLAG_INT, &tiktoken_specials,
         "TikTokenizer: special tokens before the ranks", NULL, 0},
        {"--vocab-size", LOOM_FLAG_INT, &vocab_size,
         "NullTokenizer: ids before the end-of-document one; TikTokenizer: total ids kept", NULL, 0},
        {"--append-eod", LOOM_FLAG_BOOL, &append_eod,
         "append the end-of-document token to every non-empty document", NULL, 0},
        {"--workers", LOOM_FLAG_INT, &workers,
         "threads tokenizing in parallel (output identical for any count)", NULL, 0},
        {"--log-interval", LOOM_FLAG_INT, &log_interval,
         "print progress every N documents (0: quiet)", NULL, 0},
        {"--dataset-impl", LOOM_FLAG_CHOICE, &dataset_impl,
         "output format (older Megatron flag; only mmap exists)", "mmap", 0},
        {"--split-sentences", LOOM_FLAG_BOOL, &split_sentences,
         "one sequence per sentence (loom's rule: ends at . ! ? then whitespace, not after "
         "listed abbreviations or initials, and at blank lines); outputs "
         "PREFIX_{key}_sentence.bin/.idx, the document index counting sentences", NULL, 0},
        {"--keep-newlines", LOOM_FLAG_BOOL, &keep_newlines,
         "with --split-sentences: keep line breaks inside and right after each sentence "
         "(otherwise a run of whitespace with a line break becomes one space)", NULL, 0},
    };
    const int nflags = (int)(sizeof flags / sizeof flags[0]);
    int help = 0;
    if (loom_flags_parse(flags, nflags, argc, argv, 2, &help) != LOOM_OK) return fail();
    if (help) {
        loom_flags_print_help(
            "usage: loom preprocess --input FILE.jsonl --output-prefix PREFIX --tokenizer-type "
            "TYPE (--vocab-file FILE [--merge-file FILE] | --tokenizer-model FILE) [--json-keys text ...] [--append-eod] "
            "[--workers N] [--split-sentences [--keep-newlines]]\n\nTokenizes JSON lines into "
            "Megatron indexed datasets PREFIX_{key}_document.bin/.idx (one document per line; "
            "PREFIX_{key}_sentence.bin/.idx with --split-sentences).",
            flags, nflags);
        return 0;
    }
    if (!input) {
        loom_fail(LOOM_ERR_INVALID_ARG, "--input: required (a JSON lines file)");
        return fail();
    }
    if (!output_prefix) {
        loom_fail(LOOM_ERR_INVALID_ARG, "--output-prefix: required");
        return fail();
    }
    if (!tokenizer_type) {
        loom_fail(LOOM_ERR_INVALID_ARG, "--tokenizer-type: required; one of %s", LOOM_TOKENIZER_TYPES);
        return fail();
    }
    int gpt2 = strcmp(tokenizer_type, "GPT2BPETokenizer") == 0;
    if (keep_newlines && !split_sentences) /* Megatron takes it silently there too */
        loom_log_info("loom: note: flags with no effect: --keep-newlines (without "
                      "--split-sentences each text is kept whole, newlines included)");
    if (workers < 1 || workers > 1024) {
        loom_fail(LOOM_ERR_INVALID_ARG, "--workers: %lld; must be between 1 and 1024",
                  (long long)workers);
        return fail();
    }
    if (log_interval < 0) {
        loom_fail(LOOM_ERR_INVALID_ARG, "--log-interval: %lld; must be >= 0",
                  (long long)log_interval);
        return fail();
    }

    char *keys_buf = strdup(json_keys);
    const char **keys = calloc(strlen(json_keys) / 2 + 2, sizeof *keys);
    if (!keys_buf || !keys) {
        free(keys_buf);
        free(keys);
        loom_fail(LOOM_ERR_OOM, "out of memory");
        return fail();
    }
    int nkeys = split_words(keys_buf, keys, (int)(strlen(json_keys) / 2 + 2));

    struct loom_tokenizer *tok = NULL;
    int rc = 0;
    struct loom_tokenizer_spec spec = {
        .type = tokenizer_type, .vocab_file = vocab_file, .merge_file = gpt2 ? merge_file : NULL,
        .tokenizer_model = tokenizer_model, .vocab_size = vocab_size,
        .tiktoken_pattern = tiktoken_pattern, .tiktoken_num_special_tokens = tiktoken_specials};
    if (loom_tokenizer_open(&tok, &spec) != LOOM_OK) {
        rc = fail();
        goto out;
    }
    struct loom_preprocess_config cfg = {
        .input = input,
        .json_keys = keys,
        .num_keys = nkeys,
        .output_prefix = output_prefix,
        .encode = encode_with_tokenizer,
        .encode_ctx = tok,
        .vocab_size = loom_tokenizer_vocab_size(tok),
        .eod = loom_tokenizer_eod(tok),
        .append_eod = append_eod,
        .split_sentences = split_sentences,
        .keep_newlines = keep_newlines,
        .workers = (int)workers,
        .log_interval = log_interval,
    };
    struct loom_preprocess_stats st;
    if (loom_preprocess_jsonl(&cfg, &st) != LOOM_OK) {
        rc = fail();
        goto out;
    }
    enum loom_idx_dtype dt = loom_idx_dtype_for_vocab(cfg.vocab_size);
    for (int k = 0; k < nkeys; k++)
        loom_log_info("wrote %s_%s_%s.bin/.idx (dtype %s)", output_prefix, keys[k],
                      split_sentences ? "sentence" : "document", loom_idx_dtype_name(dt));
    loom_log_info("%lld documents, %lld tokens, %.1f MB of input in %.2f s with %d worker%s",
                  (long long)st.documents, (long long)st.tokens, (double)st.bytes / 1e6,
                  st.seconds, (int)workers, workers == 1 ? "" : "s");
out:
    loom_tokenizer_free(tok);
    free(keys_buf);
    free(keys);
    return rc;
}
