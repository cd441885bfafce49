/* Megatron indexed dataset: memory-mapped reader and crash-safe writer.
 *
 * Layout (FORMATS.md): .idx = magic "MMIDIDX\0\0", u64 version 1, u8 dtype code, u64 S, u64 D,
 * i32 lengths[S], i64 byte offsets[S], i64 document index[D], optionally i8 modes[S]; .bin =
 * the token arrays back to back. Everything little-endian and unaligned, so every multi-byte
 * value is assembled byte by byte (no pointer casts, no host-endianness assumption).
 */
#include "loom/data.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define IDX_HEADER 34
static const uint8_t k_magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

/* ---------------------------------------------------------------------------------------- */
/* little-endian helpers                                                                    */

static inline uint64_t ld_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline int64_t ld_i64(const uint8_t *p) { return (int64_t)ld_u64(p); }
static inline int32_t ld_i32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}
static inline void st_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void st_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

size_t loom_idx_dtype_size(int code) {
    switch (code) {
    case LOOM_IDX_DTYPE_U8: case LOOM_IDX_DTYPE_I8: return 1;
    case LOOM_IDX_DTYPE_I16: case LOOM_IDX_DTYPE_U16: return 2;
    case LOOM_IDX_DTYPE_I32: case LOOM_IDX_DTYPE_F32: return 4;
    case LOOM_IDX_DTYPE_I64: case LOOM_IDX_DTYPE_F64: return 8;
    default: return 0;
    }
}

const char *loom_idx_dtype_name(int code) {
    switch (code) {
    case LOOM_IDX_DTYPE_U8: return "u8";
    case LOOM_IDX_DTYPE_I8: return "i8";
    case LOOM_IDX_DTYPE_I16: return "i16";
    case LOOM_IDX_DTYPE_I32: return "i32";
    case LOOM_IDX_DTYPE_I64: return "i64";
    case LOOM_IDX_DTYPE_F64: return "f64";
    case LOOM_IDX_DTYPE_F32: return "f32";
    case LOOM_IDX_DTYPE_U16: return "u16";
    default: return "?";
    }
}

enum loom_idx_dtype loom_idx_dtype_for_vocab(int64_t vocab_size) {
    return vocab_size < 65500 ? LOOM_IDX_DTYPE_U16 : LOOM_IDX_DTYPE_I32;
}

static int dtype_is_int(int code) {
    return loom_idx_dtype_size(code) && code != LOOM_IDX_DTYPE_F32 && code != LOOM_IDX_DTYPE_F64;
}

/* Element i of a token array of dtype `code` (integers only), as int64. */
static inline int64_t load_elem(const uint8_t *p, int code) {
    switch (code) {
    case LOOM_IDX_DTYPE_U8: return p[0];
    case LOOM_IDX_DTYPE_I8: return (int8_t)p[0];
    case LOOM_IDX_DTYPE_I16: return (int16_t)(uint16_t)(p[0] | p[1] << 8);
    case LOOM_IDX_DTYPE_U16: return (uint16_t)(p[0] | p[1] << 8);
    case LOOM_IDX_DTYPE_I32: return ld_i32(p);
    default: return ld_i64(p);
    }
}

static char *str_cat(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (!s) return NULL;
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

/* ---------------------------------------------------------------------------------------- */
/* reader                                                                                   */

struct loom_indexed {
    char *prefix;
    char *idx_path;
    char *bin_path;
    uint8_t *idx_map;
    size_t idx_size;
    uint8_t *bin_map; /* NULL when the .bin is empty */
    size_t bin_size;
    int dtype;
    size_t itemsize;
    int64_t S, D;
    const uint8_t *lens, *offs, *docs, *modes;
    int64_t ntokens;
};

/* Map `path` read-only. An empty file gives map NULL, size 0. */
static enum loom_status map_file(const char *path, uint8_t **map, size_t *size) {
    *map = NULL;
    *size = 0;
    /* O_NONBLOCK: a FIFO is refused below instead of waiting for a writer */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return loom_fail(LOOM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return loom_fail(LOOM_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return loom_fail(LOOM_ERR_IO, "cannot read %s: not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return loom_fail(LOOM_ERR_IO, "%s: cannot map: %s", path, strerror(e));
        }
        *map = p;
        *size = (size_t)st.st_size;
    }
    close(fd);
    return LOOM_OK;
}

void loom_indexed_free(struct loom_indexed *ds) {
    if (!ds) return;
    if (ds->idx_map) munmap(ds->idx_map, ds->idx_size);
    if (ds->bin_map) munmap(ds->bin_map, ds->bin_size);
    free(ds->prefix);
    free(ds->idx_path);
    free(ds->bin_path);
    free(ds);
}

/* Everything about the .idx that can be checked: header, size, lengths, offsets, doc index. */
static enum loom_status validate_idx(struct loom_indexed *ds) {
    const char *p = ds->idx_path;
    const uint8_t *m = ds->idx_map;
    size_t size = ds->idx_size;
    if (size < IDX_HEADER)
        return loom_fail(LOOM_ERR_FORMAT, "%s: truncated .idx: %zu bytes, shorter than the "
                         "%d-byte header", p, size, IDX_HEADER);
    if (memcmp(m, k_magic, sizeof k_magic) != 0)
        return loom_fail(LOOM_ERR_FORMAT, "%s: bad magic: not a Megatron indexed dataset index "
                         "(expected \"MMIDIDX\\0\\0\")", p);
    uint64_t version = ld_u64(m + 9);
    if (version != 1)
        return loom_fail(LOOM_ERR_FORMAT, "%s: unsupported version %llu (expected 1)", p,
                         (unsigned long long)version);
    int code = m[17];
    if (!loom_idx_dtype_size(code))
        return loom_fail(LOOM_ERR_FORMAT, "%s: bad dtype code %d (valid: 1 u8, 2 i8, 3 i16, "
                         "4 i32, 5 i64, 6 f64, 7 f32, 8 u16)", p, code);
    uint64_t S = ld_u64(m + 18), D = ld_u64(m + 26);
    const uint64_t lim = (uint64_t)1 << 58; /* keeps the size arithmetic below from overflowing */
    uint64_t rest = size - IDX_HEADER;
    if (S >= lim || D >= lim)
        return loom_fail(LOOM_ERR_FORMAT, "%s: truncated .idx: %zu bytes, but its header "
                         "counts S=%llu sequences and D=%llu document-index entries, far more "
                         "than fit", p, size, (unsigned long long)S, (unsigned long long)D);
    if (12 * S + 8 * D > rest)
        return loom_fail(LOOM_ERR_FORMAT, "%s: truncated .idx: %zu bytes, but its header "
                         "(S=%llu sequences, D=%llu document-index entries) needs %llu", p, size,
                         (unsigned long long)S, (unsigned long long)D,
                         (unsigned long long)(IDX_HEADER + 12 * S + 8 * D));
    uint64_t need = 12 * S + 8 * D;
    int has_modes;
    if (rest == need) has_modes = 0;
    else if (rest == need + S && S > 0) has_modes = 1;
    else
        return loom_fail(LOOM_ERR_FORMAT, "%s: size mismatch: %zu bytes, but S=%llu sequences "
                         "and D=%llu document-index entries make %llu bytes (or %llu with the "
                         "modes array)", p, size, (unsigned long long)S, (unsigned long long)D,
                         (unsigned long long)(IDX_HEADER + need),
                         (unsigned long long)(IDX_HEADER + need + S));
    if (D == 0)
        return loom_fail(LOOM_ERR_FORMAT, "%s: empty document index (D=0; it must hold at least "
                         "the entry 0)", p);
    ds->dtype = code;
    ds->itemsize = loom_idx_dtype_size(code);
    ds->S = (int64_t)S;
    ds->D = (int64_t)D;
    ds->lens = m + IDX_HEADER;
    ds->offs = ds->lens + 4 * S;
    ds->docs = ds->offs + 8 * S;
    ds->modes = has_modes ? ds->docs + 8 * D : NULL;

    /* offsets must be the running sum of lengths times the item size */
    uint64_t expect = 0;
    const uint64_t max_bytes = (uint64_t)1 << 62;
    for (int64_t i = 0; i < ds->S; i++) {
        int32_t len = ld_i32(ds->lens + 4 * i);
        int64_t off = ld_i64(ds->offs + 8 * i);
        if (len < 0)
            return loom_fail(LOOM_ERR_FORMAT, "%s: sequence %lld has a negative length %d", p,
                             (long long)i, (int)len);
        if ((uint64_t)off != expect || off < 0)
            return loom_fail(LOOM_ERR_FORMAT, "%s: offset of sequence %lld is %lld, but the "
                             "lengths before it give %llu (sum of lengths x %zu bytes)", p,
                             (long long)i, (long long)off, (unsigned long long)expect,
                             ds->itemsize);
        expect += (uint64_t)len * ds->itemsize;
        if (expect > max_bytes)
            return loom_fail(LOOM_ERR_FORMAT, "%s: sequence lengths add up to an implausible "
                             "size (over 2^62 bytes)", p);
    }
    ds->ntokens = (int64_t)(expect / ds->itemsize);

    int64_t first = ld_i64(ds->docs);
    if (first != 0)
        return loom_fail(LOOM_ERR_FORMAT, "%s: document index starts at %lld, expected 0", p,
                         (long long)first);
    int64_t prev = 0;
    for (int64_t k = 1; k < ds->D; k++) {
        int64_t v = ld_i64(ds->docs + 8 * k);
        if (v < prev)
            return loom_fail(LOOM_ERR_FORMAT, "%s: document index decreases at entry %lld (%lld "
                             "after %lld)", p, (long long)k, (long long)v, (long long)prev);
        if (v > ds->S)
            return loom_fail(LOOM_ERR_FORMAT, "%s: document index entry %lld is %lld, beyond "
                             "the S=%lld sequences", p, (long long)k, (long long)v,
                             (long long)ds->S);
        prev = v;
    }
    if (prev != ds->S)
        return loom_fail(LOOM_ERR_FORMAT, "%s: document index ends at %lld, expected S=%lld "
                         "(every sequence must belong to a document)", p, (long long)prev,
                         (long long)ds->S);
    return LOOM_OK;
}

enum loom_status loom_indexed_open(struct loom_indexed **out, const char *prefix) {
    *out = NULL;
    if (!prefix || !*prefix)
        return loom_fail(LOOM_ERR_INVALID_ARG, "indexed dataset: empty path prefix");
    struct loom_indexed *ds = calloc(1, sizeof *ds);
    if (!ds) return loom_fail(LOOM_ERR_OOM, "%s: out of memory", prefix);
    ds->prefix = strdup(prefix);
    ds->idx_path = str_cat(prefix, ".idx");
    ds->bin_path = str_cat(prefix, ".bin");
    enum loom_status s = LOOM_OK;
    if (!ds->prefix || !ds->idx_path || !ds->bin_path) {
        s = loom_fail(LOOM_ERR_OOM, "%s: out of memory", prefix);
        goto fail;
    }
    if ((s = map_file(ds->idx_path, &ds->idx_map, &ds->idx_size)) != LOOM_OK) goto fail;
    if ((s = validate_idx(ds)) != LOOM_OK) goto fail;
    if ((s = map_file(ds->bin_path, &ds->bin_map, &ds->bin_size)) != LOOM_OK) goto fail;
    uint64_t want = (uint64_t)ds->ntokens * ds->itemsize;
    if ((uint64_t)ds->bin_size != want) {
        s = loom_fail(LOOM_ERR_FORMAT, "%s: %s: %zu bytes, but %s says %lld tokens x %zu bytes "
                      "= %llu bytes", ds->bin_path,
                      (uint64_t)ds->bin_size < want ? "truncated .bin" : "size mismatch",
                      ds->bin_size, ds->idx_path, (long long)ds->ntokens, ds->itemsize,
                      (unsigned long long)want);
        goto fail;
    }
    *out = ds;
    return LOOM_OK;
fail:
    loom_indexed_free(ds);
    return s;
}

const char *loom_indexed_prefix(const struct loom_indexed *ds) { return ds->prefix; }
enum loom_idx_dtype loom_indexed_dtype(const struct loom_indexed *ds) { return ds->dtype; }
int64_t loom_indexed_num_sequences(const struct loom_indexed *ds) { return ds->S; }
int64_t loom_indexed_num_documents(const struct loom_indexed *ds) { return ds->D - 1; }
int64_t loom_indexed_num_tokens(const struct loom_indexed *ds) { return ds->ntokens; }
int loom_indexed_has_modes(const struct loom_indexed *ds) { return ds->modes != NULL; }

int64_t loom_indexed_sequence_length(const struct loom_indexed *ds, int64_t i) {
    LOOM_ASSERT(i >= 0 && i < ds->S);
    return ld_i32(ds->lens + 4 * i);
}

int64_t loom_indexed_doc_index(const struct loom_indexed *ds, int64_t k) {
    LOOM_ASSERT(k >= 0 && k < ds->D);
    return ld_i64(ds->docs + 8 * k);
}

int loom_indexed_mode(const struct loom_indexed *ds, int64_t i) {
    LOOM_ASSERT(i >= 0 && i < ds->S);
    return ds->modes ? (int8_t)ds->modes[i] : 0;
}

enum loom_status loom_indexed_get(const struct loom_indexed *ds, int64_t i, const void **data,
                                  int64_t *len) {
    if (i < 0 || i >= ds->S)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: sequence %lld out of range [0, %lld)",
                         ds->prefix, (long long)i, (long long)ds->S);
    *len = ld_i32(ds->lens + 4 * i);
    *data = ds->bin_map ? ds->bin_map + ld_i64(ds->offs + 8 * i) : (const void *)"";
    return LOOM_OK;
}

enum loom_status loom_indexed_read(const struct loom_indexed *ds, int64_t i, int64_t offset,
                                   int64_t count, int32_t *out) {
    if (i < 0 || i >= ds->S)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: sequence %lld out of range [0, %lld)",
                         ds->prefix, (long long)i, (long long)ds->S);
    int64_t len = ld_i32(ds->lens + 4 * i);
    if (offset < 0 || count < 0 || offset > len || count > len - offset)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: tokens [%lld, %lld) of sequence %lld out of "
                         "range (length %lld)", ds->prefix, (long long)offset,
                         (long long)(offset + count), (long long)i, (long long)len);
    if (!dtype_is_int(ds->dtype))
        return loom_fail(LOOM_ERR_FORMAT, "%s: dtype %s holds no token ids (integer dtype "
                         "expected)", ds->idx_path, loom_idx_dtype_name(ds->dtype));
    if (count == 0) return LOOM_OK;
    const uint8_t *p = ds->bin_map + ld_i64(ds->offs + 8 * i) + (size_t)offset * ds->itemsize;
    switch (ds->dtype) {
    case LOOM_IDX_DTYPE_U16:
        for (int64_t t = 0; t < count; t++) out[t] = (int32_t)(p[2 * t] | p[2 * t + 1] << 8);
        return LOOM_OK;
    case LOOM_IDX_DTYPE_I32:
        for (int64_t t = 0; t < count; t++) out[t] = ld_i32(p + 4 * t);
        return LOOM_OK;
    default:
        for (int64_t t = 0; t < count; t++) {
            int64_t v = load_elem(p + (size_t)t * ds->itemsize, ds->dtype);
            if (v < INT32_MIN || v > INT32_MAX)
                return loom_fail(LOOM_ERR_FORMAT, "%s: token %lld of sequence %lld is %lld, "
                                 "outside the int32 range", ds->bin_path,
                                 (long long)(offset + t), (long long)i, (long long)v);
            out[t] = (int32_t)v;
        }
        return LOOM_OK;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* writer                                                                                   */

#define WBUF_CAP (1u << 20)

struct wfile {
    int fd;
    char *tmp;        /* temporary path */
    const char *dest; /* final path (owned by the builder) */
    uint8_t *buf;
    size_t len;
};

struct loom_indexed_builder {
    char *bin_dest, *idx_dest;
    struct wfile bin, idx;
    int dtype;
    size_t itemsize;
    int32_t *lens;
    int64_t nseq, cap_seq;
    int64_t *docs;
    int64_t ndoc, cap_doc;
    int64_t ntokens;
    int flushed, finished;
    enum loom_status sticky; /* first failure; every later call returns it */
};

static atomic_uint g_tmp_counter;

/* Create a fresh temporary "DEST.tmp.<pid>.<n>" next to DEST. */
static enum loom_status wfile_open(struct wfile *w, const char *dest) {
    w->fd = -1;
    w->dest = dest;
    w->len = 0;
    w->buf = malloc(WBUF_CAP);
    size_t n = strlen(dest) + 64;
    w->tmp = malloc(n);
    if (!w->buf || !w->tmp) return loom_fail(LOOM_ERR_OOM, "%s: out of memory", dest);
    for (int tries = 0; tries < 1000; tries++) {
        snprintf(w->tmp, n, "%s.tmp.%ld.%u", dest, (long)getpid(),
                 atomic_fetch_add(&g_tmp_counter, 1u));
        w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (w->fd >= 0) return LOOM_OK;
        if (errno != EEXIST) break;
    }
    enum loom_status s = loom_fail(LOOM_ERR_IO, "%s: cannot create temporary %s: %s", dest,
                                   w->tmp, strerror(errno));
    free(w->tmp);
    w->tmp = NULL;
    return s;
}

static enum loom_status write_all(struct wfile *w, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return loom_fail(LOOM_ERR_IO, "%s: write to %s failed: %s", w->dest, w->tmp,
                             strerror(errno));
        }
        p += k;
        n -= (size_t)k;
    }
    return LOOM_OK;
}

static enum loom_status wfile_drain(struct wfile *w) {
    LOOM_CHECK(write_all(w, w->buf, w->len));
    w->len = 0;
    return LOOM_OK;
}

/* Reserve n (<= 64) bytes in the buffer. */
static enum loom_status wfile_reserve(struct wfile *w, size_t n, uint8_t **p) {
    if (w->len + n > WBUF_CAP) LOOM_CHECK(wfile_drain(w));
    *p = w->buf + w->len;
    w->len += n;
    return LOOM_OK;
}

/* Drain, fsync and close. */
static enum loom_status wfile_sync_close(struct wfile *w) {
    LOOM_CHECK(wfile_drain(w));
    if (fsync(w->fd) != 0)
        return loom_fail(LOOM_ERR_IO, "%s: fsync of %s failed: %s", w->dest, w->tmp,
                         strerror(errno));
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0)
        return loom_fail(LOOM_ERR_IO, "%s: close of %s failed: %s", w->dest, w->tmp,
                         strerror(errno));
    return LOOM_OK;
}

static void wfile_discard(struct wfile *w) {
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
    if (w->tmp) unlink(w->tmp);
    free(w->tmp);
    w->tmp = NULL;
    free(w->buf);
    w->buf = NULL;
}

enum loom_status loom_indexed_builder_init(struct loom_indexed_builder **out, const char *prefix,
                                           enum loom_idx_dtype dtype) {
    *out = NULL;
    if (!dtype_is_int((int)dtype))
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: cannot write dtype code %d (token datasets "
                         "use an integer dtype: u8, i8, i16, u16, i32, i64)", prefix, (int)dtype);
    struct loom_indexed_builder *b = calloc(1, sizeof *b);
    if (!b) return loom_fail(LOOM_ERR_OOM, "%s: out of memory", prefix);
    b->bin.fd = b->idx.fd = -1;
    b->dtype = (int)dtype;
    b->itemsize = loom_idx_dtype_size((int)dtype);
    b->bin_dest = str_cat(prefix, ".bin");
    b->idx_dest = str_cat(prefix, ".idx");
    b->cap_doc = 64;
    b->docs = malloc((size_t)b->cap_doc * sizeof *b->docs);
    enum loom_status s;
    if (!b->bin_dest || !b->idx_dest || !b->docs) {
        s = loom_fail(LOOM_ERR_OOM, "%s: out of memory", prefix);
        goto fail;
    }
    b->docs[0] = 0;
    b->ndoc = 1;
    if ((s = wfile_open(&b->bin, b->bin_dest)) != LOOM_OK) goto fail;
    if ((s = wfile_open(&b->idx, b->idx_dest)) != LOOM_OK) goto fail;
    *out = b;
    return LOOM_OK;
fail:
    loom_indexed_builder_free(b);
    return s;
}

static enum loom_status builder_usable(struct loom_indexed_builder *b) {
    if (b->sticky) return b->sticky;
    if (b->flushed)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: builder already flushed; no more data",
                         b->bin_dest);
    return LOOM_OK;
}

static enum loom_status sticky(struct loom_indexed_builder *b, enum loom_status s) {
    if (s != LOOM_OK && !b->sticky) b->sticky = s;
    return s;
}

enum loom_status loom_indexed_builder_add_sequence(struct loom_indexed_builder *b,
                                                   const int32_t *tokens, int64_t n) {
    LOOM_CHECK(builder_usable(b));
    if (n < 0 || n > INT32_MAX)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: sequence length %lld out of range", b->bin_dest,
                         (long long)n);
    /* range check first, so that a rejected sequence writes nothing */
    int64_t lo, hi;
    switch (b->dtype) {
    case LOOM_IDX_DTYPE_U8: lo = 0; hi = UINT8_MAX; break;
    case LOOM_IDX_DTYPE_I8: lo = INT8_MIN; hi = INT8_MAX; break;
    case LOOM_IDX_DTYPE_I16: lo = INT16_MIN; hi = INT16_MAX; break;
    case LOOM_IDX_DTYPE_U16: lo = 0; hi = UINT16_MAX; break;
    default: lo = INT32_MIN; hi = INT32_MAX; break;
    }
    for (int64_t t = 0; t < n; t++)
        if (tokens[t] < lo || tokens[t] > hi)
            return loom_fail(LOOM_ERR_INVALID_ARG, "%s: token id %d does not fit dtype %s",
                             b->bin_dest, (int)tokens[t], loom_idx_dtype_name(b->dtype));
    if (b->nseq == b->cap_seq) {
        int64_t cap = b->cap_seq ? 2 * b->cap_seq : 1024;
        int32_t *p = realloc(b->lens, (size_t)cap * sizeof *p);
        if (!p) return sticky(b, loom_fail(LOOM_ERR_OOM, "%s: out of memory", b->bin_dest));
        b->lens = p;
        b->cap_seq = cap;
    }
    /* encode little-endian, up to 64 bytes at a time */
    enum loom_status s = LOOM_OK;
    const int64_t isz = (int64_t)b->itemsize, per = 64 / isz;
    for (int64_t t = 0; t < n && s == LOOM_OK;) {
        int64_t m = n - t < per ? n - t : per;
        uint8_t *p;
        if ((s = wfile_reserve(&b->bin, (size_t)(m * isz), &p)) != LOOM_OK) break;
        for (int64_t u = 0; u < m; u++) {
            uint64_t v = (uint64_t)(int64_t)tokens[t + u];
            for (int64_t k = 0; k < isz; k++) p[u * isz + k] = (uint8_t)(v >> (8 * k));
        }
        t += m;
    }
    if (s != LOOM_OK) return sticky(b, s);
    b->lens[b->nseq++] = (int32_t)n;
    b->ntokens += n;
    return LOOM_OK;
}

enum loom_status loom_indexed_builder_end_document(struct loom_indexed_builder *b) {
    LOOM_CHECK(builder_usable(b));
    if (b->ndoc == b->cap_doc) {
        int64_t cap = 2 * b->cap_doc;
        int64_t *p = realloc(b->docs, (size_t)cap * sizeof *p);
        if (!p) return sticky(b, loom_fail(LOOM_ERR_OOM, "%s: out of memory", b->idx_dest));
        b->docs = p;
        b->cap_doc = cap;
    }
    b->docs[b->ndoc++] = b->nseq;
    return LOOM_OK;
}

enum loom_status loom_indexed_builder_add_document(struct loom_indexed_builder *b,
                                                   const int32_t *tokens, int64_t n) {
    LOOM_CHECK(loom_indexed_builder_add_sequence(b, tokens, n));
    return loom_indexed_builder_end_document(b);
}

int64_t loom_indexed_builder_num_sequences(const struct loom_indexed_builder *b) {
    return b->nseq;
}
int64_t loom_indexed_builder_num_tokens(const struct loom_indexed_builder *b) {
    return b->ntokens;
}

static enum loom_status write_index(struct loom_indexed_builder *b) {
    struct wfile *w = &b->idx;
    uint8_t *p;
    LOOM_CHECK(wfile_reserve(w, IDX_HEADER, &p));
    memcpy(p, k_magic, 9);
    st_u64(p + 9, 1);
    p[17] = (uint8_t)b->dtype;
    st_u64(p + 18, (uint64_t)b->nseq);
    st_u64(p + 26, (uint64_t)b->ndoc);
    for (int64_t i = 0; i < b->nseq; i++) {
        LOOM_CHECK(wfile_reserve(w, 4, &p));
        st_u32(p, (uint32_t)b->lens[i]);
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < b->nseq; i++) {
        LOOM_CHECK(wfile_reserve(w, 8, &p));
        st_u64(p, off);
        off += (uint64_t)b->lens[i] * b->itemsize;
    }
    for (int64_t k = 0; k < b->ndoc; k++) {
        LOOM_CHECK(wfile_reserve(w, 8, &p));
        st_u64(p, (uint64_t)b->docs[k]);
    }
    return LOOM_OK;
}

enum loom_status loom_indexed_builder_flush(struct loom_indexed_builder *b) {
    if (b->sticky) return b->sticky;
    if (b->flushed) return LOOM_OK;
    if (b->docs[b->ndoc - 1] != b->nseq) LOOM_CHECK(loom_indexed_builder_end_document(b));
    enum loom_status s = write_index(b);
    if (s == LOOM_OK) s = wfile_sync_close(&b->bin);
    if (s == LOOM_OK) s = wfile_sync_close(&b->idx);
    if (s != LOOM_OK) return sticky(b, s);
    b->flushed = 1;
    return LOOM_OK;
}

static enum loom_status fsync_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return loom_fail(LOOM_ERR_OOM, "out of memory");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    enum loom_status s = LOOM_OK;
    if (fd < 0) {
        s = loom_fail(LOOM_ERR_IO, "%s: cannot open directory for fsync: %s", dir,
                      strerror(errno));
    } else {
        if (fsync(fd) != 0 && errno != EINVAL)
            s = loom_fail(LOOM_ERR_IO, "%s: directory fsync failed: %s", dir, strerror(errno));
        close(fd);
    }
    free(dir);
    return s;
}

enum loom_status loom_indexed_builder_finish(struct loom_indexed_builder *b) {
    LOOM_CHECK(loom_indexed_builder_flush(b));
    if (b->finished) return LOOM_OK;
    if (rename(b->bin.tmp, b->bin_dest) != 0)
        return sticky(b, loom_fail(LOOM_ERR_IO, "%s: cannot rename %s into place: %s",
                                   b->bin_dest, b->bin.tmp, strerror(errno)));
    free(b->bin.tmp);
    b->bin.tmp = NULL;
    if (rename(b->idx.tmp, b->idx_dest) != 0)
        return sticky(b, loom_fail(LOOM_ERR_IO, "%s: cannot rename %s into place: %s",
                                   b->idx_dest, b->idx.tmp, strerror(errno)));
    free(b->idx.tmp);
    b->idx.tmp = NULL;
    b->finished = 1;
    return sticky(b, fsync_parent(b->idx_dest));
}

void loom_indexed_builder_free(struct loom_indexed_builder *b) {
    if (!b) return;
    wfile_discard(&b->bin);
    wfile_discard(&b->idx);
    free(b->bin_dest);
    free(b->idx_dest);
    free(b->lens);
    free(b->docs);
    free(b);
}
