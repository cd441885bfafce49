/* Indexed dataset reader and writer.
 *
 * Without arguments: self-tests (round trip of every integer dtype, temporaries, every kind of
 * corruption gives its one-line message, random damage never crashes).
 * With arguments it is a tool for test_indexed_interop.sh:
 *   test_indexed dump PREFIX                 canonical JSON {"dtype":"u16","docs":[[[..]]]}
 *   test_indexed write PREFIX DTYPE DOCS.json
 *   test_indexed open PREFIX                 "ok" (exit 0) or "loom: error: ..." (exit 1)
 */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "expect.h"
#include "loom/data.h"

/* ---------------------------------------------------------------------------------------- */
/* tool modes                                                                               */

static int tool_dump(const char *prefix) {
    struct loom_indexed *ds;
    if (loom_indexed_open(&ds, prefix) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    printf("{\"dtype\":\"%s\",\"docs\":[", loom_idx_dtype_name(loom_indexed_dtype(ds)));
    int32_t *buf = NULL;
    for (int64_t k = 0; k < loom_indexed_num_documents(ds); k++) {
        printf(k ? ",[" : "[");
        int64_t a = loom_indexed_doc_index(ds, k), b = loom_indexed_doc_index(ds, k + 1);
        for (int64_t i = a; i < b; i++) {
            int64_t n = loom_indexed_sequence_length(ds, i);
            buf = realloc(buf, (size_t)(n + 1) * sizeof *buf);
            if (loom_indexed_read(ds, i, 0, n, buf) != LOOM_OK) {
                loom_print_error();
                return 1;
            }
            printf(i > a ? ",[" : "[");
            for (int64_t t = 0; t < n; t++) printf(t ? ",%d" : "%d", buf[t]);
            printf("]");
        }
        printf("]");
    }
    printf("]}\n");
    free(buf);
    loom_indexed_free(ds);
    return 0;
}

static int tool_write(const char *prefix, const char *dtype, const char *json_path) {
    int code = 0;
    for (int c = 1; c <= 8; c++)
        if (strcmp(loom_idx_dtype_name(c), dtype) == 0) code = c;
    json_error_t err;
    json_t *docs = json_load_file(json_path, 0, &err);
    if (!docs || !json_is_array(docs)) {
        fprintf(stderr, "%s: %s\n", json_path, err.text);
        return 1;
    }
    struct loom_indexed_builder *b;
    if (loom_indexed_builder_init(&b, prefix, (enum loom_idx_dtype)code) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    size_t i, j, t;
    json_t *doc, *seq, *tok;
    int32_t *buf = NULL;
    json_array_foreach(docs, i, doc) {
        json_array_foreach(doc, j, seq) {
            buf = realloc(buf, (json_array_size(seq) + 1) * sizeof *buf);
            json_array_foreach(seq, t, tok) buf[t] = (int32_t)json_integer_value(tok);
            if (loom_indexed_builder_add_sequence(b, buf, (int64_t)json_array_size(seq))) {
                loom_print_error();
                return 1;
            }
        }
        if (loom_indexed_builder_end_document(b) != LOOM_OK) {
            loom_print_error();
            return 1;
        }
    }
    if (loom_indexed_builder_finish(b) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    loom_indexed_builder_free(b);
    json_decref(docs);
    free(buf);
    return 0;
}

static int tool_open(const char *prefix) {
    struct loom_indexed *ds;
    if (loom_indexed_open(&ds, prefix) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    printf("ok\n");
    loom_indexed_free(ds);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* helpers                                                                                  */

static char g_dir[256];

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_dir, name); }

static int count_entries(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void clear_dir(void) {
    DIR *d = opendir(g_dir);
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
    closedir(d);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)sz + 1);
    *n = fread(buf, 1, (size_t)sz, f);
    fclose(f);
    return buf;
}

static void spit(const char *path, const unsigned char *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
}

/* A small dataset: 4 documents, the third empty, the second of two sequences, one sequence of
 * length 0. Token values chosen per dtype (signed dtypes get negatives). */
#define NSEQ 5
static const int64_t k_lens[NSEQ] = {3, 1, 0, 4, 2};
static const int64_t k_docs[] = {0, 1, 3, 3, 5}; /* D = 5 entries, 4 documents */

static int32_t token_value(int code, int64_t i, int64_t t) {
    int32_t v = (int32_t)(i * 7 + t * 3 + 1);
    switch (code) {
    case LOOM_IDX_DTYPE_I8: return (int32_t)((t & 1) ? -v : v);
    case LOOM_IDX_DTYPE_I16: return (t & 1) ? -v * 100 : v * 100;
    case LOOM_IDX_DTYPE_U16: return 65535 - v;
    case LOOM_IDX_DTYPE_I32: return (t & 1) ? -v * 100000 : v * 100000;
    case LOOM_IDX_DTYPE_I64: return (t & 1) ? INT32_MIN + v : INT32_MAX - v;
    default: return v;
    }
}

static int write_sample(const char *prefix, int code) {
    struct loom_indexed_builder *b;
    if (loom_indexed_builder_init(&b, prefix, (enum loom_idx_dtype)code) != LOOM_OK) return 1;
    int64_t seq = 0;
    for (int k = 0; k < 4; k++) {
        for (; seq < k_docs[k + 1]; seq++) {
            int32_t tok[8];
            for (int64_t t = 0; t < k_lens[seq]; t++) tok[t] = token_value(code, seq, t);
            if (loom_indexed_builder_add_sequence(b, tok, k_lens[seq]) != LOOM_OK) return 1;
        }
        if (loom_indexed_builder_end_document(b) != LOOM_OK) return 1;
    }
    enum loom_status s = loom_indexed_builder_finish(b);
    loom_indexed_builder_free(b);
    return s != LOOM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* self-tests                                                                               */

static void test_roundtrip(void) {
    const int codes[] = {LOOM_IDX_DTYPE_U8, LOOM_IDX_DTYPE_I8, LOOM_IDX_DTYPE_I16,
                         LOOM_IDX_DTYPE_U16, LOOM_IDX_DTYPE_I32, LOOM_IDX_DTYPE_I64};
    char prefix[512];
    path_of(prefix, sizeof prefix, "rt");
    for (size_t c = 0; c < sizeof codes / sizeof codes[0]; c++) {
        int code = codes[c];
        clear_dir();
        EXPECT(write_sample(prefix, code) == 0);
        EXPECT(count_entries() == 2); /* rt.bin, rt.idx and no temporaries */
        struct loom_indexed *ds = NULL;
        EXPECT(loom_indexed_open(&ds, prefix) == LOOM_OK);
        if (!ds) {
            fprintf(stderr, "  %s\n", loom_last_error());
            continue;
        }
        EXPECT((int)loom_indexed_dtype(ds) == code);
        EXPECT(loom_indexed_num_sequences(ds) == NSEQ);
        EXPECT(loom_indexed_num_documents(ds) == 4);
        EXPECT(loom_indexed_num_tokens(ds) == 10);
        EXPECT(!loom_indexed_has_modes(ds));
        for (int k = 0; k < 5; k++) EXPECT(loom_indexed_doc_index(ds, k) == k_docs[k]);
        for (int64_t i = 0; i < NSEQ; i++) {
            EXPECT(loom_indexed_sequence_length(ds, i) == k_lens[i]);
            int32_t out[8];
            EXPECT(loom_indexed_read(ds, i, 0, k_lens[i], out) == LOOM_OK);
            for (int64_t t = 0; t < k_lens[i]; t++) EXPECT(out[t] == token_value(code, i, t));
            const void *p;
            int64_t n;
            EXPECT(loom_indexed_get(ds, i, &p, &n) == LOOM_OK && n == k_lens[i]);
        }
        int32_t out[8];
        EXPECT(loom_indexed_read(ds, 3, 1, 2, out) == LOOM_OK && out[0] == token_value(code, 3, 1));
        EXPECT(loom_indexed_read(ds, 3, 3, 2, out) == LOOM_ERR_INVALID_ARG);
        EXPECT(loom_indexed_read(ds, NSEQ, 0, 0, out) == LOOM_ERR_INVALID_ARG);
        EXPECT(loom_indexed_read(ds, -1, 0, 0, out) == LOOM_ERR_INVALID_ARG);
        loom_indexed_free(ds);
    }
    EXPECT(loom_idx_dtype_for_vocab(50257) == LOOM_IDX_DTYPE_U16);
    EXPECT(loom_idx_dtype_for_vocab(65499) == LOOM_IDX_DTYPE_U16);
    EXPECT(loom_idx_dtype_for_vocab(65500) == LOOM_IDX_DTYPE_I32);
}

static void test_writer_edges(void) {
    char prefix[512];
    path_of(prefix, sizeof prefix, "w");
    clear_dir();
    /* token out of range for u16: rejected, nothing written for it */
    struct loom_indexed_builder *b;
    EXPECT(loom_indexed_builder_init(&b, prefix, LOOM_IDX_DTYPE_U16) == LOOM_OK);
    int32_t bad[2] = {1, 70000};
    EXPECT_FAIL(loom_indexed_builder_add_document(b, bad, 2), LOOM_ERR_INVALID_ARG, "70000");
    EXPECT(count_entries() == 2); /* two temporaries */
    loom_indexed_builder_free(b); /* abandoned: temporaries removed */
    EXPECT(count_entries() == 0);

    /* float dtypes are not writable */
    EXPECT(loom_indexed_builder_init(&b, prefix, LOOM_IDX_DTYPE_F32) == LOOM_ERR_INVALID_ARG);

    /* flush then free: still nothing published */
    EXPECT(loom_indexed_builder_init(&b, prefix, LOOM_IDX_DTYPE_I32) == LOOM_OK);
    int32_t ok[3] = {5, 6, 7};
    EXPECT(loom_indexed_builder_add_sequence(b, ok, 3) == LOOM_OK); /* document left open */
    EXPECT(loom_indexed_builder_flush(b) == LOOM_OK);
    EXPECT(loom_indexed_builder_add_sequence(b, ok, 3) != LOOM_OK);
    loom_indexed_builder_free(b);
    EXPECT(count_entries() == 0);

    /* an existing dataset is untouched by an abandoned rewrite, replaced by a finished one */
    EXPECT(write_sample(prefix, LOOM_IDX_DTYPE_U16) == 0);
    EXPECT(loom_indexed_builder_init(&b, prefix, LOOM_IDX_DTYPE_I32) == LOOM_OK);
    EXPECT(loom_indexed_builder_add_sequence(b, ok, 3) == LOOM_OK);
    loom_indexed_builder_free(b);
    struct loom_indexed *ds;
    EXPECT(loom_indexed_open(&ds, prefix) == LOOM_OK);
    EXPECT(loom_indexed_num_sequences(ds) == NSEQ);
    loom_indexed_free(ds);
    EXPECT(loom_indexed_builder_init(&b, prefix, LOOM_IDX_DTYPE_I32) == LOOM_OK);
    EXPECT(loom_indexed_builder_add_sequence(b, ok, 3) == LOOM_OK); /* closed by finish */
    EXPECT(loom_indexed_builder_finish(b) == LOOM_OK);
    loom_indexed_builder_free(b);
    EXPECT(count_entries() == 2);
    EXPECT(loom_indexed_open(&ds, prefix) == LOOM_OK);
    EXPECT(loom_indexed_num_sequences(ds) == 1 && loom_indexed_num_documents(ds) == 1);
    loom_indexed_free(ds);

    /* an empty dataset is valid */
    EXPECT(loom_indexed_builder_init(&b, prefix, LOOM_IDX_DTYPE_U16) == LOOM_OK);
    EXPECT(loom_indexed_builder_finish(b) == LOOM_OK);
    loom_indexed_builder_free(b);
    EXPECT(loom_indexed_open(&ds, prefix) == LOOM_OK);
    EXPECT(loom_indexed_num_sequences(ds) == 0 && loom_indexed_num_documents(ds) == 0);
    loom_indexed_free(ds);

    /* a missing directory is an I/O error naming the file */
    char nodir[512];
    path_of(nodir, sizeof nodir, "no/such/dir/x");
    EXPECT_FAIL(loom_indexed_builder_init(&b, nodir, LOOM_IDX_DTYPE_U16), LOOM_ERR_IO,
                "no/such/dir/x.bin");
}

/* Apply `mutate` to a fresh copy of the u16 sample and expect open to fail with `want` in the
 * message, which must also name the file. */
struct corruption {
    const char *what;
    int file;   /* 0 idx, 1 bin */
    long at;    /* byte to overwrite (-1: none) */
    int value;  /* new byte value */
    long size;  /* new size (-1: keep; negative below -1: shrink by -size-1) */
    const char *want;
    const char *names; /* substring of the path expected in the message */
};

static void put_u64(unsigned char *p, unsigned long long v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void test_corruptions(void) {
    char prefix[512], idx[520], bin[520];
    path_of(prefix, sizeof prefix, "c");
    snprintf(idx, sizeof idx, "%s.idx", prefix);
    snprintf(bin, sizeof bin, "%s.bin", prefix);
    /* u16 sample: S=5, D=5: idx = 34 + 60 + 40 = 134 bytes, bin = 20 bytes.
     * lengths at 34, offsets at 54, doc index at 94 */
    const struct corruption cases[] = {
        {"magic", 0, 0, 'X', -1, "bad magic", ".idx"},
        {"magic tail", 0, 8, 1, -1, "bad magic", ".idx"},
        {"version", 0, 9, 2, -1, "unsupported version 2", ".idx"},
        {"version high byte", 0, 16, 1, -1, "unsupported version", ".idx"},
        {"dtype 0", 0, 17, 0, -1, "bad dtype code 0", ".idx"},
        {"dtype 9", 0, 17, 9, -1, "bad dtype code 9", ".idx"},
        {"S larger", 0, 18, 6, -1, "truncated .idx", ".idx"},
        {"S huge", 0, 25, 0x40, -1, "truncated .idx", ".idx"},
        {"S smaller", 0, 18, 4, -1, "size mismatch", ".idx"},
        {"D larger", 0, 26, 6, -1, "truncated .idx", ".idx"},
        {"D huge", 0, 33, 0x7f, -1, "truncated .idx", ".idx"},
        {"D smaller", 0, 26, 4, -1, "size mismatch", ".idx"},
        {"header cut", 0, -1, 0, 20, "truncated .idx", ".idx"},
        {"empty idx", 0, -1, 0, 0, "truncated .idx", ".idx"},
        {"idx cut", 0, -1, 0, 130, "truncated .idx", ".idx"},
        {"idx extra", 0, -1, 0, 136, "size mismatch", ".idx"},
        {"length negative", 0, 37, 0x80, -1, "negative length", ".idx"},
        {"length changed", 0, 34, 4, -1, "offset of sequence 1", ".idx"},
        {"offset wrong", 0, 54 + 8 * 2, 9, -1, "offset of sequence 2", ".idx"},
        {"doc start", 0, 94, 1, -1, "document index starts at 1", ".idx"},
        {"doc decreasing", 0, 94 + 8 * 2, 0, -1, "document index decreases", ".idx"},
        {"doc beyond S", 0, 94 + 8 * 3, 7, -1, "beyond", ".idx"},
        {"doc end", 0, 94 + 8 * 4, 4, -1, "document index ends at 4", ".idx"},
        {"bin cut", 1, -1, 0, 19, "truncated .bin", ".bin"},
        {"bin empty", 1, -1, 0, 0, "truncated .bin", ".bin"},
        {"bin extra", 1, -1, 0, 22, "size mismatch", ".bin"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const struct corruption *k = &cases[c];
        clear_dir();
        EXPECT(write_sample(prefix, LOOM_IDX_DTYPE_U16) == 0);
        const char *path = k->file ? bin : idx;
        size_t n = 0;
        unsigned char *buf = slurp(path, &n);
        if (k->file == 0) EXPECT(n == 134);
        unsigned char *big = calloc(1, n + 64);
        memcpy(big, buf, n);
        if (k->at >= 0) big[k->at] = (unsigned char)k->value;
        size_t size = k->size >= 0 ? (size_t)k->size : n;
        spit(path, big, size);
        free(buf);
        free(big);
        struct loom_indexed *ds = NULL;
        loom_clear_error();
        enum loom_status s = loom_indexed_open(&ds, prefix);
        int ok = s == LOOM_ERR_FORMAT && !ds && strstr(loom_last_error(), k->want) &&
                 strstr(loom_last_error(), k->names) && !strchr(loom_last_error(), '\n');
        if (!ok)
            fprintf(stderr, "FAIL corruption '%s': status %d, message '%s' (want '%s')\n",
                    k->what, (int)s, loom_last_error(), k->want);
        expect_failures += !ok;
        loom_indexed_free(ds);
    }

    /* missing files */
    clear_dir();
    struct loom_indexed *ds = NULL;
    EXPECT_FAIL(loom_indexed_open(&ds, prefix), LOOM_ERR_IO, "c.idx: cannot open");
    EXPECT(write_sample(prefix, LOOM_IDX_DTYPE_U16) == 0);
    unlink(bin);
    EXPECT_FAIL(loom_indexed_open(&ds, prefix), LOOM_ERR_IO, "c.bin: cannot open");

    /* a float dtype is a valid file but holds no tokens */
    clear_dir();
    EXPECT(write_sample(prefix, LOOM_IDX_DTYPE_I32) == 0);
    size_t n = 0;
    unsigned char *buf = slurp(idx, &n);
    buf[17] = LOOM_IDX_DTYPE_F32;
    spit(idx, buf, n);
    free(buf);
    EXPECT(loom_indexed_open(&ds, prefix) == LOOM_OK);
    int32_t out[8];
    EXPECT_FAIL(loom_indexed_read(ds, 0, 0, 3, out), LOOM_ERR_FORMAT, "f32");
    loom_indexed_free(ds);

    /* i64 values beyond int32 are refused by read, not truncated */
    clear_dir();
    EXPECT(write_sample(prefix, LOOM_IDX_DTYPE_I64) == 0);
    buf = slurp(bin, &n);
    buf[7] = 0x01; /* first token of sequence 0 becomes > 2^56 */
    spit(bin, buf, n);
    free(buf);
    EXPECT(loom_indexed_open(&ds, prefix) == LOOM_OK);
    EXPECT_FAIL(loom_indexed_read(ds, 0, 0, 3, out), LOOM_ERR_FORMAT, "int32");
    loom_indexed_free(ds);

    /* the optional modes array */
    clear_dir();
    EXPECT(write_sample(prefix, LOOM_IDX_DTYPE_U16) == 0);
    buf = slurp(idx, &n);
    buf = realloc(buf, n + NSEQ);
    for (int i = 0; i < NSEQ; i++) buf[n + (size_t)i] = (unsigned char)(i + 1);
    spit(idx, buf, n + NSEQ);
    free(buf);
    EXPECT(loom_indexed_open(&ds, prefix) == LOOM_OK);
    if (ds) {
        EXPECT(loom_indexed_has_modes(ds));
        EXPECT(loom_indexed_mode(ds, 3) == 4);
        EXPECT(loom_indexed_read(ds, 3, 0, 4, out) == LOOM_OK &&
               out[3] == token_value(LOOM_IDX_DTYPE_U16, 3, 3));
        loom_indexed_free(ds);
    }
    (void)put_u64;
}

/* Random damage (byte flips, truncation, extension) never crashes open or read; whatever opens
 * can be read completely. */
static void test_fuzz(void) {
    char prefix[512], idx[520], bin[520];
    path_of(prefix, sizeof prefix, "f");
    snprintf(idx, sizeof idx, "%s.idx", prefix);
    snprintf(bin, sizeof bin, "%s.bin", prefix);
    clear_dir();
    EXPECT(write_sample(prefix, LOOM_IDX_DTYPE_I32) == 0);
    size_t ni = 0, nb = 0;
    unsigned char *gi = slurp(idx, &ni), *gb = slurp(bin, &nb);
    unsigned char *wi = malloc(ni + 64), *wb = malloc(nb + 64);
    uint64_t x = 88172645463325252ull;
    int opened = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(wi, gi, ni);
        memcpy(wb, gb, nb);
        size_t si = ni, sb = nb;
        int nflips = 1 + (int)(x % 4);
        for (int f = 0; f < nflips; f++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int target = (int)(x >> 60) & 3;
            if (target == 0) wi[(x >> 8) % ni] = (unsigned char)(x >> 16);
            else if (target == 1) wb[(x >> 8) % nb] = (unsigned char)(x >> 16);
            else if (target == 2) si = (x >> 8) % (ni + 40);
            else sb = (x >> 8) % (nb + 40);
        }
        if (si > ni) memset(wi + ni, 0, si - ni);
        if (sb > nb) memset(wb + nb, 0, sb - nb);
        spit(idx, wi, si);
        spit(bin, wb, sb);
        struct loom_indexed *ds = NULL;
        if (loom_indexed_open(&ds, prefix) == LOOM_OK) {
            opened++;
            for (int64_t i = 0; i < loom_indexed_num_sequences(ds); i++) {
                int64_t n = loom_indexed_sequence_length(ds, i);
                int32_t *o = malloc((size_t)(n + 1) * sizeof *o);
                (void)loom_indexed_read(ds, i, 0, n, o);
                free(o);
            }
            for (int64_t k = 0; k <= loom_indexed_num_documents(ds); k++)
                (void)loom_indexed_doc_index(ds, k);
            loom_indexed_free(ds);
        } else {
            EXPECT(loom_last_error()[0] != 0);
        }
    }
    EXPECT(opened > 0); /* some damage (to token bytes) leaves a valid file */
    free(gi);
    free(gb);
    free(wi);
    free(wb);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "dump") == 0) return tool_dump(argv[2]);
    if (argc == 3 && strcmp(argv[1], "open") == 0) return tool_open(argv[2]);
    if (argc == 5 && strcmp(argv[1], "write") == 0) return tool_write(argv[2], argv[3], argv[4]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_indexed [dump PREFIX | open PREFIX | write PREFIX DTYPE "
                        "DOCS.json]\n");
        return 2;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/loom_test_indexed.XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_roundtrip();
    test_writer_edges();
    test_corruptions();
    test_fuzz();
    clear_dir();
    rmdir(g_dir);
    if (expect_finish("test_indexed")) return 1;
    printf("test_indexed: ok\n");
    return 0;
}
