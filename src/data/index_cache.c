/* Megatron-core's dataset index cache: descriptions, their MD5, .npy files (see index_cache.h).
 *
 * The description reproduces json.dumps(..., indent=4) of Megatron's unique identifiers: a
 * GPT dataset's "class", "dataset_path", "num_samples", "index_split", then its config's
 * "random_seed", "sequence_length", "split", "split_matrix" (the bookends, the first one the
 * integer 0) and "tokenizer" ({"class": "_<--tokenizer-type>", "tokenizer_path": [files]}, as
 * Megatron's tokenizers describe themselves); a blend's "class", "datasets", "split", "weights",
 * "size". Floats are written as Python's repr() writes them (the shortest text that reads back
 * the same double), strings with json's ASCII escapes. */
#include "data/index_cache.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/fileio.h"

/* ---------------------------------------------------------------------------------------- */
/* MD5 (RFC 1321)                                                                           */

static const uint32_t md5_k[64] = {
    0xd76aa478u, 0xe8c7b756u, 0x242070dbu, 0xc1bdceeeu, 0xf57c0fafu, 0x4787c62au, 0xa8304613u,
    0xfd469501u, 0x698098d8u, 0x8b44f7afu, 0xffff5bb1u, 0x895cd7beu, 0x6b901122u, 0xfd987193u,
    0xa679438eu, 0x49b40821u, 0xf61e2562u, 0xc040b340u, 0x265e5a51u, 0xe9b6c7aau, 0xd62f105du,
    0x02441453u, 0xd8a1e681u, 0xe7d3fbc8u, 0x21e1cde6u, 0xc33707d6u, 0xf4d50d87u, 0x455a14edu,
    0xa9e3e905u, 0xfcefa3f8u, 0x676f02d9u, 0x8d2a4c8au, 0xfffa3942u, 0x8771f681u, 0x6d9d6122u,
    0xfde5380cu, 0xa4beea44u, 0x4bdecfa9u, 0xf6bb4b60u, 0xbebfbc70u, 0x289b7ec6u, 0xeaa127fau,
    0xd4ef3085u, 0x04881d05u, 0xd9d4d039u, 0xe6db99e5u, 0x1fa27cf8u, 0xc4ac5665u, 0xf4292244u,
    0x432aff97u, 0xab9423a7u, 0xfc93a039u, 0x655b59c3u, 0x8f0ccc92u, 0xffeff47du, 0x85845dd1u,
    0x6fa87e4fu, 0xfe2ce6e0u, 0xa3014314u, 0x4e0811a1u, 0xf7537e82u, 0xbd3af235u, 0x2ad7d2bbu,
    0xeb86d391u};
static const uint8_t md5_r[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                                  5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                                  4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                                  6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

static void md5_block(uint32_t h[4], const uint8_t *p) {
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
               (uint32_t)p[4 * i + 3] << 24;
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) f = (b & c) | (~b & d), g = i;
        else if (i < 32) f = (d & b) | (~d & c), g = (5 * i + 1) % 16;
        else if (i < 48) f = b ^ c ^ d, g = (3 * i + 5) % 16;
        else f = c ^ (b | ~d), g = (7 * i) % 16;
        uint32_t t = d;
        d = c;
        c = b;
        uint32_t x = a + f + md5_k[i] + m[g];
        b = b + (x << md5_r[i] | x >> (32 - md5_r[i]));
        a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d;
}

void loom_md5_hex(const void *data, size_t n, char out[33]) {
    uint32_t h[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
    const uint8_t *p = data;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) md5_block(h, p + i);
    uint8_t tail[128] = {0};
    size_t rest = n - i;
    memcpy(tail, p + i, rest);
    tail[rest] = 0x80;
    size_t tl = rest + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)n * 8u;
    for (int k = 0; k < 8; k++) tail[tl - 8 + k] = (uint8_t)(bits >> (8 * k));
    md5_block(h, tail);
    if (tl == 128) md5_block(h, tail + 64);
    for (int w = 0; w < 4; w++)
        for (int k = 0; k < 4; k++) sprintf(out + 8 * w + 2 * k, "%02x", (h[w] >> (8 * k)) & 0xffu);
    out[32] = 0;
}

/* ---------------------------------------------------------------------------------------- */
/* description text                                                                         */

struct sb {
    char *s;
    size_t n, cap;
    int oom;
};

static void sb_add(struct sb *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)k;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static void sb_indent(struct sb *b, int level) { sb_add(b, "\n%*s", 4 * level, ""); }

/* a JSON string as json.dumps (ensure_ascii) writes it */
static void sb_str(struct sb *b, const char *s) {
    if (!s) {
        sb_add(b, "null");
        return;
    }
    sb_add(b, "\"");
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        if (c == '"') sb_add(b, "\\\""), p++;
        else if (c == '\\') sb_add(b, "\\\\"), p++;
        else if (c == '\n') sb_add(b, "\\n"), p++;
        else if (c == '\r') sb_add(b, "\\r"), p++;
        else if (c == '\t') sb_add(b, "\\t"), p++;
        else if (c == '\b') sb_add(b, "\\b"), p++;
        else if (c == '\f') sb_add(b, "\\f"), p++;
        else if (c < 0x20) sb_add(b, "\\u%04x", c), p++;
        else if (c < 0x80) sb_add(b, "%c", c), p++;
        else {
            /* a UTF-8 sequence -> \uXXXX (surrogate pairs above the BMP); a stray byte as is */
            int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
            uint32_t cp = len == 4 ? c & 7u : len == 3 ? c & 15u : c & 31u;
            int ok = len > 1;
            for (int k = 1; k < len && ok; k++) {
                if ((p[k] & 0xc0) != 0x80) ok = 0;
                else cp = cp << 6 | (p[k] & 0x3fu);
            }
            if (!ok) {
                sb_add(b, "\\u%04x", c);
                p++;
                continue;
            }
            if (cp >= 0x10000) {
                cp -= 0x10000;
                sb_add(b, "\\u%04x\\u%04x", 0xd800u + (cp >> 10), 0xdc00u + (cp & 0x3ffu));
            } else {
                sb_add(b, "\\u%04x", cp);
            }
            p += len;
        }
    }
    sb_add(b, "\"");
}

/* repr() of a finite double */
static void sb_float(struct sb *b, double x) {
    char buf[40];
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    /* buf: [-]d[.ddd]e[+-]XX */
    const char *q = buf;
    int neg = *q == '-';
    if (neg) q++;
    char digits[24];
    int nd = 0;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    int e = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    sb_add(b, "%s", neg ? "-" : "");
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++) sb_add(b, "%c", i < nd ? digits[i] : '0');
            sb_add(b, ".");
            if (nd > e + 1) sb_add(b, "%s", digits + e + 1);
            else sb_add(b, "0");
        } else {
            sb_add(b, "0.%.*s%s", -e - 1, "0000", digits);
        }
    } else {
        sb_add(b, "%c", digits[0]);
        if (nd > 1) sb_add(b, ".%s", digits + 1);
        sb_add(b, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

static const char *split_label(enum loom_split w) {
    return w == LOOM_SPLIT_TRAIN ? "train" : w == LOOM_SPLIT_VALID ? "valid" : "test";
}

/* a GPT dataset's identifiers as an object at indentation `lv` */
static void sb_gpt(struct sb *b, const struct loom_index_cache_key *k, int lv) {
    sb_add(b, "{");
    sb_indent(b, lv + 1), sb_add(b, "\"class\": \"GPTDataset\",");
    sb_indent(b, lv + 1), sb_add(b, "\"dataset_path\": "), sb_str(b, k->dataset_path), sb_add(b, ",");
    sb_indent(b, lv + 1), sb_add(b, "\"num_samples\": %" PRId64 ",", k->num_samples);
    sb_indent(b, lv + 1), sb_add(b, "\"index_split\": \"%s\",", split_label(k->which));
    sb_indent(b, lv + 1), sb_add(b, "\"random_seed\": %" PRIu32 ",", k->seed);
    sb_indent(b, lv + 1), sb_add(b, "\"sequence_length\": %" PRId64 ",", k->seq_length);
    sb_indent(b, lv + 1), sb_add(b, "\"split\": "), sb_str(b, k->split), sb_add(b, ",");
    sb_indent(b, lv + 1), sb_add(b, "\"split_matrix\": ");
    double w[3];
    if (!k->split || loom_data_parse_split(k->split, w) != LOOM_OK) {
        sb_add(b, "null");
    } else {
        double c[4] = {0.0, 0.0, 0.0, 0.0};
        for (int i = 0; i < 3; i++) c[i + 1] = c[i] + w[i];
        sb_add(b, "[");
        for (int i = 0; i < 3; i++) {
            sb_indent(b, lv + 2);
            if (c[i + 1] <= c[i]) {
                sb_add(b, "null");
            } else {
                sb_add(b, "[");
                sb_indent(b, lv + 3);
                if (i == 0) sb_add(b, "0");
                else sb_float(b, c[i]);
                sb_add(b, ",");
                sb_indent(b, lv + 3);
                sb_float(b, c[i + 1]);
                sb_indent(b, lv + 2);
                sb_add(b, "]");
            }
            if (i < 2) sb_add(b, ",");
        }
        sb_indent(b, lv + 1);
        sb_add(b, "]");
    }
    sb_add(b, ",");
    sb_indent(b, lv + 1), sb_add(b, "\"tokenizer\": ");
    if (!k->tokenizer_type) {
        sb_add(b, "null");
    } else {
        sb_add(b, "{");
        sb_indent(b, lv + 2), sb_add(b, "\"class\": \"_"), sb_add(b, "%s", k->tokenizer_type);
        sb_add(b, "\",");
        sb_indent(b, lv + 2), sb_add(b, "\"tokenizer_path\": ");
        const char *files[2] = {k->vocab_file, k->merge_file};
        int nf = 0;
        for (int i = 0; i < 2; i++) nf += files[i] != NULL;
        if (!nf) {
            sb_add(b, "[]");
        } else {
            sb_add(b, "[");
            int done = 0;
            for (int i = 0; i < 2; i++) {
                if (!files[i]) continue;
                sb_indent(b, lv + 3), sb_str(b, files[i]);
                if (++done < nf) sb_add(b, ",");
            }
            sb_indent(b, lv + 2), sb_add(b, "]");
        }
        sb_indent(b, lv + 1), sb_add(b, "}");
    }
    sb_indent(b, lv), sb_add(b, "}");
}

char *loom_index_cache_description(const struct loom_index_cache_key *k) {
    struct sb b = {0};
    sb_gpt(&b, k, 0);
    if (b.oom) free(b.s);
    return b.oom ? NULL : b.s;
}

char *loom_blend_cache_description(const struct loom_blend_cache_key *k) {
    struct sb b = {0};
    sb_add(&b, "{");
    sb_indent(&b, 1), sb_add(&b, "\"class\": \"BlendedDataset\",");
    sb_indent(&b, 1), sb_add(&b, "\"datasets\": [");
    for (int i = 0; i < k->n; i++) {
        sb_indent(&b, 2);
        sb_gpt(&b, &k->datasets[i], 2);
        if (i + 1 < k->n) sb_add(&b, ",");
    }
    sb_indent(&b, 1), sb_add(&b, "],");
    sb_indent(&b, 1), sb_add(&b, "\"split\": \"%s\",", split_label(k->which));
    sb_indent(&b, 1), sb_add(&b, "\"weights\": [");
    for (int i = 0; i < k->n; i++) {
        sb_indent(&b, 2);
        sb_float(&b, k->weights[i]);
        if (i + 1 < k->n) sb_add(&b, ",");
    }
    sb_indent(&b, 1), sb_add(&b, "],");
    sb_indent(&b, 1), sb_add(&b, "\"size\": %" PRId64, k->size);
    sb_indent(&b, 0), sb_add(&b, "}");
    if (b.oom) free(b.s);
    return b.oom ? NULL : b.s;
}

/* ---------------------------------------------------------------------------------------- */
/* .npy                                                                                     */

enum loom_status loom_npy_save(const char *path, const char *descr, const int64_t *v,
                               int64_t rows, int64_t cols) {
    size_t es = strcmp(descr, "<i2") == 0 ? 2 : strcmp(descr, "<i8") == 0 ? 8 : 4;
    char hdr[256];
    int hl = cols ? snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': "
                             "(%" PRId64 ", %" PRId64 "), }", descr, rows, cols)
                  : snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': "
                             "(%" PRId64 ",), }", descr, rows);
    size_t total = 10 + (size_t)hl + 1;
    size_t pad = (64 - total % 64) % 64;
    int64_t count = rows * (cols ? cols : 1);
    size_t size = total + pad + (size_t)count * es;
    unsigned char *buf = malloc(size);
    if (!buf) return loom_fail(LOOM_ERR_OOM, "%s: out of memory", path);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    size_t hlen = (size_t)hl + pad + 1;
    buf[8] = (unsigned char)(hlen & 0xff);
    buf[9] = (unsigned char)(hlen >> 8);
    memcpy(buf + 10, hdr, (size_t)hl);
    memset(buf + 10 + hl, ' ', pad);
    buf[10 + (size_t)hl + pad] = '\n';
    unsigned char *d = buf + total + pad;
    for (int64_t i = 0; i < count; i++) {
        uint64_t x = (uint64_t)v[i];
        for (size_t k = 0; k < es; k++) d[(size_t)i * es + k] = (unsigned char)(x >> (8 * k));
    }
    enum loom_status st = loom_atomic_write_file(path, buf, size);
    free(buf);
    return st;
}

enum loom_status loom_npy_load(const char *path, int64_t **out, int64_t *rows, int64_t *cols) {
    *out = NULL;
    char *buf;
    size_t n;
    LOOM_CHECK(loom_read_file(path, (size_t)1 << 40, &buf, &n));
    enum loom_status st = LOOM_ERR_FORMAT;
    const char *why = "not a .npy file";
    size_t hlen = 0, off = 0;
    if (n < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) goto bad;
    if (buf[6] == 1) {
        hlen = (size_t)(unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8;
        off = 10;
    } else if ((buf[6] == 2 || buf[6] == 3) && n >= 12) {
        hlen = (size_t)(unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8 |
               (size_t)(unsigned char)buf[10] << 16 | (size_t)(unsigned char)buf[11] << 24;
        off = 12;
    } else {
        goto bad;
    }
    if (hlen > n - off || hlen > 4096) goto bad;
    char hdr[4097];
    memcpy(hdr, buf + off, hlen);
    hdr[hlen] = 0;
    off += hlen;
    why = "unsupported header (want a C-order little-endian integer array of 1 or 2 dimensions)";
    const char *p = strstr(hdr, "'descr':");
    if (!p || !strstr(hdr, "'fortran_order': False")) goto bad;
    p = strchr(p + 8, '\'');
    if (!p) goto bad;
    char descr[8] = {0};
    const char *q = strchr(p + 1, '\'');
    if (!q || q - p - 1 >= (long)sizeof descr) goto bad;
    memcpy(descr, p + 1, (size_t)(q - p - 1));
    size_t es;
    int sign;
    if (descr[0] != '<' && descr[0] != '|') goto bad;
    if (descr[1] == 'i') sign = 1;
    else if (descr[1] == 'u') sign = 0;
    else goto bad;
    es = (size_t)atoi(descr + 2);
    if (es != 1 && es != 2 && es != 4 && es != 8) goto bad;
    p = strstr(hdr, "'shape':");
    if (!p || !(p = strchr(p, '('))) goto bad;
    char *e;
    errno = 0;
    long long r = strtoll(p + 1, &e, 10), c = 0;
    if (errno || e == p + 1 || r < 0) goto bad;
    while (*e == ' ') e++;
    if (*e != ',') goto bad;
    e++;
    while (*e == ' ') e++;
    if (*e != ')') {
        const char *s2 = e;
        errno = 0;
        c = strtoll(s2, &e, 10);
        if (errno || e == s2 || c < 1) goto bad;
        while (*e == ' ' || *e == ',') e++;
        if (*e != ')') goto bad;
    }
    why = "its data size does not match its shape";
    /* the shape's element count, compared with the data's without forming a product that could
     * overflow */
    const uint64_t have = (uint64_t)(n - off);
    if (have % es) goto bad;
    const uint64_t elems = have / es, per_row = c ? (uint64_t)c : 1;
    if ((uint64_t)r > elems / per_row || (uint64_t)r * per_row != elems) goto bad;
    int64_t count = (int64_t)elems;
    int64_t *v = malloc((size_t)(count > 0 ? count : 1) * sizeof *v);
    if (!v) {
        free(buf);
        return loom_fail(LOOM_ERR_OOM, "%s: out of memory", path);
    }
    const unsigned char *d = (const unsigned char *)buf + off;
    for (int64_t i = 0; i < count; i++) {
        uint64_t x = 0;
        for (size_t k = 0; k < es; k++) x |= (uint64_t)d[(size_t)i * es + k] << (8 * k);
        if (sign && es < 8 && (x >> (8 * es - 1)) & 1u) x |= ~(uint64_t)0 << (8 * es);
        if (!sign && es == 8 && x > (uint64_t)INT64_MAX) {
            free(v);
            why = "a value beyond int64";
            goto bad;
        }
        v[i] = (int64_t)x;
    }
    free(buf);
    *out = v;
    *rows = r;
    *cols = c;
    return LOOM_OK;
bad:
    free(buf);
    return loom_fail(st, "%s: %s", path, why);
}

/* ---------------------------------------------------------------------------------------- */
/* cache entries                                                                            */

/* CACHE/<md5>-<cls>-<split>- prefix of an entry's files, and its description */
static enum loom_status entry_base(const char *cache, const char *desc, const char *cls,
                                   enum loom_split which, char *base, size_t cap) {
    char h[33];
    loom_md5_hex(desc, strlen(desc), h);
    int k = snprintf(base, cap, "%s/%s-%s-%s-", cache, h, cls, split_label(which));
    if (k < 0 || (size_t)k >= cap - 32)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--data-cache-path %s: path too long", cache);
    return LOOM_OK;
}

/* LOOM_OK when base+"description.txt" holds exactly desc */
static enum loom_status description_matches(const char *base, const char *desc) {
    char path[4200];
    snprintf(path, sizeof path, "%sdescription.txt", base);
    char *text;
    size_t n;
    if (loom_read_file(path, (size_t)1 << 24, &text, &n) != LOOM_OK)
        return loom_fail(LOOM_ERR_IO, "%s: no cache entry", path);
    int same = n == strlen(desc) && memcmp(text, desc, n) == 0;
    free(text);
    return same ? LOOM_OK : loom_fail(LOOM_ERR_FORMAT, "%s: another request's description", path);
}

static enum loom_status load_array(const char *base, const char *name, int64_t **v, int64_t *rows,
                                   int64_t want_cols) {
    char path[4200];
    snprintf(path, sizeof path, "%s%s", base, name);
    int64_t cols;
    LOOM_CHECK(loom_npy_load(path, v, rows, &cols));
    if (cols != want_cols) {
        free(*v);
        *v = NULL;
        return loom_fail(LOOM_ERR_FORMAT, "%s: %lld columns, expected %lld", path,
                         (long long)cols, (long long)want_cols);
    }
    return LOOM_OK;
}

static enum loom_status save_array(const char *base, const char *name, const char *descr,
                                   const int64_t *v, int64_t rows, int64_t cols) {
    char path[4200];
    snprintf(path, sizeof path, "%s%s", base, name);
    return loom_npy_save(path, descr, v, rows, cols);
}

static enum loom_status save_description(const char *cache, const char *base, const char *desc) {
    char path[4200];
    snprintf(path, sizeof path, "%sdescription.txt", base);
    (void)cache;
    return loom_atomic_write_file(path, desc, strlen(desc));
}

enum loom_status loom_index_cache_load(const struct loom_index_cache_key *k, int32_t **doc,
                                       int64_t *ndoc, int64_t **sample, int64_t *nsample,
                                       int64_t **shuffle, int64_t *nshuffle) {
    *doc = NULL, *sample = NULL, *shuffle = NULL;
    char *desc = loom_index_cache_description(k);
    if (!desc) return loom_fail(LOOM_ERR_OOM, "out of memory");
    char base[4096];
    enum loom_status st = entry_base(k->cache_path, desc, "GPTDataset", k->which, base, sizeof base);
    if (st == LOOM_OK) st = description_matches(base, desc);
    free(desc);
    int64_t *d64 = NULL;
    if (st == LOOM_OK) st = load_array(base, "document_index.npy", &d64, ndoc, 0);
    if (st == LOOM_OK) st = load_array(base, "sample_index.npy", sample, nsample, 2);
    if (st == LOOM_OK) st = load_array(base, "shuffle_index.npy", shuffle, nshuffle, 0);
    if (st == LOOM_OK) {
        *doc = malloc((size_t)(*ndoc > 0 ? *ndoc : 1) * sizeof **doc);
        if (!*doc) st = loom_fail(LOOM_ERR_OOM, "out of memory");
        for (int64_t i = 0; st == LOOM_OK && i < *ndoc; i++) {
            if (d64[i] < INT32_MIN || d64[i] > INT32_MAX)
                st = loom_fail(LOOM_ERR_FORMAT, "%sdocument_index.npy: value out of range", base);
            else (*doc)[i] = (int32_t)d64[i];
        }
    }
    free(d64);
    if (st != LOOM_OK) {
        free(*doc), free(*sample), free(*shuffle);
        *doc = NULL, *sample = NULL, *shuffle = NULL;
    }
    return st;
}

enum loom_status loom_index_cache_save(const struct loom_index_cache_key *k, const int32_t *doc,
                                       int64_t ndoc, const int64_t *sample, int64_t num_samples,
                                       const int64_t *shuffle) {
    LOOM_CHECK(loom_mkdir_p(k->cache_path));
    char *desc = loom_index_cache_description(k);
    if (!desc) return loom_fail(LOOM_ERR_OOM, "out of memory");
    char base[4096];
    enum loom_status st = entry_base(k->cache_path, desc, "GPTDataset", k->which, base, sizeof base);
    int64_t *d64 = malloc((size_t)(ndoc > 0 ? ndoc : 1) * sizeof *d64);
    if (!d64 && st == LOOM_OK) st = loom_fail(LOOM_ERR_OOM, "out of memory");
    int fits32 = 1;
    for (int64_t i = 0; st == LOOM_OK && i < 2 * (num_samples + 1); i++)
        fits32 = fits32 && sample[i] <= INT32_MAX;
    if (st == LOOM_OK) {
        for (int64_t i = 0; i < ndoc; i++) d64[i] = doc[i];
        st = save_array(base, "document_index.npy", "<i4", d64, ndoc, 0);
    }
    if (st == LOOM_OK)
        st = save_array(base, "sample_index.npy", fits32 ? "<i4" : "<i8", sample,
                        num_samples + 1, 2);
    if (st == LOOM_OK)
        st = save_array(base, "shuffle_index.npy", num_samples >= 4294967294LL ? "<i8" : "<u4",
                        shuffle, num_samples, 0);
    if (st == LOOM_OK) st = save_description(k->cache_path, base, desc);
    free(d64);
    free(desc);
    return st;
}

enum loom_status loom_blend_cache_load(const struct loom_blend_cache_key *k, int64_t **source,
                                       int64_t **sample, int64_t *n) {
    *source = NULL, *sample = NULL;
    char *desc = loom_blend_cache_description(k);
    if (!desc) return loom_fail(LOOM_ERR_OOM, "out of memory");
    char base[4096];
    enum loom_status st =
        entry_base(k->cache_path, desc, "BlendedDataset", k->which, base, sizeof base);
    if (st == LOOM_OK) st = description_matches(base, desc);
    free(desc);
    int64_t n2 = 0;
    if (st == LOOM_OK) st = load_array(base, "dataset_index.npy", source, n, 0);
    if (st == LOOM_OK) st = load_array(base, "dataset_sample_index.npy", sample, &n2, 0);
    if (st == LOOM_OK && n2 != *n)
        st = loom_fail(LOOM_ERR_FORMAT, "%s: index lengths differ", base);
    if (st != LOOM_OK) {
        free(*source), free(*sample);
        *source = NULL, *sample = NULL;
    }
    return st;
}

enum loom_status loom_blend_cache_save(const struct loom_blend_cache_key *k,
                                       const int64_t *source, const int64_t *sample) {
    LOOM_CHECK(loom_mkdir_p(k->cache_path));
    char *desc = loom_blend_cache_description(k);
    if (!desc) return loom_fail(LOOM_ERR_OOM, "out of memory");
    char base[4096];
    enum loom_status st =
        entry_base(k->cache_path, desc, "BlendedDataset", k->which, base, sizeof base);
    if (st == LOOM_OK) st = save_array(base, "dataset_index.npy", "<i2", source, k->size, 0);
    if (st == LOOM_OK)
        st = save_array(base, "dataset_sample_index.npy", "<i8", sample, k->size, 0);
    if (st == LOOM_OK) st = save_description(k->cache_path, base, desc);
    free(desc);
    return st;
}
