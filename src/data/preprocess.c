/* JSON lines -> Megatron indexed datasets (the library part of `loom preprocess`).
 *
 * As Megatron's tools/preprocess_data.py: each line is a JSON object;
 * for every --json-keys key its text is tokenized, the ids form one sequence, and the sequence
 * makes one document of PREFIX_{key}_document.bin/.idx. Also as Megatron: a value may be a list
 * of strings (pre-split sentences: one sequence each), empty texts give no sequence but still a
 * document entry, and --append-eod appends the end-of-document id to the last sequence of each
 * non-empty document. dtype: u16 when the vocabulary is below 65500, else i32.
 * With --split-sentences each text is cut into sentences by loom_split_sentences (loom's own
 * deterministic rule, sentence_split.c, where Megatron runs NLTK's punkt), each sentence is one
 * sequence, the line's sentences make its document, and the outputs are named
 * PREFIX_{key}_sentence.bin/.idx, as Megatron names them.
 *
 * Parallelism: the main thread reads a batch of lines; the workers (OpenMP threads) parse and
 * tokenize the lines of the batch in any order, each into its own slot; the main thread then
 * appends the slots in line order. Output bytes therefore do not depend on the worker count,
 * and the first bad line in file order is the one reported.
 */
#include "loom/data.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/log.h"

#define BATCH_LINES 2048
#define BATCH_BYTES ((size_t)16 << 20)

/* One key's output for one line: the ids of all its sequences and the sequence lengths. */
struct key_out {
    int32_t *ids;
    size_t n, cap;
    int64_t *lens;
    size_t nlens, cap_lens;
};

struct slot {
    size_t off, len;  /* the line within the batch buffer */
    int64_t lineno;
    int blank;
    enum loom_status status;
    char *error;      /* malloc'd message when status != LOOM_OK */
    struct key_out *keys;
};

/* Offset of the first byte that is not part of well-formed UTF-8, or len if none. Rejects
 * overlong forms, surrogates and code points above U+10FFFF. */
static size_t utf8_bad_offset(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) n = 1;
        else if (c == 0xE0) n = 2, lo = 0xA0;
        else if (c == 0xED) n = 2, hi = 0x9F;
        else if (c >= 0xE1 && c <= 0xEF) n = 2;
        else if (c == 0xF0) n = 3, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3) n = 3;
        else if (c == 0xF4) n = 3, hi = 0x8F;
        else return i;
        if (i + n >= len) return i; /* cut short */
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k <= n; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
        i += n + 1;
    }
    return len;
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

static const char *json_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* Record a failure of slot `sl`: "INPUT: line N: <message>". */
static void slot_fail(struct slot *sl, const char *input, enum loom_status s, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));
static void slot_fail(struct slot *sl, const char *input, enum loom_status s, const char *fmt,
                      ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(input) + strlen(msg) + 48;
    sl->error = malloc(n);
    if (sl->error) snprintf(sl->error, n, "%s: line %lld: %s", input, (long long)sl->lineno, msg);
    sl->status = s;
}

static int push_len(struct key_out *ko, int64_t len) {
    if (ko->nlens == ko->cap_lens) {
        size_t cap = ko->cap_lens ? 2 * ko->cap_lens : 4;
        int64_t *p = realloc(ko->lens, cap * sizeof *p);
        if (!p) return 0;
        ko->lens = p;
        ko->cap_lens = cap;
    }
    ko->lens[ko->nlens++] = len;
    return 1;
}

/* Tokenize text[0, len) into `ko` as a new sequence (nothing when it gives no ids). */
static enum loom_status encode_text(const struct loom_preprocess_config *cfg, struct key_out *ko,
                                    const char *text, size_t len) {
    size_t before = ko->n;
    LOOM_CHECK(cfg->encode(cfg->encode_ctx, text, len, &ko->ids, &ko->n, &ko->cap));
    if (ko->n > before && !push_len(ko, (int64_t)(ko->n - before)))
        return loom_fail(LOOM_ERR_OOM, "out of memory");
    return LOOM_OK;
}

/* One JSON string: one sequence, or with --split-sentences one per sentence (`sent` is the
 * calling worker's scratch). */
static enum loom_status encode_sentence(const struct loom_preprocess_config *cfg,
                                        struct key_out *ko, const json_t *str,
                                        struct loom_sentences *sent) {
    if (!cfg->split_sentences)
        return encode_text(cfg, ko, json_string_value(str), json_string_length(str));
    LOOM_CHECK(loom_split_sentences(json_string_value(str), json_string_length(str),
                                    cfg->keep_newlines, sent));
    for (size_t i = 0; i < sent->n; i++) {
        size_t b = i ? sent->end[i - 1] : 0;
        LOOM_CHECK(encode_text(cfg, ko, sent->text + b, sent->end[i] - b));
    }
    return LOOM_OK;
}

static void process_line(const struct loom_preprocess_config *cfg, const char *buf,
                         struct slot *sl, struct loom_sentences *sent) {
    const char *line = buf + sl->off;
    sl->status = LOOM_OK;
    for (int k = 0; k < cfg->num_keys; k++) {
        sl->keys[k].n = 0;
        sl->keys[k].nlens = 0;
    }
    if (sl->blank) return;
    size_t bad = utf8_bad_offset((const unsigned char *)line, sl->len);
    if (bad != sl->len) {
        slot_fail(sl, cfg->input, LOOM_ERR_FORMAT, "invalid UTF-8 (byte 0x%02X at column %zu)",
                  (unsigned)(unsigned char)line[bad], bad + 1);
        return;
    }
    json_error_t jerr;
    json_t *obj = json_loadb(line, sl->len, JSON_ALLOW_NUL, &jerr);
    if (!obj) {
        slot_fail(sl, cfg->input, LOOM_ERR_FORMAT, "malformed JSON: %s (column %d)", jerr.text,
                  jerr.column);
        return;
    }
    if (!json_is_object(obj)) {
        slot_fail(sl, cfg->input, LOOM_ERR_FORMAT, "expected a JSON object, got %s",
                  json_type_name(obj));
        json_decref(obj);
        return;
    }
    for (int k = 0; k < cfg->num_keys && sl->status == LOOM_OK; k++) {
        const char *key = cfg->json_keys[k];
        struct key_out *ko = &sl->keys[k];
        json_t *v = json_object_get(obj, key);
        enum loom_status s = LOOM_OK;
        if (!v) {
            slot_fail(sl, cfg->input, LOOM_ERR_FORMAT, "missing key '%s'", key);
            break;
        }
        if (json_is_string(v)) {
            s = encode_sentence(cfg, ko, v, sent);
        } else if (json_is_array(v)) {
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) {
                if (!json_is_string(e)) {
                    slot_fail(sl, cfg->input, LOOM_ERR_FORMAT, "key '%s': item %zu of the list is "
                              "%s, expected a string", key, i, json_type_name(e));
                    break;
                }
                if ((s = encode_sentence(cfg, ko, e, sent)) != LOOM_OK) break;
            }
            if (sl->status != LOOM_OK) break;
        } else {
            slot_fail(sl, cfg->input, LOOM_ERR_FORMAT, "key '%s' is %s, expected a string (or a "
                      "list of strings)", key, json_type_name(v));
            break;
        }
        if (s != LOOM_OK) {
            slot_fail(sl, cfg->input, s, "key '%s': %s", key, loom_last_error());
            break;
        }
        if (cfg->append_eod && ko->n > 0) {
            int32_t eod = cfg->eod;
            size_t n1 = ko->n;
            if (ko->n == ko->cap) {
                size_t cap = ko->cap ? 2 * ko->cap : 16;
                int32_t *p = realloc(ko->ids, cap * sizeof *p);
                if (!p) {
                    slot_fail(sl, cfg->input, LOOM_ERR_OOM, "out of memory");
                    break;
                }
                ko->ids = p;
                ko->cap = cap;
            }
            ko->ids[n1] = eod;
            ko->n = n1 + 1;
            ko->lens[ko->nlens - 1]++;
        }
    }
    json_decref(obj);
}

static void slots_free(struct slot *slots, int nkeys) {
    if (!slots) return;
    for (int i = 0; i < BATCH_LINES; i++) {
        free(slots[i].error);
        if (slots[i].keys)
            for (int k = 0; k < nkeys; k++) {
                free(slots[i].keys[k].ids);
                free(slots[i].keys[k].lens);
            }
        free(slots[i].keys);
    }
    free(slots);
}

/* Megatron's output name: PREFIX_{key}_document, or PREFIX_{key}_sentence when split. */
static char *output_name(const char *prefix, const char *key, int split_sentences) {
    size_t n = strlen(prefix) + strlen(key) + 16;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s_%s_%s", prefix, key, split_sentences ? "sentence" : "document");
    return s;
}

enum loom_status loom_preprocess_jsonl(const struct loom_preprocess_config *cfg,
                                       struct loom_preprocess_stats *stats) {
    struct loom_preprocess_stats st = {0};
    if (cfg->num_keys < 1)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--json-keys: at least one key is needed");
    for (int k = 0; k < cfg->num_keys; k++) {
        if (!cfg->json_keys[k][0])
            return loom_fail(LOOM_ERR_INVALID_ARG, "--json-keys: empty key");
        for (int j = 0; j < k; j++)
            if (strcmp(cfg->json_keys[j], cfg->json_keys[k]) == 0)
                return loom_fail(LOOM_ERR_INVALID_ARG, "--json-keys: '%s' given twice",
                                 cfg->json_keys[k]);
    }
    if (cfg->workers < 1)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--workers: %d; must be at least 1", cfg->workers);
    if (cfg->append_eod && cfg->eod < 0)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--append-eod: the tokenizer has no "
                         "end-of-document token");
    FILE *in = fopen(cfg->input, "rb");
    if (!in)
        return loom_fail(LOOM_ERR_IO, "--input %s: cannot open: %s", cfg->input, strerror(errno));

    enum loom_status s = LOOM_OK;
    enum loom_idx_dtype dtype = loom_idx_dtype_for_vocab(cfg->vocab_size);
    struct loom_indexed_builder **builders = calloc((size_t)cfg->num_keys, sizeof *builders);
    struct slot *slots = calloc(BATCH_LINES, sizeof *slots);
    char *buf = NULL, *line = NULL;
    size_t buf_cap = 0, line_cap = 0;
    if (!builders || !slots) {
        s = loom_fail(LOOM_ERR_OOM, "out of memory");
        goto done;
    }
    for (int i = 0; i < BATCH_LINES; i++)
        if (!(slots[i].keys = calloc((size_t)cfg->num_keys, sizeof *slots[i].keys))) {
            s = loom_fail(LOOM_ERR_OOM, "out of memory");
            goto done;
        }
    for (int k = 0; k < cfg->num_keys; k++) {
        char *name = output_name(cfg->output_prefix, cfg->json_keys[k], cfg->split_sentences);
        if (!name) {
            s = loom_fail(LOOM_ERR_OOM, "out of memory");
            goto done;
        }
        s = loom_indexed_builder_init(&builders[k], name, dtype);
        free(name);
        if (s != LOOM_OK) goto done;
    }
    json_object_seed(0); /* before any thread parses */

    double t0 = loom_time_s();
    int64_t lineno = 0, next_log = cfg->log_interval;
    int eof = 0;
    while (!eof) {
        /* read a batch */
        size_t used = 0;
        int n = 0;
        while (n < BATCH_LINES && used < BATCH_BYTES) {
            errno = 0;
            ssize_t got = getline(&line, &line_cap, in);
            if (got < 0) {
                if (ferror(in)) {
                    s = loom_fail(LOOM_ERR_IO, "--input %s: read failed after line %lld: %s",
                                  cfg->input, (long long)lineno, strerror(errno));
                    goto done;
                }
                eof = 1;
                break;
            }
            lineno++;
            st.bytes += got;
            size_t len = (size_t)got;
            if (len && line[len - 1] == '\n') len--;
            if (used + len + 1 > buf_cap) {
                size_t cap = buf_cap ? buf_cap : 1 << 20;
                while (cap < used + len + 1) cap *= 2;
                char *p = realloc(buf, cap);
                if (!p) {
                    s = loom_fail(LOOM_ERR_OOM, "out of memory reading line %lld", (long long)lineno);
                    goto done;
                }
                buf = p;
                buf_cap = cap;
            }
            memcpy(buf + used, line, len);
            buf[used + len] = 0;
            struct slot *sl = &slots[n++];
            sl->off = used;
            sl->len = len;
            sl->lineno = lineno;
            sl->blank = is_blank(line, len);
            used += len + 1;
        }
        if (n == 0) break;

        /* tokenize in parallel */
        if (cfg->workers == 1) {
            struct loom_sentences sent = {0};
            for (int i = 0; i < n; i++) process_line(cfg, buf, &slots[i], &sent);
            loom_sentences_free(&sent);
        } else {
#pragma omp parallel num_threads(cfg->workers)
            {
                struct loom_sentences sent = {0};
#pragma omp for schedule(dynamic, 1)
                for (int i = 0; i < n; i++) process_line(cfg, buf, &slots[i], &sent);
                loom_sentences_free(&sent);
            }
        }

        /* append in input order */
        for (int i = 0; i < n; i++) {
            struct slot *sl = &slots[i];
            if (sl->status != LOOM_OK) {
                s = loom_fail(sl->status, "%s", sl->error ? sl->error : "out of memory");
                goto done;
            }
            if (sl->blank) continue;
            for (int k = 0; k < cfg->num_keys; k++) {
                struct key_out *ko = &sl->keys[k];
                size_t at = 0;
                for (size_t q = 0; q < ko->nlens; q++) {
                    s = loom_indexed_builder_add_sequence(builders[k], ko->ids + at, ko->lens[q]);
                    if (s != LOOM_OK) {
                        s = loom_fail(s, "%s: line %lld: %s", cfg->input,
                                      (long long)sl->lineno, loom_last_error());
                        goto done;
                    }
                    at += (size_t)ko->lens[q];
                }
                if ((s = loom_indexed_builder_end_document(builders[k])) != LOOM_OK) goto done;
                st.tokens += (int64_t)ko->n;
            }
            st.documents++;
            if (cfg->log_interval > 0 && st.documents >= next_log) {
                double dt = loom_time_s() - t0;
                loom_log_info("processed %lld documents (%.0f docs/s, %.2f MB/s)",
                              (long long)st.documents, (double)st.documents / (dt > 0 ? dt : 1),
                              (double)st.bytes / 1e6 / (dt > 0 ? dt : 1));
                next_log += cfg->log_interval;
            }
        }
        for (int i = 0; i < n; i++) {
            free(slots[i].error);
            slots[i].error = NULL;
        }
    }

    /* make every output durable before publishing any */
    for (int k = 0; k < cfg->num_keys; k++)
        if ((s = loom_indexed_builder_flush(builders[k])) != LOOM_OK) goto done;
    for (int k = 0; k < cfg->num_keys; k++)
        if ((s = loom_indexed_builder_finish(builders[k])) != LOOM_OK) goto done;
    st.seconds = loom_time_s() - t0;

done:
    if (builders)
        for (int k = 0; k < cfg->num_keys; k++) loom_indexed_builder_free(builders[k]);
    free(builders);
    slots_free(slots, cfg->num_keys);
    free(buf);
    free(line);
    fclose(in);
    if (stats) *stats = st;
    return s;
}
