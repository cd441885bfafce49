/* Tests of include/loom/safetensors.h.
 *
 * Without arguments: unit tests (C -> C round trip, layout, conversions, writer argument errors,
 * malformed files). With arguments it is the C side of tests/ckpt/test_safetensors_py.sh:
 *   test_safetensors --write-sample FILE          write the sample file (see write_sample)
 *   test_safetensors --check-python FILE EXPECT   read a file written by tests/ref/
 *                                                 safetensors_ref.py and compare every tensor
 *                                                 with the JSON description EXPECT
 * The sample's content is defined twice, here and in tests/ref/safetensors_ref.py; the Python
 * side checks the C file byte by byte against its own definition.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "expect.h"
#include "loom/fileio.h"
#include "loom/safetensors.h"

static char g_root[200];

static uint32_t f32_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* ---- the sample file (same definition in tests/ref/safetensors_ref.py) ----------------------- */

static float g_norm_f[10], g_embed[24], g_odd_f[3], g_scalar = 2.5f;
static uint16_t g_norm[10], g_odd[3];
static const uint16_t g_half[5] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00};
static int64_t g_tokens[6];
static uint8_t g_bytes[7];

static void sample_init(void) {
    for (int i = 0; i < 10; i++) {
        g_norm_f[i] = (float)(i - 4) * 0.5f; /* exact in bf16: the low 16 bits are zero */
        g_norm[i] = (uint16_t)(f32_bits(g_norm_f[i]) >> 16);
    }
    for (int i = 0; i < 24; i++) g_embed[i] = (float)(i - 11) * 0.375f;
    const float odd[3] = {1.0f, -2.5f, 3.140625f};
    for (int i = 0; i < 3; i++) {
        g_odd_f[i] = odd[i];
        g_odd[i] = (uint16_t)(f32_bits(odd[i]) >> 16);
    }
    for (int i = 0; i < 6; i++) g_tokens[i] = (int64_t)i * 1000000007LL - 3000000000LL;
    for (int i = 0; i < 7; i++) g_bytes[i] = (uint8_t)(i * 37 % 256);
}

static enum loom_status write_sample(const char *path) {
    struct loom_safetensors_writer *w;
    LOOM_CHECK(loom_safetensors_writer_init(&w));
    enum loom_status s = LOOM_OK;
#define ADD(name, dt, nd, data, ...)                                                          \
    if (s == LOOM_OK) {                                                                       \
        const int64_t shp_[] = {__VA_ARGS__};                                                 \
        s = loom_safetensors_writer_add(w, name, dt, nd, shp_, data);                         \
    }
    ADD("model.layers.0.norm.weight", LOOM_DTYPE_BF16, 1, g_norm, 10);
    ADD("model.embed.weight", LOOM_DTYPE_F32, 2, g_embed, 4, 6);
    ADD("odd.bf16", LOOM_DTYPE_BF16, 1, g_odd, 3);
    ADD("tokens", LOOM_DTYPE_I64, 2, g_tokens, 2, 3);
    ADD("scalar", LOOM_DTYPE_F32, 0, &g_scalar, 0);
    ADD("empty", LOOM_DTYPE_F32, 2, NULL, 0, 3);
    ADD("half", LOOM_DTYPE_F16, 1, g_half, 5);
    ADD("bytes", LOOM_DTYPE_U8, 1, g_bytes, 7);
#undef ADD
    if (s == LOOM_OK) s = loom_safetensors_writer_set_metadata(w, "format", "pt");
    if (s == LOOM_OK) s = loom_safetensors_writer_set_metadata(w, "loom.iteration", "99");
    if (s == LOOM_OK)
        s = loom_safetensors_writer_set_metadata(w, "note", "unicode \xc3\xbc \xe2\x9c\x93");
    if (s == LOOM_OK) s = loom_safetensors_writer_set_metadata(w, "loom.iteration", "100");
    if (s == LOOM_OK) s = loom_safetensors_writer_save(w, path);
    loom_safetensors_writer_free(w);
    return s;
}

/* ---- C -> C round trip ----------------------------------------------------------------------- */

static void check_entry(const struct loom_safetensors *st, const char *name, enum loom_dtype dt,
                        int ndim, const int64_t *shape, const void *data, size_t nbytes,
                        uint64_t offset) {
    const struct loom_safetensors_entry *e = loom_safetensors_find(st, name);
    EXPECT(e != NULL);
    if (!e) return;
    EXPECT(strcmp(e->name, name) == 0);
    EXPECT(e->dtype == dt);
    EXPECT(strcmp(e->dtype_name, loom_dtype_name(dt)) == 0);
    EXPECT(e->ndim == ndim);
    for (int d = 0; d < ndim && d < e->ndim; d++) EXPECT(e->shape[d] == shape[d]);
    EXPECT(e->nbytes == nbytes);
    EXPECT(e->offset == offset);
    if (e->nbytes == nbytes && nbytes) EXPECT(memcmp(e->data, data, nbytes) == 0);
}

static void test_round_trip(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/sample.safetensors", g_root);
    EXPECT_OK(write_sample(path));

    /* Raw layout: header length a multiple of 8, padded with spaces, data right after. */
    char *raw = NULL;
    size_t rawlen = 0;
    EXPECT_OK(loom_read_file(path, 1 << 20, &raw, &rawlen));
    if (!raw) return;
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)(unsigned char)raw[i] << (8 * i);
    EXPECT(hlen % 8 == 0);
    EXPECT(8 + hlen + 191 == rawlen); /* 191 data bytes, see the offsets below */
    EXPECT(raw[8] == '{');
    size_t close_brace = 8 + hlen - 1;
    while (close_brace > 8 && raw[close_brace] == ' ') close_brace--;
    EXPECT(raw[close_brace] == '}' && 8 + hlen - 1 - close_brace < 8);
    /* "__metadata__" comes first in the header */
    EXPECT(strncmp(raw + 8, "{\"__metadata__\":", 16) == 0);
    free(raw);

    struct loom_safetensors *st = NULL;
    EXPECT_OK(loom_safetensors_open(&st, path));
    if (!st) return;
    EXPECT(strcmp(loom_safetensors_path(st), path) == 0);
    EXPECT(loom_safetensors_count(st) == 8);
    /* Layout: element size descending, then name. */
    const char *order[] = {"tokens", "empty", "model.embed.weight", "scalar", "half",
                           "model.layers.0.norm.weight", "odd.bf16", "bytes"};
    for (int i = 0; i < 8; i++) {
        const struct loom_safetensors_entry *e = loom_safetensors_entry_at(st, i);
        EXPECT(e && strcmp(e->name, order[i]) == 0);
        /* every tensor starts at a file offset that is a multiple of its element size */
        if (e && e->dtype != LOOM_DTYPE_COUNT)
            EXPECT((8 + hlen + e->offset) % loom_dtype_size(e->dtype) == 0);
    }
    EXPECT(loom_safetensors_entry_at(st, 8) == NULL);
    EXPECT(loom_safetensors_entry_at(st, -1) == NULL);

    check_entry(st, "tokens", LOOM_DTYPE_I64, 2, (int64_t[]){2, 3}, g_tokens, 48, 0);
    check_entry(st, "empty", LOOM_DTYPE_F32, 2, (int64_t[]){0, 3}, NULL, 0, 48);
    check_entry(st, "model.embed.weight", LOOM_DTYPE_F32, 2, (int64_t[]){4, 6}, g_embed, 96, 48);
    check_entry(st, "scalar", LOOM_DTYPE_F32, 0, NULL, &g_scalar, 4, 144);
    check_entry(st, "half", LOOM_DTYPE_F16, 1, (int64_t[]){5}, g_half, 10, 148);
    check_entry(st, "model.layers.0.norm.weight", LOOM_DTYPE_BF16, 1, (int64_t[]){10}, g_norm,
                20, 158);
    check_entry(st, "odd.bf16", LOOM_DTYPE_BF16, 1, (int64_t[]){3}, g_odd, 6, 178);
    check_entry(st, "bytes", LOOM_DTYPE_U8, 1, (int64_t[]){7}, g_bytes, 7, 184);
    EXPECT(loom_safetensors_find(st, "nope") == NULL);
    EXPECT(loom_safetensors_find(st, "") == NULL);
    const struct loom_safetensors_entry *e;
    EXPECT_FAIL(loom_safetensors_get(st, "model.missing", &e), LOOM_ERR_FORMAT, path,
                "'model.missing'");

    /* metadata: header order, a value set twice keeps its first position and the last value */
    EXPECT(loom_safetensors_metadata_count(st) == 3);
    const char *k, *v;
    loom_safetensors_metadata_at(st, 0, &k, &v);
    EXPECT(k && v && !strcmp(k, "format") && !strcmp(v, "pt"));
    loom_safetensors_metadata_at(st, 1, &k, &v);
    EXPECT(k && v && !strcmp(k, "loom.iteration") && !strcmp(v, "100"));
    loom_safetensors_metadata_at(st, 3, &k, &v);
    EXPECT(k == NULL && v == NULL);
    EXPECT(!strcmp(loom_safetensors_metadata_get(st, "note"), "unicode \xc3\xbc \xe2\x9c\x93"));
    EXPECT(loom_safetensors_metadata_get(st, "absent") == NULL);

    /* float32 reads */
    float buf[24];
    EXPECT_OK(loom_safetensors_read_f32(st, "model.embed.weight", buf, 24));
    EXPECT(memcmp(buf, g_embed, sizeof g_embed) == 0);
    EXPECT_OK(loom_safetensors_read_f32(st, "model.layers.0.norm.weight", buf, 10));
    for (int i = 0; i < 10; i++) EXPECT(buf[i] == g_norm_f[i]);
    EXPECT_OK(loom_safetensors_read_f32(st, "odd.bf16", buf, 3));
    for (int i = 0; i < 3; i++) EXPECT(buf[i] == g_odd_f[i]);
    EXPECT_OK(loom_safetensors_read_f32(st, "half", buf, 5));
    EXPECT(buf[0] == 1.0f && buf[1] == -2.0f && buf[2] == 65504.0f);
    EXPECT(buf[3] == ldexpf(1.0f, -24) && isinf(buf[4]) && buf[4] > 0);
    EXPECT_OK(loom_safetensors_read_f32(st, "scalar", buf, 1));
    EXPECT(buf[0] == 2.5f);
    EXPECT_OK(loom_safetensors_read_f32(st, "empty", NULL, 0));

    EXPECT_FAIL(loom_safetensors_read_f32(st, "model.embed.weight", buf, 23), LOOM_ERR_FORMAT,
                path, "'model.embed.weight'", "[4, 6]", "24 elements", "expected 23");
    EXPECT_FAIL(loom_safetensors_read_f32(st, "tokens", buf, 6), LOOM_ERR_FORMAT, "'tokens'",
                "I64");
    EXPECT_FAIL(loom_safetensors_read_f32(st, "gone", buf, 6), LOOM_ERR_FORMAT, "'gone'");
    EXPECT_OK(loom_safetensors_expect_shape(st, "model.embed.weight", 2, (int64_t[]){4, 6}));
    EXPECT_OK(loom_safetensors_expect_shape(st, "scalar", 0, NULL));
    EXPECT_FAIL(loom_safetensors_expect_shape(st, "model.embed.weight", 2, (int64_t[]){6, 4}),
                LOOM_ERR_FORMAT, path, "'model.embed.weight'", "has shape [4, 6]",
                "expected [6, 4]");
    EXPECT_FAIL(loom_safetensors_expect_shape(st, "scalar", 1, (int64_t[]){1}), LOOM_ERR_FORMAT,
                "'scalar'", "has shape []", "expected [1]");
    loom_safetensors_close(st);

    /* Saving again over the same path replaces the file and leaves no temporary. */
    EXPECT_OK(write_sample(path));
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    EXPECT(!loom_file_exists(tmp));
}

static void test_empty_file_and_tensor_api(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/none.safetensors", g_root);
    struct loom_safetensors_writer *w;
    EXPECT_OK(loom_safetensors_writer_init(&w));
    EXPECT_OK(loom_safetensors_writer_save(w, path));
    struct loom_safetensors *st = NULL;
    EXPECT_OK(loom_safetensors_open(&st, path));
    if (st) {
        EXPECT(loom_safetensors_count(st) == 0 && loom_safetensors_metadata_count(st) == 0);
        EXPECT(loom_safetensors_find(st, "x") == NULL);
        loom_safetensors_close(st);
    }
    char *raw = NULL;
    size_t n = 0;
    EXPECT_OK(loom_read_file(path, 100, &raw, &n));
    EXPECT(n == 16 && raw && memcmp(raw + 8, "{}      ", 8) == 0);
    free(raw);

    /* add_tensor: host tensors go in; device tensors are refused. A second save of the same
     * writer works too. */
    float x[6] = {1, 2, 3, 4, 5, 6};
    struct loom_tensor t;
    loom_tensor_init(&t, x, LOOM_DTYPE_F32, LOOM_DEVICE_CPU, 2, (int64_t[]){3, 2});
    EXPECT_OK(loom_safetensors_writer_add_tensor(w, "t", &t));
    loom_tensor_init(&t, x, LOOM_DTYPE_F32, LOOM_DEVICE_CUDA, 1, (int64_t[]){6});
    EXPECT_FAIL(loom_safetensors_writer_add_tensor(w, "d", &t), LOOM_ERR_INVALID_ARG, "'d'",
                "host");
    EXPECT_OK(loom_safetensors_writer_save(w, path));
    loom_safetensors_writer_free(w);
    EXPECT_OK(loom_safetensors_open(&st, path));
    if (st) {
        float y[6];
        EXPECT_OK(loom_safetensors_expect_shape(st, "t", 2, (int64_t[]){3, 2}));
        EXPECT_OK(loom_safetensors_read_f32(st, "t", y, 6));
        EXPECT(memcmp(x, y, sizeof x) == 0);
        loom_safetensors_close(st);
    }
    loom_safetensors_writer_free(NULL);
    loom_safetensors_close(NULL);
}

static void test_writer_errors(void) {
    struct loom_safetensors_writer *w;
    EXPECT_OK(loom_safetensors_writer_init(&w));
    float x[4] = {0};
    const int64_t s4[] = {4}, neg[] = {2, -1};
    const int64_t big[] = {1LL << 40, 1LL << 40};
    const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    EXPECT_OK(loom_safetensors_writer_add(w, "a", LOOM_DTYPE_F32, 1, s4, x));
    EXPECT_FAIL(loom_safetensors_writer_add(w, "a", LOOM_DTYPE_F32, 1, s4, x),
                LOOM_ERR_INVALID_ARG, "'a'", "twice");
    EXPECT_FAIL(loom_safetensors_writer_add(w, "__metadata__", LOOM_DTYPE_F32, 1, s4, x),
                LOOM_ERR_INVALID_ARG, "reserved");
    EXPECT_FAIL(loom_safetensors_writer_add(w, "", LOOM_DTYPE_F32, 1, s4, x),
                LOOM_ERR_INVALID_ARG, "name");
    EXPECT_FAIL(loom_safetensors_writer_add(w, "bad\xff", LOOM_DTYPE_F32, 1, s4, x),
                LOOM_ERR_INVALID_ARG, "UTF-8");
    EXPECT_FAIL(loom_safetensors_writer_add(w, "n", LOOM_DTYPE_F32, 2, neg, x),
                LOOM_ERR_INVALID_ARG, "'n'", "[2, -1]");
    EXPECT_FAIL(loom_safetensors_writer_add(w, "b", LOOM_DTYPE_F32, 2, big, x),
                LOOM_ERR_INVALID_ARG, "'b'", "too large");
    EXPECT_FAIL(loom_safetensors_writer_add(w, "nine", LOOM_DTYPE_F32, 9, nine, x),
                LOOM_ERR_INVALID_ARG, "'nine'", "9 dimensions");
    EXPECT_FAIL(loom_safetensors_writer_add(w, "null", LOOM_DTYPE_F32, 1, s4, NULL),
                LOOM_ERR_INVALID_ARG, "'null'", "no data");
    EXPECT_FAIL(loom_safetensors_writer_add(w, "dt", LOOM_DTYPE_COUNT, 1, s4, x),
                LOOM_ERR_INVALID_ARG, "'dt'", "dtype");
    EXPECT_FAIL(loom_safetensors_writer_set_metadata(w, "k", "\xc3"), LOOM_ERR_INVALID_ARG,
                "'k'", "UTF-8");
    /* A failed add leaves the writer usable and the name free. */
    EXPECT_OK(loom_safetensors_writer_add(w, "n", LOOM_DTYPE_F32, 1, s4, x));
    char path[512];
    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", g_root);
    EXPECT_FAIL(loom_safetensors_writer_save(w, path), LOOM_ERR_IO, path);
    EXPECT(!loom_file_exists(path));
    snprintf(path, sizeof path, "%s/after_errors.safetensors", g_root);
    EXPECT_OK(loom_safetensors_writer_save(w, path));
    loom_safetensors_writer_free(w);
    struct loom_safetensors *st = NULL;
    EXPECT_OK(loom_safetensors_open(&st, path));
    if (st) {
        EXPECT(loom_safetensors_count(st) == 2);
        loom_safetensors_close(st);
    }
}

/* ---- float conversions ----------------------------------------------------------------------- */

static void test_conversions(void) {
    /* Every F16 and BF16 bit pattern, checked against an independent formula. */
    static uint16_t all[65536];
    static float got[65536];
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    char path[512];
    snprintf(path, sizeof path, "%s/all16.safetensors", g_root);
    struct loom_safetensors_writer *w;
    EXPECT_OK(loom_safetensors_writer_init(&w));
    EXPECT_OK(loom_safetensors_writer_add(w, "f16", LOOM_DTYPE_F16, 1, (int64_t[]){65536}, all));
    EXPECT_OK(loom_safetensors_writer_add(w, "bf16", LOOM_DTYPE_BF16, 2, (int64_t[]){256, 256},
                                          all));
    EXPECT_OK(loom_safetensors_writer_save(w, path));
    loom_safetensors_writer_free(w);
    struct loom_safetensors *st = NULL;
    EXPECT_OK(loom_safetensors_open(&st, path));
    if (!st) return;
    EXPECT_OK(loom_safetensors_read_f32(st, "f16", got, 65536));
    int bad = 0;
    for (int i = 0; i < 65536; i++) {
        int sign = i >> 15, exp = (i >> 10) & 31, man = i & 1023;
        float want;
        if (exp == 31) {
            uint32_t b = ((uint32_t)sign << 31) | 0x7f800000u | ((uint32_t)man << 13);
            memcpy(&want, &b, 4);
        } else {
            want = exp ? ldexpf(1.0f + man / 1024.0f, exp - 15) : ldexpf((float)man, -24);
            if (sign) want = -want;
        }
        if (f32_bits(got[i]) != f32_bits(want)) bad++;
    }
    EXPECT(bad == 0);
    EXPECT_OK(loom_safetensors_read_f32(st, "bf16", got, 65536));
    bad = 0;
    for (int i = 0; i < 65536; i++)
        if (f32_bits(got[i]) != (uint32_t)i << 16) bad++;
    EXPECT(bad == 0);
    loom_safetensors_close(st);
}

/* ---- malformed files ------------------------------------------------------------------------- */

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

/* A file with header text `hdr` (its length written as `hlen`, or the true length when
 * hlen == UINT64_MAX) followed by `data_len` data bytes. */
static void write_st(const char *path, const char *hdr, uint64_t hlen, size_t data_len) {
    size_t hl = strlen(hdr);
    if (hlen == UINT64_MAX) hlen = hl;
    size_t n = 8 + hl + data_len;
    unsigned char *buf = calloc(1, n);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, hdr, hl);
    for (size_t i = 0; i < data_len; i++) buf[8 + hl + i] = (unsigned char)i;
    write_bytes(path, buf, n);
    free(buf);
}

/* Opening `path` must fail with LOOM_ERR_FORMAT and a message naming the file and containing
 * each of the given strings. */
#define EXPECT_BAD(path, ...)                                                                 \
    do {                                                                                      \
        struct loom_safetensors *st_ = (struct loom_safetensors *)1;                          \
        EXPECT_FAIL(loom_safetensors_open(&st_, path), LOOM_ERR_FORMAT, path, __VA_ARGS__);   \
        EXPECT(st_ == NULL);                                                                  \
    } while (0)

static void test_malformed(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/bad.safetensors", g_root);
    const uint64_t TRUE_LEN = UINT64_MAX;

    write_bytes(p, "", 0);
    EXPECT_BAD(p, "0 bytes");
    write_bytes(p, "\x02\x00\x00\x00\x00", 5);
    EXPECT_BAD(p, "5 bytes", "8-byte");

    /* header length past the end of the file, including lengths that overflow arithmetic */
    write_st(p, "{}", 1000, 0);
    EXPECT_BAD(p, "header length 1000", "past the end");
    write_st(p, "{}", UINT64_MAX - 3, 0);
    EXPECT_BAD(p, "past the end");
    write_st(p, "{}", 3, 0); /* one byte past */
    EXPECT_BAD(p, "header length 3");

    /* truncated header: the JSON text is cut short */
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"sha", TRUE_LEN, 0);
    EXPECT_BAD(p, "not valid JSON");
    write_st(p, "", TRUE_LEN, 4);
    EXPECT_BAD(p, "not valid JSON");
    write_st(p, "{} trailing", TRUE_LEN, 0);
    EXPECT_BAD(p, "not valid JSON");
    write_st(p, "{\"a\":{},\"a\":{}}", TRUE_LEN, 0);
    EXPECT_BAD(p, "not valid JSON", "duplicate");

    /* header that is JSON but not an object */
    write_st(p, "[1, 2]", TRUE_LEN, 0);
    EXPECT_BAD(p, "not a JSON object");
    write_st(p, "\"str\"   ", TRUE_LEN, 0);
    EXPECT_BAD(p, "not a JSON object");

    /* entries */
    write_st(p, "{\"w\":[1]}", TRUE_LEN, 0);
    EXPECT_BAD(p, "'w'", "not a JSON object");
    write_st(p, "{\"w\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", TRUE_LEN, 4);
    EXPECT_BAD(p, "'w'", "unknown dtype 'F33'");
    write_st(p, "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", TRUE_LEN, 4);
    EXPECT_BAD(p, "'w'", "dtype");
    write_st(p, "{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", TRUE_LEN, 4);
    EXPECT_BAD(p, "'w'", "dtype");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", TRUE_LEN, 4);
    EXPECT_BAD(p, "'w'", "shape");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-2],\"data_offsets\":[0,16]}}", TRUE_LEN,
             16);
    EXPECT_BAD(p, "'w'", "shape dimension 1");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", TRUE_LEN,
             8);
    EXPECT_BAD(p, "'w'", "shape dimension 0");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", TRUE_LEN, 8);
    EXPECT_BAD(p, "'w'", "shape dimension 0");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
             TRUE_LEN, 4);
    EXPECT_BAD(p, "'w'", "9 dimensions");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                "\"data_offsets\":[0,4]}}", TRUE_LEN, 4);
    EXPECT_BAD(p, "'w'", "too large");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", TRUE_LEN, 4);
    EXPECT_BAD(p, "'w'", "data_offsets");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", TRUE_LEN, 8);
    EXPECT_BAD(p, "'w'", "data_offsets");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", TRUE_LEN, 8);
    EXPECT_BAD(p, "'w'", "data_offsets");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", TRUE_LEN, 8);
    EXPECT_BAD(p, "'w'", "[8, 4]", "end before");

    /* wrong sizes */
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", TRUE_LEN,
             16);
    EXPECT_BAD(p, "'w'", "hold 12 bytes", "[2, 2] of F32 needs 16");
    write_st(p, "{\"w\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,12]}}", TRUE_LEN, 12);
    EXPECT_BAD(p, "'w'", "hold 12 bytes", "BF16 needs 6");
    /* offsets past the data section (a truncated file) */
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", TRUE_LEN, 15);
    EXPECT_BAD(p, "'w'", "past the end of the data section (15 bytes");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[99,99]}}", TRUE_LEN, 8);
    EXPECT_BAD(p, "'w'", "past the end");

    /* overlapping offsets, listed in either order */
    write_st(p, "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", TRUE_LEN, 12);
    EXPECT_BAD(p, "'a' [0, 8]", "'b' [4, 12]", "overlap");
    write_st(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", TRUE_LEN, 8);
    EXPECT_BAD(p, "'a'", "'b'", "overlap");
    write_st(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", TRUE_LEN, 4);
    EXPECT_BAD(p, "'a'", "'b'", "overlap");

    /* metadata */
    write_st(p, "{\"__metadata__\":{\"k\":1}}", TRUE_LEN, 0);
    EXPECT_BAD(p, "__metadata__", "'k'", "not a string");
    write_st(p, "{\"__metadata__\":[\"k\"]}", TRUE_LEN, 0);
    EXPECT_BAD(p, "__metadata__", "not a JSON object");

    /* The tensors must cover the data exactly: a hole, trailing bytes (a header length one
     * byte short leaves one) are refused. */
    write_st(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                "\"f\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9,13]}}", TRUE_LEN, 13);
    EXPECT_BAD(p, "'f'", "no tensor holds");
    write_st(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}", TRUE_LEN, 9);
    EXPECT_BAD(p, "the rest is no tensor's");

    /* Valid edge cases: an empty tensor inside another's range, unaligned data, dtypes loom has
     * no enum value for, spaces and newlines in the header. */
    write_st(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[9],\"data_offsets\":[0,9]},\n"
                " \"e\":{\"dtype\":\"F32\",\"shape\":[0, 5],\"data_offsets\":[4,4]},\n"
                " \"f\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9,13]},\n"
                " \"flags\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[13,15]},\n"
                " \"u\":{\"dtype\":\"U32\",\"shape\":[1],\"data_offsets\":[15,19]}}  ",
             TRUE_LEN, 19);
    struct loom_safetensors *st = NULL;
    EXPECT_OK(loom_safetensors_open(&st, p));
    if (st) {
        EXPECT(loom_safetensors_count(st) == 5);
        const struct loom_safetensors_entry *e = loom_safetensors_find(st, "flags");
        EXPECT(e && e->dtype == LOOM_DTYPE_COUNT && !strcmp(e->dtype_name, "BOOL"));
        e = loom_safetensors_find(st, "f");
        EXPECT(e && e->offset == 9 && ((const unsigned char *)e->data)[0] == 9);
        float f;
        EXPECT_OK(loom_safetensors_read_f32(st, "f", &f, 1)); /* unaligned read */
        uint32_t want = 9u | 10u << 8 | 11u << 16 | 12u << 24;
        EXPECT(f32_bits(f) == want);
        EXPECT_FAIL(loom_safetensors_read_f32(st, "u", &f, 1), LOOM_ERR_FORMAT, "'u'", "U32");
        loom_safetensors_close(st);
    }

    /* Not a regular file, missing file: I/O errors naming the path. */
    EXPECT_FAIL(loom_safetensors_open(&st, g_root), LOOM_ERR_IO, g_root);
    snprintf(p, sizeof p, "%s/missing.safetensors", g_root);
    EXPECT_FAIL(loom_safetensors_open(&st, p), LOOM_ERR_IO, p);
}

/* ---- files written by tests/ref/safetensors_ref.py ------------------------------------------- */

static int check_python(const char *path, const char *expect_path) {
    json_error_t jerr;
    json_t *ex = json_load_file(expect_path, 0, &jerr);
    if (!ex) {
        fprintf(stderr, "%s: %s\n", expect_path, jerr.text);
        return 1;
    }
    struct loom_safetensors *st = NULL;
    EXPECT_OK(loom_safetensors_open(&st, path));
    if (!st) {
        json_decref(ex);
        return 1;
    }
    json_t *tensors = json_object_get(ex, "tensors"), *order = json_object_get(ex, "order");
    json_t *meta = json_object_get(ex, "metadata");
    EXPECT(loom_safetensors_count(st) == (int64_t)json_object_size(tensors));
    EXPECT(loom_safetensors_count(st) == (int64_t)json_array_size(order));
    for (size_t i = 0; i < json_array_size(order); i++) {
        const struct loom_safetensors_entry *e = loom_safetensors_entry_at(st, (int64_t)i);
        EXPECT(e && !strcmp(e->name, json_string_value(json_array_get(order, i))));
    }
    EXPECT(loom_safetensors_metadata_count(st) == (int64_t)json_object_size(meta));
    const char *key;
    json_t *v;
    json_object_foreach(meta, key, v) {
        const char *got = loom_safetensors_metadata_get(st, key);
        EXPECT(got && !strcmp(got, json_string_value(v)));
    }
    int checked = 0;
    json_object_foreach(tensors, key, v) {
        const struct loom_safetensors_entry *e = loom_safetensors_find(st, key);
        if (!e) {
            fprintf(stderr, "missing tensor '%s'\n", key);
            expect_failures++;
            continue;
        }
        const char *dtype = json_string_value(json_object_get(v, "dtype"));
        json_t *shape = json_object_get(v, "shape");
        EXPECT(!strcmp(e->dtype_name, dtype));
        EXPECT(e->ndim == (int)json_array_size(shape));
        int64_t shp[LOOM_SAFETENSORS_MAX_DIMS];
        for (size_t d = 0; d < json_array_size(shape) && d < LOOM_SAFETENSORS_MAX_DIMS; d++)
            shp[d] = json_integer_value(json_array_get(shape, d));
        EXPECT_OK(loom_safetensors_expect_shape(st, key, (int)json_array_size(shape), shp));
        json_t *bits = json_object_get(v, "f32_bits"), *ints = json_object_get(v, "i64");
        if (bits) {
            size_t n = json_array_size(bits);
            float *buf = malloc((n ? n : 1) * sizeof *buf);
            EXPECT_OK(loom_safetensors_read_f32(st, key, buf, (int64_t)n));
            int bad = 0;
            for (size_t i = 0; i < n; i++)
                if (f32_bits(buf[i]) != (uint32_t)json_integer_value(json_array_get(bits, i)))
                    bad++;
            if (bad) fprintf(stderr, "tensor '%s': %d of %zu values differ\n", key, bad, n);
            EXPECT(bad == 0);
            free(buf);
            checked++;
        } else if (ints) {
            size_t n = json_array_size(ints);
            EXPECT(e->dtype == LOOM_DTYPE_I64 && e->numel == (int64_t)n);
            for (size_t i = 0; i < n && e->numel == (int64_t)n; i++) {
                int64_t x;
                memcpy(&x, (const char *)e->data + 8 * i, 8);
                EXPECT(x == json_integer_value(json_array_get(ints, i)));
            }
            checked++;
        }
    }
    printf("check-python: %s: %lld tensors, %d compared value by value, %lld metadata entries\n",
           path, (long long)loom_safetensors_count(st), checked,
           (long long)loom_safetensors_metadata_count(st));
    loom_safetensors_close(st);
    json_decref(ex);
    return expect_failures ? 1 : 0;
}

int main(int argc, char **argv) {
    sample_init();
    if (argc == 3 && !strcmp(argv[1], "--write-sample")) {
        if (write_sample(argv[2]) != LOOM_OK) {
            loom_print_error();
            return 1;
        }
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "--check-python")) {
        int rc = check_python(argv[2], argv[3]);
        return expect_finish("check-python") || rc;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--write-sample FILE | --check-python FILE EXPECT.json]\n",
                argv[0]);
        return 2;
    }
    const char *base = getenv("TMPDIR");
    snprintf(g_root, sizeof g_root, "%s/loom_test_st_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_root)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_empty_file_and_tensor_api();
    test_writer_errors();
    test_conversions();
    test_malformed();
    loom_rm_rf(g_root);
    if (expect_finish("test_safetensors")) return 1;
    printf("test_safetensors: all passed\n");
    return 0;
}
