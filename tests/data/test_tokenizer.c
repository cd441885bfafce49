/* Tokenizer tests that need no downloaded data (tiny vocabularies written here), plus a tool
 * mode used by test_tokenizer_gpt2.sh / test_tokenizer_bert.sh on the real vocabularies:
 *
 *   test_tokenizer                                      run the unit tests
 *   test_tokenizer encode TYPE VOCAB MERGES|- FILE      print the ids of FILE, one per line
 *   test_tokenizer encode-files TYPE VOCAB MERGES|- OUTDIR FILE...
 *                                                       the same into OUTDIR/<basename>.ids
 *   test_tokenizer roundtrip TYPE VOCAB MERGES FILE...  decode(encode(x)) == x for each FILE
 *   test_tokenizer random VOCAB MERGES COUNT SEED       the same for COUNT random UTF-8 strings,
 *                                                       and threads agree with one thread
 *   test_tokenizer invalid TYPE VOCAB MERGES|- FILE OFFSET
 *                                                       FILE must fail as invalid UTF-8 at OFFSET
 *   test_tokenizer load TYPE VOCAB MERGES|-             print "ok" or the load error; exit 0/1
 *
 * For the types that read --tokenizer-model (HuggingFaceTokenizer, the SentencePiece ones,
 * TikTokenizer) VOCAB is that model file and MERGES is "-", except for TikTokenizer where it is
 * the --tiktoken-pattern; for NullTokenizer VOCAB is the --vocab-size. roundtrip drops a leading
 * beginning-of-sequence id that the tokenizer adds before decoding.
 */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "expect.h"
#include "loom/fileio.h"
#include "loom/tokenizer.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

static const char *merges_arg(const char *m) { return strcmp(m, "-") == 0 ? NULL : m; }

static enum loom_status load_any(struct loom_tokenizer **t, const char *type, const char *vocab,
                                 const char *merges) {
    struct loom_tokenizer_spec sp = {.type = type, .tiktoken_num_special_tokens = -1};
    if (strcmp(type, "NullTokenizer") == 0) {
        sp.vocab_size = atoll(vocab);
    } else if (strcmp(type, "HuggingFaceTokenizer") == 0 || strcmp(type, "TikTokenizer") == 0 ||
               strstr(type, "SentencePiece") || strcmp(type, "Llama2Tokenizer") == 0) {
        sp.tokenizer_model = vocab;
        sp.tiktoken_pattern = merges;
    } else {
        sp.vocab_file = vocab;
        sp.merge_file = merges;
    }
    return loom_tokenizer_open(t, &sp);
}

static struct loom_tokenizer *must_load(const char *type, const char *vocab, const char *merges) {
    struct loom_tokenizer *t;
    if (load_any(&t, type, vocab, merges) != LOOM_OK) {
        loom_print_error();
        exit(3);
    }
    return t;
}

static int read_whole(const char *path, char **buf, size_t *len) {
    if (loom_read_file(path, (size_t)1 << 32, buf, len) != LOOM_OK) {
        loom_print_error();
        return -1;
    }
    return 0;
}

/* encode to a fresh array; returns status */
static enum loom_status enc(const struct loom_tokenizer *t, const char *s, size_t len, int32_t **ids,
                            size_t *n) {
    size_t cap = 0;
    *ids = NULL;
    *n = 0;
    return loom_tokenizer_encode(t, s, len, ids, n, &cap);
}

static int same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

static void expect_ids(const struct loom_tokenizer *t, const char *text, const int32_t *want,
                       size_t nwant, int line) {
    int32_t *ids;
    size_t n;
    enum loom_status s = enc(t, text, strlen(text), &ids, &n);
    if (s != LOOM_OK || !same_ids(ids, n, want, nwant)) {
        expect_failures++;
        fprintf(stderr, "FAIL line %d: encode(\"%s\") status %d %s\n", line, text, (int)s,
                loom_last_error());
        print_ids("got ", ids, n);
        print_ids("want", want, nwant);
    }
    free(ids);
}
#define EXPECT_IDS(t, text, ...)                                                              \
    do {                                                                                      \
        const int32_t want_[] = {__VA_ARGS__};                                                \
        expect_ids(t, text, want_, sizeof want_ / sizeof want_[0], __LINE__);                 \
    } while (0)

static int roundtrip_one(const struct loom_tokenizer *t, const char *s, size_t len, const char *what) {
    int32_t *ids;
    size_t n;
    if (enc(t, s, len, &ids, &n) != LOOM_OK) {
        fprintf(stderr, "%s: encode failed: %s\n", what, loom_last_error());
        free(ids);
        return 1;
    }
    char *back;
    size_t blen;
    int bad = 0;
    size_t skip = n > 0 && ids[0] == loom_tokenizer_special(t, "BOS") ? 1 : 0;
    if (loom_tokenizer_decode(t, ids + skip, n - skip, &back, &blen) != LOOM_OK) {
        fprintf(stderr, "%s: decode failed: %s\n", what, loom_last_error());
        bad = 1;
    } else if (blen != len || memcmp(back, s, len) != 0) {
        size_t k = 0;
        while (k < len && k < blen && back[k] == s[k]) k++;
        fprintf(stderr, "%s: decode(encode(x)) != x (lengths %zu vs %zu, first difference at byte %zu)\n",
                what, blen, len, k);
        bad = 1;
    }
    free(back);
    free(ids);
    return bad;
}

/* ---- random UTF-8 ----------------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t put_cp(char *o, uint32_t c) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F)); return 4;
}

/* A random valid UTF-8 string of up to maxcp code points drawn from a mix of ranges. */
static size_t random_utf8(uint64_t *rng, char *out, size_t maxcp) {
    static const char *const frags[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL",
                                        " ", "  ", "\n", "\r\n", "\t", "<|endoftext|>", "\xC2\xA0",
                                        "\xE3\x80\x80", "\xEF\xBB\xBF"};
    size_t k = 0, ncp = 1 + rng_next(rng) % maxcp;
    for (size_t i = 0; i < ncp; i++) {
        uint64_t r = rng_next(rng);
        uint32_t c;
        switch (r % 10) {
        case 0: case 1: case 2: c = 0x20 + (uint32_t)(r >> 8) % 0x5F; break;          /* ASCII */
        case 3: c = (uint32_t)(r >> 8) % 0x20; break;                                  /* controls, NUL */
        case 4: c = 0x80 + (uint32_t)(r >> 8) % 0x780; break;                          /* 2-byte */
        case 5: c = 0x800 + (uint32_t)(r >> 8) % 0xF800; break;                        /* 3-byte */
        case 6: c = 0x10000 + (uint32_t)(r >> 8) % 0x100000; break;                    /* 4-byte */
        case 7: c = 0x1F300 + (uint32_t)(r >> 8) % 0x300; break;                       /* emoji */
        case 8: c = 0x4E00 + (uint32_t)(r >> 8) % 0x5000; break;                       /* CJK */
        default: {
            const char *f = frags[(r >> 8) % (sizeof frags / sizeof frags[0])];
            size_t fl = strlen(f);
            memcpy(out + k, f, fl);
            k += fl;
            continue;
        }
        }
        if (c >= 0xD800 && c <= 0xDFFF) c = 0xE000 + (c & 0x7FF);
        k += put_cp(out + k, c);
    }
    return k;
}

/* ---- tool modes ------------------------------------------------------------------------------- */

/* ids of file written to out (stdout when outdir is NULL) */
static int encode_file(const struct loom_tokenizer *t, const char *file, const char *outdir) {
    char *buf;
    size_t len;
    if (read_whole(file, &buf, &len)) return 3;
    int32_t *ids;
    size_t n;
    if (enc(t, buf, len, &ids, &n) != LOOM_OK) {
        fprintf(stderr, "%s: ", file);
        loom_print_error();
        free(buf);
        free(ids);
        return 3;
    }
    size_t cap = n * 12 + 16, k = 0;
    char *out = malloc(cap);
    for (size_t i = 0; i < n; i++) k += (size_t)snprintf(out + k, cap - k, "%d\n", ids[i]);
    FILE *f = stdout;
    if (outdir) {
        const char *base = strrchr(file, '/');
        base = base ? base + 1 : file;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.ids", outdir, base);
        f = fopen(path, "wb");
        if (!f) {
            perror(path);
            return 3;
        }
    }
    fwrite(out, 1, k, f);
    if (outdir) fclose(f);
    free(out);
    free(ids);
    free(buf);
    return 0;
}

static int tool_encode(const char *type, const char *vocab, const char *merges, const char *outdir,
                       int nf, char **files) {
    struct loom_tokenizer *t = must_load(type, vocab, merges_arg(merges));
    int rc = 0;
    for (int i = 0; i < nf && rc == 0; i++) rc = encode_file(t, files[i], outdir);
    loom_tokenizer_free(t);
    return rc;
}

static int tool_roundtrip(const char *type, const char *vocab, const char *merges, int nf, char **files) {
    struct loom_tokenizer *t = must_load(type, vocab, merges_arg(merges));
    int bad = 0;
    for (int i = 0; i < nf; i++) {
        char *buf;
        size_t len;
        if (read_whole(files[i], &buf, &len)) return 3;
        bad += roundtrip_one(t, buf, len, files[i]);
        free(buf);
    }
    loom_tokenizer_free(t);
    printf("roundtrip: %d of %d files differ\n", bad, nf);
    return bad ? 1 : 0;
}

static int tool_random(const char *vocab, const char *merges, long count, unsigned long seed) {
    struct loom_tokenizer *t = must_load("GPT2BPETokenizer", vocab, merges_arg(merges));
    uint64_t rng = seed;
    char *buf = malloc(64 * 40 + 64);
    int bad = 0;
    for (long i = 0; i < count && bad < 5; i++) {
        size_t len = random_utf8(&rng, buf, 64);
        char what[64];
        snprintf(what, sizeof what, "random string %ld (seed %lu)", i, seed);
        bad += roundtrip_one(t, buf, len, what);
    }
    /* threads: every thread encodes the same strings; all must equal the serial result */
    enum { NS = 2000 };
    char **strs = malloc(NS * sizeof *strs);
    size_t *lens = malloc(NS * sizeof *lens);
    int32_t **ref = malloc(NS * sizeof *ref);
    size_t *nref = malloc(NS * sizeof *nref);
    for (int i = 0; i < NS; i++) {
        strs[i] = malloc(32 * 40 + 64);
        lens[i] = random_utf8(&rng, strs[i], 32);
        if (enc(t, strs[i], lens[i], &ref[i], &nref[i]) != LOOM_OK) bad++;
    }
    int tbad = 0;
#pragma omp parallel num_threads(4) reduction(+ : tbad)
    {
        for (int rep = 0; rep < 3; rep++)
            for (int i = omp_get_thread_num(); i < NS; i += 1 + rep) {
                int32_t *ids;
                size_t n;
                if (enc(t, strs[i], lens[i], &ids, &n) != LOOM_OK || !same_ids(ids, n, ref[i], nref[i]))
                    tbad++;
                free(ids);
            }
    }
    if (tbad) fprintf(stderr, "threads: %d encodes differ from the serial result\n", tbad);
    for (int i = 0; i < NS; i++) {
        free(strs[i]);
        free(ref[i]);
    }
    free(strs); free(lens); free(ref); free(nref); free(buf);
    loom_tokenizer_free(t);
    printf("random: %ld strings round-trip, threads agree: %s\n", count, (bad || tbad) ? "NO" : "yes");
    return (bad || tbad) ? 1 : 0;
}

static int tool_invalid(const char *type, const char *vocab, const char *merges, const char *file,
                        const char *offset) {
    struct loom_tokenizer *t = must_load(type, vocab, merges_arg(merges));
    char *buf;
    size_t len;
    if (read_whole(file, &buf, &len)) return 3;
    int32_t *ids = malloc(4 * sizeof *ids);
    size_t n = 3, cap = 4;
    ids[0] = ids[1] = ids[2] = 7;
    enum loom_status s = loom_tokenizer_encode(t, buf, len, &ids, &n, &cap);
    char want[64];
    snprintf(want, sizeof want, "byte offset %s of", offset);
    int ok = s == LOOM_ERR_FORMAT && strstr(loom_last_error(), want) && n == 3;
    printf("%s: %s -> %s\n", file, ok ? "ok" : "WRONG", loom_last_error());
    free(ids);
    free(buf);
    loom_tokenizer_free(t);
    return ok ? 0 : 1;
}

static int tool(int argc, char **argv) {
    const char *m = argv[1];
    if (strcmp(m, "encode") == 0 && argc == 6)
        return tool_encode(argv[2], argv[3], argv[4], NULL, 1, argv + 5);
    if (strcmp(m, "encode-files") == 0 && argc >= 7)
        return tool_encode(argv[2], argv[3], argv[4], argv[5], argc - 6, argv + 6);
    if (strcmp(m, "roundtrip") == 0 && argc >= 6)
        return tool_roundtrip(argv[2], argv[3], argv[4], argc - 5, argv + 5);
    if (strcmp(m, "random") == 0 && argc == 6)
        return tool_random(argv[2], argv[3], atol(argv[4]), strtoul(argv[5], NULL, 10));
    if (strcmp(m, "invalid") == 0 && argc == 7)
        return tool_invalid(argv[2], argv[3], argv[4], argv[5], argv[6]);
    if (strcmp(m, "load") == 0 && argc == 5) {
        struct loom_tokenizer *t;
        if (load_any(&t, argv[2], argv[3], merges_arg(argv[4])) != LOOM_OK) {
            printf("%s\n", loom_last_error());
            return 1;
        }
        printf("ok vocab_size=%lld eod=%d\n", (long long)loom_tokenizer_vocab_size(t), loom_tokenizer_eod(t));
        loom_tokenizer_free(t);
        return 0;
    }
    fprintf(stderr, "usage: see the comment at the top of tests/data/test_tokenizer.c\n");
    return 2;
}

/* ---- unit tests ------------------------------------------------------------------------------- */

static char g_dir[256];

static const char *tmp_path(const char *name) {
    static char p[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
    return p[k];
}

static void write_text(const char *name, const char *text) {
    FILE *f = fopen(tmp_path(name), "wb");
    if (!f) {
        perror(name);
        exit(3);
    }
    fputs(text, f);
    fclose(f);
}

/* GPT-2 byte alphabet character of byte b, as UTF-8 (JSON needs no escaping for any of them
 * except '"' and '\\') */
static void alphabet_char(int b, char *out) {
    static int cp[256];
    static int init;
    if (!init) {
        int extra = 0;
        for (int i = 0; i < 256; i++) {
            int printable = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE);
            cp[i] = printable ? i : 256 + extra++;
        }
        init = 1;
    }
    size_t k = 0;
    if (cp[b] == '"' || cp[b] == '\\') out[k++] = '\\';
    k += put_cp(out + k, (uint32_t)cp[b]);
    out[k] = 0;
}

/* vocab: byte b -> id b; then extra tokens from 256 on. */
static void write_tiny_gpt2(const char *vocab_name, const char *merges_name, const char *const *extra,
                            int nextra, const char *merges, int skip_byte) {
    size_t cap = 65536, k = 0;
    char *j = malloc(cap);
    k += (size_t)snprintf(j + k, cap - k, "{");
    for (int b = 0; b < 256; b++) {
        if (b == skip_byte) continue;
        char c[8];
        alphabet_char(b, c);
        k += (size_t)snprintf(j + k, cap - k, "%s\"%s\": %d", k > 1 ? ", " : "", c, b);
    }
    for (int i = 0; i < nextra; i++)
        k += (size_t)snprintf(j + k, cap - k, ", \"%s\": %d", extra[i], 256 + i);
    snprintf(j + k, cap - k, "}");
    write_text(vocab_name, j);
    free(j);
    write_text(merges_name, merges);
}

static void test_utf8(void) {
    struct loom_tokenizer *t;
    const char *extra[] = {"ab"};
    write_tiny_gpt2("u.json", "u.txt", extra, 1, "#version: 0.2\na b\n", -1);
    EXPECTF(loom_tokenizer_load(&t, "GPT2BPETokenizer", tmp_path("u.json"), tmp_path("u.txt")) ==
                LOOM_OK,
            "%s", loom_last_error());
    struct {
        const char *s;
        size_t len;
        long bad; /* -1: valid */
    } cases[] = {
        {"plain ascii", 11, -1},
        {"caf\xC3\xA9", 5, -1},
        {"\xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF", 13, -1},
        {"nul\0inside", 10, -1},
        {"abc\x80", 4, 3},             /* lone continuation */
        {"ab\xC3", 3, 2},              /* truncated */
        {"ab\xC3(", 4, 2},             /* bad continuation */
        {"\xC0\xAF", 2, 0},            /* overlong '/' */
        {"x\xE0\x80\xAF", 4, 1},       /* overlong 3-byte */
        {"xy\xED\xA0\x80", 5, 2},      /* surrogate U+D800 */
        {"\xF4\x90\x80\x80", 4, 0},    /* above U+10FFFF */
        {"\xF0\x8F\xBF\xBF", 4, 0},    /* overlong 4-byte */
        {"12345678\xFF", 9, 8},        /* after the 8-byte ASCII fast path */
        {"0123456789abcdef\xE2\x82", 18, 16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t *ids = NULL;
        size_t n = 0, cap = 0;
        enum loom_status s = loom_tokenizer_encode(t, cases[i].s, cases[i].len, &ids, &n, &cap);
        if (cases[i].bad < 0) {
            EXPECTF(s == LOOM_OK && n > 0, "case %zu: %s", i, loom_last_error());
        } else {
            char want[64];
            snprintf(want, sizeof want, "byte offset %ld of %zu", cases[i].bad, cases[i].len);
            EXPECTF(s == LOOM_ERR_FORMAT && n == 0 && strstr(loom_last_error(), want),
                    "case %zu: status %d, n %zu, message '%s', want '%s'", i, (int)s, n,
                    loom_last_error(), want);
        }
        free(ids);
    }
    loom_tokenizer_free(t);
}

static void test_tiny_gpt2(void) {
    /* ids: bytes 0..255 by value; 256.. the tokens below */
    const char *extra[] = {"he", "ll", "hell", "hello", "<|endoftext|>", "\\u0120w", "or",
                           "\\u0120wor", "ld", "\\u0120world", "'s"};
    /* ranks: he 0, ll 1, hell 2, hello 3, Ġw 4, or 5, Ġwor 6, ld 7, Ġworld 8, 's 9 */
    const char *merges = "#version: 0.2\nh e\nl l\nhe ll\nhell o\n\xC4\xA0 w\no r\n\xC4\xA0w or\nl d\n"
                         "\xC4\xA0wor ld\n' s\n";
    write_tiny_gpt2("v.json", "m.txt", extra, (int)(sizeof extra / sizeof extra[0]), merges, -1);
    struct loom_tokenizer *t;
    if (loom_tokenizer_load(&t, "GPT2BPETokenizer", tmp_path("v.json"), tmp_path("m.txt")) != LOOM_OK) {
        expect_failures++;
        fprintf(stderr, "FAIL: tiny GPT-2 load: %s\n", loom_last_error());
        return;
    }
    EXPECTF(loom_tokenizer_vocab_size(t) == 256 + 11, "vocab size %lld",
            (long long)loom_tokenizer_vocab_size(t));
    EXPECTF(loom_tokenizer_eod(t) == 260, "eod %d", loom_tokenizer_eod(t));
    EXPECTF(loom_tokenizer_special(t, "[CLS]") == -1, "GPT-2 has no CLS");
    EXPECT_IDS(t, "hello", 259);
    /* every occurrence of a pair merges in one pass: h e l l h e l l o -> hell hello */
    EXPECT_IDS(t, "hellhello", 258, 259);
    /* ' world' is one piece; ' hello' starts with the space byte (id 32), no merge with it */
    EXPECT_IDS(t, "hello world", 259, 265);
    EXPECT_IDS(t, " hello", 32, 259);
    /* l l l: the leftmost pair merges first, the third l stays */
    EXPECT_IDS(t, "lll", 257, 'l');
    EXPECT_IDS(t, "llll", 257, 257);
    /* contractions are their own pieces; uppercase 'S is not one */
    EXPECT_IDS(t, "he's", 256, 266);
    EXPECT_IDS(t, "HE'S", 'H', 'E', '\'', 'S');
    /* the text <|endoftext|> is not the special token */
    EXPECT_IDS(t, "<|endoftext|>", '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>');
    /* whitespace: a run before a word leaves its last space to the word */
    EXPECT_IDS(t, "a   world", 'a', ' ', ' ', 265);
    EXPECT_IDS(t, "a \n\n world", 'a', ' ', '\n', '\n', 265);
    EXPECT_IDS(t, "end  ", 'e', 'n', 'd', ' ', ' ');
    /* digits and letters are separate pieces; NUL is an ordinary byte */
    EXPECT_IDS(t, "he2he", 256, '2', 256);
    {
        const char nul[] = {'h', 'e', 0, 'l', 'l'};
        int32_t *ids;
        size_t n;
        EXPECTF(enc(t, nul, 5, &ids, &n) == LOOM_OK && n == 3 && ids[0] == 256 && ids[1] == 0 &&
                    ids[2] == 257,
                "NUL: n=%zu", n);
        free(ids);
    }
    /* non-ASCII: bytes of the UTF-8 */
    EXPECT_IDS(t, "\xC3\xA9", 0xC3, 0xA9);
    /* appending keeps what is there */
    {
        int32_t *ids = NULL;
        size_t n = 0, cap = 0;
        EXPECTF(loom_tokenizer_encode(t, "hello", 5, &ids, &n, &cap) == LOOM_OK, "append 1");
        EXPECTF(loom_tokenizer_encode(t, " world", 6, &ids, &n, &cap) == LOOM_OK, "append 2");
        EXPECTF(n == 2 && ids[0] == 259 && ids[1] == 265 && cap >= n, "append: n=%zu", n);
        EXPECTF(loom_tokenizer_encode(t, "", 0, &ids, &n, &cap) == LOOM_OK && n == 2, "empty");
        free(ids);
    }
    /* decode */
    {
        const int32_t ids[] = {259, 265, 260, 0xC3, 0xA9};
        char *s;
        size_t len;
        EXPECTF(loom_tokenizer_decode(t, ids, 5, &s, &len) == LOOM_OK && len == 26 &&
                    strcmp(s, "hello world<|endoftext|>\xC3\xA9") == 0,
                "decode: %s", s ? s : "(null)");
        free(s);
        const int32_t badid[] = {259, 267};
        EXPECTF(loom_tokenizer_decode(t, badid, 2, &s, &len) == LOOM_ERR_INVALID_ARG &&
                    strstr(loom_last_error(), "267") && s == NULL,
                "decode out of range: %s", loom_last_error());
        const int32_t neg[] = {-1};
        EXPECTF(loom_tokenizer_decode(t, neg, 1, &s, NULL) == LOOM_ERR_INVALID_ARG, "negative id");
        EXPECTF(loom_tokenizer_decode(t, NULL, 0, &s, &len) == LOOM_OK && len == 0 && s &&
                    s[0] == 0,
                "decode nothing");
        free(s);
    }
    /* round trips of the whole byte range as valid UTF-8 */
    {
        char buf[1024];
        size_t k = 0;
        for (uint32_t c = 0; c < 0x250; c += 3) k += put_cp(buf + k, c);
        EXPECTF(roundtrip_one(t, buf, k, "byte range") == 0, "roundtrip");
    }
    /* a long piece takes the heap path: 3000 letters */
    {
        size_t len = 3000;
        char *s = malloc(len);
        for (size_t i = 0; i < len; i++) s[i] = "hello"[i % 5];
        int32_t *ids;
        size_t n;
        EXPECTF(enc(t, s, len, &ids, &n) == LOOM_OK && n == len / 5, "long piece: n=%zu", n);
        int ok = 1;
        for (size_t i = 0; i < n; i++) ok &= ids[i] == 259;
        EXPECTF(ok, "long piece ids");
        free(ids);
        free(s);
    }
    loom_tokenizer_free(t);
}

static void expect_load_error(const char *type, const char *vocab, const char *merges,
                              enum loom_status want, const char *substr, int line) {
    struct loom_tokenizer *t = (struct loom_tokenizer *)1;
    enum loom_status s = loom_tokenizer_load(&t, type, vocab, merges);
    if (s != want || t != NULL || !strstr(loom_last_error(), substr)) {
        expect_failures++;
        fprintf(stderr, "FAIL line %d: load(%s, %s, %s): status %d (want %d), message '%s' (want '%s')\n",
                line, type, vocab ? vocab : "NULL", merges ? merges : "NULL", (int)s, (int)want,
                loom_last_error(), substr);
    }
    if (s == LOOM_OK) loom_tokenizer_free(t);
}
#define EXPECT_LOAD_ERROR(type, vocab, merges, want, substr)                                  \
    expect_load_error(type, vocab, merges, want, substr, __LINE__)

static void test_gpt2_load_errors(void) {
    const char *extra[] = {"ab"};
    write_tiny_gpt2("ok.json", "ok.txt", extra, 1, "#version: 0.2\na b\n", -1);
    char v[512], m[512]; /* tmp_path's buffers rotate */
    snprintf(v, sizeof v, "%s", tmp_path("ok.json"));
    snprintf(m, sizeof m, "%s", tmp_path("ok.txt"));
    EXPECT_LOAD_ERROR("GPT2BPETokenizer", tmp_path("nope.json"), m, LOOM_ERR_IO, "nope.json");
    EXPECT_LOAD_ERROR("GPT2BPETokenizer", v, tmp_path("nope.txt"), LOOM_ERR_IO, "nope.txt");
    EXPECT_LOAD_ERROR("GPT2BPETokenizer", v, NULL, LOOM_ERR_INVALID_ARG, "merge");
    EXPECT_LOAD_ERROR("GPT2BPETokenizer", g_dir, m, LOOM_ERR_IO, "directory");
    EXPECT_LOAD_ERROR("GPT3Tokenizer", v, m, LOOM_ERR_INVALID_ARG, "GPT2BPETokenizer");
    EXPECT_LOAD_ERROR(NULL, v, m, LOOM_ERR_INVALID_ARG, "type");
    EXPECT_LOAD_ERROR("GPT2BPETokenizer", NULL, m, LOOM_ERR_INVALID_ARG, "vocab");

    write_text("trunc.json", "{\"a\": 1, \"b\": ");
    EXPECT_LOAD_ERROR("GPT2BPETokenizer", tmp_path("trunc.json"), m, LOOM_ERR_FORMAT, "trunc.json");
    write_text("arr.json", "[1, 2]");
    EXPECT_LOAD_ERROR("GPT2BPETokenizer", tmp_path("arr.json"), m, LOOM_ERR_FORMAT, "object");
    write_text("str.json", "{\"a\": \"x\"}");
    EXPECT_LOAD_ERROR("GPT2BPETokenizer", tmp_path("str.json"), m, LOOM_ERR_FORMAT, "\"a\"");
    write_text("empty.json", "");
    EXPECT_LOAD_ERROR("GPT2BPETokenizer", tmp_path("empty.json"), m, LOOM_ERR_FORMAT, "empty.json");
    write_tiny_gpt2("nobyte.json", "x.txt", extra, 1, "a b\n", 'q');
    EXPECT_LOAD_ERROR("GPT2BPETokenizer", tmp_path("nobyte.json"), m, LOOM_ERR_FORMAT, "0x71");

    write_text("three.txt", "#version: 0.2\na b\na b c\n");
    EXPECT_LOAD_ERROR("GPT2BPETokenizer", v, tmp_path("three.txt"), LOOM_ERR_FORMAT, "three.txt line 3");
    write_text("unk.txt", "#version: 0.2\na b\nb c\n");
    EXPECT_LOAD_ERROR("GPT2BPETokenizer", v, tmp_path("unk.txt"), LOOM_ERR_FORMAT, "\"bc\"");
    write_text("none.txt", "#version: 0.2\n");
    EXPECT_LOAD_ERROR("GPT2BPETokenizer", v, tmp_path("none.txt"), LOOM_ERR_FORMAT, "no merges");
    {
        FILE *f = fopen(tmp_path("bin.txt"), "wb");
        fwrite("a b\n\0\0", 1, 6, f);
        fclose(f);
        EXPECT_LOAD_ERROR("GPT2BPETokenizer", v, tmp_path("bin.txt"), LOOM_ERR_FORMAT, "NUL");
    }
    /* without the #version line, with CRLF and blank lines: fine */
    write_text("crlf.txt", "a b\r\n\r\n");
    struct loom_tokenizer *t;
    EXPECTF(loom_tokenizer_load(&t, "GPT2BPETokenizer", v, tmp_path("crlf.txt")) == LOOM_OK, "%s",
            loom_last_error());
    if (t) {
        EXPECT_IDS(t, "ab", 256);
        loom_tokenizer_free(t);
    }
}

/* WordPiece on a tiny vocabulary; expected ids are line numbers of the file below. */
static void test_tiny_wordpiece(void) {
    const char *vocab =
        "[PAD]\n"     /* 0 */
        "[UNK]\n"     /* 1 */
        "[CLS]\n"     /* 2 */
        "[SEP]\n"     /* 3 */
        "[MASK]\n"    /* 4 */
        "hello\n"     /* 5 */
        "Hello\n"     /* 6 */
        "world\n"     /* 7 */
        "##s\n"       /* 8 */
        ",\n"         /* 9 */
        "!\n"         /* 10 */
        "un\n"        /* 11 */
        "##aff\n"     /* 12 */
        "##able\n"    /* 13 */
        "cafe\n"      /* 14 */
        "café\n"      /* 15 */
        "\xE4\xB8\xAD\n" /* 16 中 */
        "\xE6\x96\x87\n" /* 17 文 */
        "a\n"         /* 18 */
        "##a\n"       /* 19 */
        "i\n"         /* 20 */
        "\xCF\x83\n"  /* 21 σ */
        "\xCF\x82\n"  /* 22 ς */
        "##\xCF\x82\n" /* 23 ##ς */
        "\xCE\xBF\xCE\xB4\xCE\xBF\n" /* 24 οδο */
        "##\xCF\x83\n" /* 25 ##σ */
        "x\xF0\x9D\x85\xA5\xF0\x9D\x85\xAD\n"  /* 26 x U+1D165 U+1D16D */
        "x\xF0\x9D\x85\xAD\xF0\x9D\x85\xA5\n"; /* 27 x U+1D16D U+1D165 */
    write_text("vocab.txt", vocab);
    struct loom_tokenizer *lo, *ca;
    if (loom_tokenizer_load(&lo, "BertWordPieceLowerCase", tmp_path("vocab.txt"), NULL) != LOOM_OK ||
        loom_tokenizer_load(&ca, "BertWordPieceCase", tmp_path("vocab.txt"), NULL) != LOOM_OK) {
        expect_failures++;
        fprintf(stderr, "FAIL: tiny WordPiece load: %s\n", loom_last_error());
        return;
    }
    EXPECTF(loom_tokenizer_vocab_size(lo) == 28, "vocab size %lld",
            (long long)loom_tokenizer_vocab_size(lo));
    EXPECTF(loom_tokenizer_eod(lo) == 3, "eod = [SEP]");
    EXPECTF(
        loom_tokenizer_special(lo, "[CLS]") == 2 && loom_tokenizer_special(lo, "SEP") == 3 &&
            loom_tokenizer_special(lo, "mask") == 4 && loom_tokenizer_special(lo, "[PAD]") == 0 &&
            loom_tokenizer_special(lo, "[UNK]") == 1 && loom_tokenizer_special(lo, "[FOO]") == -1,
        "specials");
    /* lower case: Hello -> hello; punctuation split; ## continuations */
    EXPECT_IDS(lo, "Hello, worlds!", 5, 9, 7, 8, 10);
    EXPECT_IDS(ca, "Hello, worlds!", 6, 9, 7, 8, 10);
    EXPECT_IDS(lo, "unaffable", 11, 12, 13);
    EXPECT_IDS(ca, "UNAFFABLE", 1); /* cased: no match at all -> one [UNK] */
    /* accents: lower case strips them (NFD, Mn removed); cased keeps them */
    EXPECT_IDS(lo, "Caf\xC3\xA9", 14);
    EXPECT_IDS(lo, "CAFE\xCC\x81", 14); /* decomposed input */
    EXPECT_IDS(ca, "caf\xC3\xA9", 15);
    EXPECT_IDS(ca, "Caf\xC3\xA9", 1);
    /* CJK split into single characters even without spaces */
    EXPECT_IDS(lo, "\xE4\xB8\xAD\xE6\x96\x87hello", 16, 17, 5);
    /* whitespace clean-up, control characters dropped, NUL and U+FFFD dropped */
    EXPECT_IDS(lo, "  hello\t\r\n world\xE3\x80\x80" "a ", 5, 7, 18);
    EXPECT_IDS(lo, "hel\x01lo wor\xEF\xBF\xBDld", 5, 7);
    {
        const char nul[] = "hel\0lo";
        int32_t *ids;
        size_t n;
        EXPECTF(enc(lo, nul, 6, &ids, &n) == LOOM_OK && n == 1 && ids[0] == 5, "NUL dropped");
        free(ids);
    }
    /* a ZWJ (format character, Cf) is a control character: dropped */
    EXPECT_IDS(lo, "hel\xE2\x80\x8Dlo", 5);
    /* greedy longest match: "aaa" -> a ##a ##a */
    EXPECT_IDS(lo, "aaa", 18, 19, 19);
    /* İ lowercases to i + combining dot, which the accent strip removes */
    EXPECT_IDS(lo, "\xC4\xB0", 20);
    /* final sigma: ΟΔΟΣ -> οδος, a lone Σ -> σ */
    EXPECT_IDS(lo, "\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3", 24, 23);
    EXPECT_IDS(lo, "\xCE\xA3", 21);
    /* canonical reordering of marks that survive the accent strip (combining classes 226 then
     * 216 swap), but not across a starter mark (U+0E31, Mn of class 0, itself removed); an Mn of
     * class 220 (U+0316) between them does not stop the swap */
    EXPECT_IDS(lo, "X\xF0\x9D\x85\xAD\xF0\x9D\x85\xA5", 26);
    EXPECT_IDS(lo, "X\xF0\x9D\x85\xAD\xE0\xB8\xB1\xF0\x9D\x85\xA5", 27);
    EXPECT_IDS(lo, "X\xF0\x9D\x85\xAD\xCC\x96\xF0\x9D\x85\xA5", 26);
    EXPECT_IDS(ca, "x\xF0\x9D\x85\xAD\xF0\x9D\x85\xA5", 27);
    /* words over the limit are [UNK] */
    {
        char w[LOOM_WORDPIECE_MAX_WORD_CHARS + 2];
        memset(w, 'a', sizeof w);
        w[LOOM_WORDPIECE_MAX_WORD_CHARS + 1] = 0;
        int32_t *ids;
        size_t n;
        EXPECTF(enc(lo, w, LOOM_WORDPIECE_MAX_WORD_CHARS + 1, &ids, &n) == LOOM_OK && n == 1 &&
                    ids[0] == 1,
                "long word: n=%zu", n);
        free(ids);
        EXPECTF(enc(lo, w, LOOM_WORDPIECE_MAX_WORD_CHARS, &ids, &n) == LOOM_OK &&
                    n == LOOM_WORDPIECE_MAX_WORD_CHARS && ids[0] == 18 && ids[1] == 19,
                "word at the limit: n=%zu", n);
        free(ids);
    }
    /* decode: tokens joined by spaces, ## glued */
    {
        const int32_t ids[] = {2, 11, 12, 13, 9, 7, 8, 3};
        char *s;
        size_t len;
        EXPECTF(loom_tokenizer_decode(lo, ids, 8, &s, &len) == LOOM_OK &&
                    strcmp(s, "[CLS] unaffable , worlds [SEP]") == 0 && len == strlen(s),
                "decode: '%s'", s ? s : "(null)");
        free(s);
    }
    /* invalid UTF-8 */
    {
        int32_t *ids;
        size_t n;
        EXPECTF(enc(lo, "ok \xFF", 4, &ids, &n) == LOOM_ERR_FORMAT &&
                    strstr(loom_last_error(), "byte offset 3"),
                "%s", loom_last_error());
        free(ids);
    }
    loom_tokenizer_free(lo);
    loom_tokenizer_free(ca);

    /* load errors */
    EXPECT_LOAD_ERROR("BertWordPieceLowerCase", tmp_path("nope.txt"), NULL, LOOM_ERR_IO, "nope.txt");
    write_text("nounk.txt", "[PAD]\n[CLS]\n[SEP]\n[MASK]\nhello\n");
    EXPECT_LOAD_ERROR("BertWordPieceCase", tmp_path("nounk.txt"), NULL, LOOM_ERR_FORMAT, "[UNK]");
    write_text("empty.txt", "");
    EXPECT_LOAD_ERROR("BertWordPieceCase", tmp_path("empty.txt"), NULL, LOOM_ERR_FORMAT, "empty.txt");
    write_text("badutf.txt", "[PAD]\n[UNK]\n\xC3(\n");
    EXPECT_LOAD_ERROR("BertWordPieceCase", tmp_path("badutf.txt"), NULL, LOOM_ERR_FORMAT, "line 3");
    /* a token on two lines (after stripping): refused, naming both lines */
    write_text("dup.txt", "[PAD]\n[UNK]\nhello\n##lo\n hello \n");
    EXPECT_LOAD_ERROR("BertWordPieceLowerCase", tmp_path("dup.txt"), NULL, LOOM_ERR_FORMAT,
                      "line 5: token 'hello' repeats line 3");
}

int main(int argc, char **argv) {
    if (argc > 1) return tool(argc, argv);
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/loom_tok_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 3;
    }
    test_utf8();
    test_tiny_gpt2();
    test_gpt2_load_errors();
    test_tiny_wordpiece();
    loom_rm_rf(g_dir);
    if (expect_finish("test_tokenizer")) return 1;
    printf("test_tokenizer: all passed\n");
    return 0;
}
