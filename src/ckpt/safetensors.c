/* safetensors writer and validating reader. Format and guarantees: include/loom/safetensors.h.
 * The header is parsed and produced with jansson; the data section is mapped read-only. */
#include "loom/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loom/fileio.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader/writer assumes a little-endian host"
#endif

/* ---- dtypes ---------------------------------------------------------------------------------- */

/* dtypes safetensors defines for which loom has no enum value: accepted by the reader (validated
 * with their element size), never produced by the writer. */
static const struct {
    const char *name;
    size_t size;
} g_foreign_dtypes[] = {
    {"BOOL", 1}, {"I8", 1}, {"I16", 2}, {"U32", 4}, {"U64", 8}, {"F8_E8M0", 1},
};

/* Resolve a header dtype name; false when safetensors does not define it. */
static bool dtype_lookup(const char *name, enum loom_dtype *dt, size_t *size, const char **canon) {
    for (int i = 0; i < LOOM_DTYPE_COUNT; i++)
        if (strcmp(name, loom_dtype_name((enum loom_dtype)i)) == 0) {
            *dt = (enum loom_dtype)i;
            *size = loom_dtype_size(*dt);
            *canon = loom_dtype_name(*dt);
            return true;
        }
    for (size_t i = 0; i < sizeof g_foreign_dtypes / sizeof g_foreign_dtypes[0]; i++)
        if (strcmp(name, g_foreign_dtypes[i].name) == 0) {
            *dt = LOOM_DTYPE_COUNT;
            *size = g_foreign_dtypes[i].size;
            *canon = g_foreign_dtypes[i].name;
            return true;
        }
    return false;
}

/* numel of a shape, false on a negative dimension or when numel * itemsize overflows int64. */
static bool checked_numel(int ndim, const int64_t *shape, size_t itemsize, int64_t *numel) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return false;
        if (shape[i] != 0 && n > INT64_MAX / (int64_t)itemsize / shape[i]) return false;
        n *= shape[i];
    }
    *numel = n;
    return true;
}

/* "[2, 3]" into buf (truncated with "..." when long). */
static const char *fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t len = 0;
    len += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
    if (len >= cap && cap > 4) strcpy(buf + cap - 4, "...");
    return buf;
}

/* ---- writer ---------------------------------------------------------------------------------- */

struct st_wentry {
    char *name;
    enum loom_dtype dtype;
    int ndim;
    int64_t shape[LOOM_SAFETENSORS_MAX_DIMS];
    const void *data;
    size_t nbytes;
};

struct loom_safetensors_writer {
    struct st_wentry *e;
    int64_t n, cap;
    json_t *names; /* name -> index, for the uniqueness check */
    json_t *meta;  /* "__metadata__" object, insertion-ordered */
};

enum loom_status loom_safetensors_writer_init(struct loom_safetensors_writer **out) {
    struct loom_safetensors_writer *w = calloc(1, sizeof *w);
    if (w) {
        w->names = json_object();
        w->meta = json_object();
    }
    if (!w || !w->names || !w->meta) {
        loom_safetensors_writer_free(w);
        *out = NULL;
        return loom_fail(LOOM_ERR_OOM, "out of memory creating a safetensors writer");
    }
    *out = w;
    return LOOM_OK;
}

void loom_safetensors_writer_free(struct loom_safetensors_writer *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n; i++) free(w->e[i].name);
    free(w->e);
    json_decref(w->names);
    json_decref(w->meta);
    free(w);
}

enum loom_status loom_safetensors_writer_add(struct loom_safetensors_writer *w, const char *name,
                                             enum loom_dtype dtype, int ndim, const int64_t *shape,
                                             const void *data) {
    if (!name || !*name)
        return loom_fail(LOOM_ERR_INVALID_ARG, "safetensors: a tensor needs a non-empty name");
    if (strcmp(name, "__metadata__") == 0)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "safetensors: '__metadata__' is reserved and cannot name a tensor");
    if ((int)dtype < 0 || dtype >= LOOM_DTYPE_COUNT)
        return loom_fail(LOOM_ERR_INVALID_ARG, "safetensors: tensor '%s': invalid dtype %d", name,
                         (int)dtype);
    if (ndim < 0 || ndim > LOOM_SAFETENSORS_MAX_DIMS)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "safetensors: tensor '%s': %d dimensions; 0 to %d are supported", name,
                         ndim, LOOM_SAFETENSORS_MAX_DIMS);
    int64_t numel;
    char sbuf[160];
    if (!checked_numel(ndim, shape, loom_dtype_size(dtype), &numel))
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "safetensors: tensor '%s': shape %s has a negative dimension or is too "
                         "large", name, fmt_shape(sbuf, sizeof sbuf, ndim, shape));
    if (!data && numel > 0)
        return loom_fail(LOOM_ERR_INVALID_ARG, "safetensors: tensor '%s': no data", name);
    if (json_object_get(w->names, name))
        return loom_fail(LOOM_ERR_INVALID_ARG, "safetensors: tensor '%s' added twice", name);
    /* jansson refuses keys that are not valid UTF-8; detect that now rather than at save. */
    if (json_object_set_new(w->names, name, json_integer(w->n)) != 0)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "safetensors: tensor name '%s' is not valid UTF-8 (or out of memory)",
                         name);
    if (w->n == w->cap) {
        int64_t ncap = w->cap ? 2 * w->cap : 64;
        struct st_wentry *ne = realloc(w->e, (size_t)ncap * sizeof *ne);
        if (!ne) {
            json_object_del(w->names, name);
            return loom_fail(LOOM_ERR_OOM, "out of memory adding tensor '%s'", name);
        }
        w->e = ne;
        w->cap = ncap;
    }
    struct st_wentry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    if (!e->name) {
        json_object_del(w->names, name);
        return loom_fail(LOOM_ERR_OOM, "out of memory adding tensor '%s'", name);
    }
    e->dtype = dtype;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->data = data;
    e->nbytes = (size_t)numel * loom_dtype_size(dtype);
    w->n++;
    return LOOM_OK;
}

enum loom_status loom_safetensors_writer_add_tensor(struct loom_safetensors_writer *w,
                                                    const char *name, const struct loom_tensor *t) {
    if (t->device != LOOM_DEVICE_CPU)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "safetensors: tensor '%s' is in %s memory; copy it to the host first",
                         name ? name : "", loom_device_name(t->device));
    return loom_safetensors_writer_add(w, name, t->dtype, t->ndim, t->shape, t->data);
}

enum loom_status loom_safetensors_writer_set_metadata(struct loom_safetensors_writer *w,
                                                      const char *key, const char *value) {
    if (!key || !value)
        return loom_fail(LOOM_ERR_INVALID_ARG, "safetensors: metadata key and value are required");
    json_t *v = json_string(value);
    if (!v)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "safetensors: metadata '%s': value is not valid UTF-8", key);
    if (json_object_set_new(w->meta, key, v) != 0)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "safetensors: metadata key '%s' is not valid UTF-8 (or out of memory)",
                         key);
    return LOOM_OK;
}

/* Data order: element size descending, then name (Hugging Face's order; keeps every tensor
 * aligned to its element size). */
static int cmp_layout(const void *a, const void *b) {
    const struct st_wentry *x = *(const struct st_wentry *const *)a;
    const struct st_wentry *y = *(const struct st_wentry *const *)b;
    size_t sx = loom_dtype_size(x->dtype), sy = loom_dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* One header entry {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}; NULL on OOM. */
static json_t *header_entry(const struct st_wentry *e, uint64_t begin) {
    json_t *ent = json_object(), *shape = json_array();
    bool ok = ent && shape;
    for (int d = 0; ok && d < e->ndim; d++)
        ok = json_array_append_new(shape, json_integer(e->shape[d])) == 0;
    json_t *offs = ok ? json_pack("[II]", (json_int_t)begin, (json_int_t)(begin + e->nbytes))
                      : NULL;
    /* json_object_set_new takes the reference to the value even when it fails. */
    ok = ok && offs &&
         json_object_set_new(ent, "dtype", json_string(loom_dtype_name(e->dtype))) == 0;
    if (ok) {
        ok = json_object_set_new(ent, "shape", shape) == 0;
        shape = NULL;
    }
    if (ok) {
        ok = json_object_set_new(ent, "data_offsets", offs) == 0;
        offs = NULL;
    }
    json_decref(shape);
    json_decref(offs);
    if (!ok) {
        json_decref(ent);
        return NULL;
    }
    return ent;
}

/* Build the padded header text; order[] receives the entries in data order. */
static enum loom_status build_header(const struct loom_safetensors_writer *w, const char *path,
                                     const struct st_wentry **order, char **out, size_t *out_len) {
    for (int64_t i = 0; i < w->n; i++) order[i] = &w->e[i];
    if (w->n > 1) qsort(order, (size_t)w->n, sizeof *order, cmp_layout);

    json_t *hdr = json_object();
    bool ok = hdr != NULL;
    if (ok && json_object_size(w->meta) > 0)
        ok = json_object_set(hdr, "__metadata__", w->meta) == 0;
    uint64_t off = 0;
    for (int64_t k = 0; ok && k < w->n; k++) {
        json_t *ent = header_entry(order[k], off);
        ok = ent && json_object_set_new(hdr, order[k]->name, ent) == 0;
        off += order[k]->nbytes;
    }
    char *text = ok ? json_dumps(hdr, JSON_COMPACT) : NULL;
    json_decref(hdr);
    if (!text) return loom_fail(LOOM_ERR_OOM, "out of memory building the header of %s", path);
    size_t len = strlen(text);
    size_t padded = (len + 7) & ~(size_t)7;
    char *buf = realloc(text, padded + 1);
    if (!buf) {
        free(text);
        return loom_fail(LOOM_ERR_OOM, "out of memory building the header of %s", path);
    }
    memset(buf + len, ' ', padded - len);
    buf[padded] = 0;
    *out = buf;
    *out_len = padded;
    return LOOM_OK;
}

enum loom_status loom_safetensors_writer_save(struct loom_safetensors_writer *w, const char *path) {
    const struct st_wentry **order = malloc((size_t)(w->n > 0 ? w->n : 1) * sizeof *order);
    if (!order) return loom_fail(LOOM_ERR_OOM, "out of memory writing %s", path);
    char *hdr = NULL;
    size_t hlen = 0;
    enum loom_status s = build_header(w, path, order, &hdr, &hlen);
    struct loom_atomic_file f;
    if (s == LOOM_OK) s = loom_atomic_file_open(&f, path);
    if (s == LOOM_OK) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
        s = loom_atomic_file_write(&f, len8, sizeof len8);
        if (s == LOOM_OK) s = loom_atomic_file_write(&f, hdr, hlen);
        for (int64_t k = 0; s == LOOM_OK && k < w->n; k++) {
            if (order[k]->nbytes)
                s = loom_atomic_file_write(&f, order[k]->data, order[k]->nbytes);
        }
        if (s == LOOM_OK)
            s = loom_atomic_file_commit(&f);
        else
            loom_atomic_file_abort(&f);
    }
    free(hdr);
    free(order);
    return s;
}

/* ---- reader ---------------------------------------------------------------------------------- */

struct st_item {
    struct loom_safetensors_entry e;
    int64_t shape[LOOM_SAFETENSORS_MAX_DIMS];
    uint64_t end;
};

struct loom_safetensors {
    char *path;
    unsigned char *base; /* the whole file */
    size_t size;
    bool mapped; /* base from mmap (else malloc) */
    struct st_item *items;
    int64_t n;
    const struct st_item **by_name; /* items sorted by name */
    char **meta_key, **meta_val;
    int64_t n_meta;
};

void loom_safetensors_close(struct loom_safetensors *st) {
    if (!st) return;
    if (st->base) {
        if (st->mapped)
            munmap(st->base, st->size);
        else
            free(st->base);
    }
    for (int64_t i = 0; i < st->n; i++) free((char *)st->items[i].e.name);
    free(st->items);
    free((void *)st->by_name);
    for (int64_t i = 0; i < st->n_meta; i++) {
        free(st->meta_key[i]);
        free(st->meta_val[i]);
    }
    free(st->meta_key);
    free(st->meta_val);
    free(st->path);
    free(st);
}

/* Map (or, where mapping is not possible, read) the whole file. */
static enum loom_status load_bytes(struct loom_safetensors *st) {
    int fd;
    LOOM_CHECK(loom_open_regular(st->path, &fd));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return loom_fail(LOOM_ERR_IO, "cannot read %s: %s", st->path, strerror(err));
    }
    st->size = (size_t)sb.st_size;
    if (st->size < 8) {
        close(fd);
        return loom_fail(LOOM_ERR_FORMAT,
                         "%s: not a safetensors file: %zu bytes, less than the 8-byte header "
                         "length", st->path, st->size);
    }
    void *p = mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p != MAP_FAILED) {
        st->base = p;
        st->mapped = true;
        return LOOM_OK;
    }
    char *buf = NULL;
    size_t len = 0;
    LOOM_CHECK(loom_read_file(st->path, st->size, &buf, &len));
    st->base = (unsigned char *)buf;
    st->size = len;
    if (len < 8)
        return loom_fail(LOOM_ERR_FORMAT, "%s: not a safetensors file: %zu bytes", st->path, len);
    return LOOM_OK;
}

/* Non-negative JSON integer. */
static bool json_uint(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static enum loom_status parse_metadata(struct loom_safetensors *st, json_t *meta) {
    if (!json_is_object(meta))
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"__metadata__\" is not a JSON object", st->path);
    size_t n = json_object_size(meta);
    st->meta_key = calloc(n ? n : 1, sizeof *st->meta_key);
    st->meta_val = calloc(n ? n : 1, sizeof *st->meta_val);
    if (!st->meta_key || !st->meta_val)
        return loom_fail(LOOM_ERR_OOM, "out of memory reading %s", st->path);
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return loom_fail(LOOM_ERR_FORMAT, "%s: \"__metadata__\" entry '%s' is not a string",
                             st->path, k);
        char *kk = strdup(k), *vv = strdup(json_string_value(v));
        if (!kk || !vv) {
            free(kk);
            free(vv);
            return loom_fail(LOOM_ERR_OOM, "out of memory reading %s", st->path);
        }
        st->meta_key[st->n_meta] = kk;
        st->meta_val[st->n_meta] = vv;
        st->n_meta++;
    }
    return LOOM_OK;
}

/* Validate one tensor entry of the header into `it` (name already set). */
static enum loom_status parse_entry(const struct loom_safetensors *st, const char *name,
                                    const json_t *v, uint64_t data_size, struct st_item *it) {
    const char *path = st->path;
    if (!json_is_object(v))
        return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", path,
                         name);
    const json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
                 *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s': missing string \"dtype\"", path, name);
    size_t itemsize;
    if (!dtype_lookup(json_string_value(jd), &it->e.dtype, &itemsize, &it->e.dtype_name))
        return loom_fail(LOOM_ERR_FORMAT,
                         "%s: tensor '%s': unknown dtype '%s' (known: F64 F32 BF16 F16 F8_E4M3 "
                         "F8_E5M2 F8_E8M0 I64 I32 I16 I8 U64 U32 U16 U8 BOOL)", path, name,
                         json_string_value(jd));
    if (!json_is_array(js))
        return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s': missing array \"shape\"", path, name);
    size_t nd = json_array_size(js);
    if (nd > LOOM_SAFETENSORS_MAX_DIMS)
        return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s': %zu dimensions, more than the %d "
                         "supported", path, name, nd, LOOM_SAFETENSORS_MAX_DIMS);
    it->e.ndim = (int)nd;
    for (size_t d = 0; d < nd; d++) {
        uint64_t dim;
        if (!json_uint(json_array_get(js, d), &dim))
            return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s': shape dimension %zu is not a "
                             "non-negative integer", path, name, d);
        it->shape[d] = (int64_t)dim;
    }
    char sbuf[160];
    if (!checked_numel(it->e.ndim, it->shape, itemsize, &it->e.numel))
        return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s': shape %s is too large", path, name,
                         fmt_shape(sbuf, sizeof sbuf, it->e.ndim, it->shape));
    uint64_t begin, end;
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_uint(json_array_get(jo, 0), &begin) || !json_uint(json_array_get(jo, 1), &end))
        return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" is not [begin, end] "
                         "of two non-negative integers", path, name);
    if (begin > end)
        return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before "
                         "they begin", path, name, (unsigned long long)begin,
                         (unsigned long long)end);
    if (end > data_size)
        return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] run past "
                         "the end of the data section (%llu bytes; file truncated?)", path, name,
                         (unsigned long long)begin, (unsigned long long)end,
                         (unsigned long long)data_size);
    uint64_t need = (uint64_t)it->e.numel * itemsize;
    if (end - begin != need)
        return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu "
                         "bytes, but shape %s of %s needs %llu", path, name,
                         (unsigned long long)begin, (unsigned long long)end,
                         (unsigned long long)(end - begin),
                         fmt_shape(sbuf, sizeof sbuf, it->e.ndim, it->shape), it->e.dtype_name,
                         (unsigned long long)need);
    it->e.offset = begin;
    it->e.nbytes = (size_t)need;
    it->end = end;
    return LOOM_OK;
}

static int cmp_offset(const void *a, const void *b) {
    const struct st_item *x = a, *y = b;
    if (x->e.offset != y->e.offset) return x->e.offset < y->e.offset ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->e.name, y->e.name);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const struct st_item *const *)a)->e.name,
                  (*(const struct st_item *const *)b)->e.name);
}

static enum loom_status parse_header(struct loom_safetensors *st) {
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)st->base[i] << (8 * i);
    if (hlen > st->size - 8)
        return loom_fail(LOOM_ERR_FORMAT, "%s: header length %llu runs past the end of the file "
                         "(%zu bytes; truncated, or not a safetensors file)", st->path,
                         (unsigned long long)hlen, st->size);
    if (hlen > LOOM_SAFETENSORS_MAX_HEADER)
        return loom_fail(LOOM_ERR_FORMAT, "%s: header length %llu is over the %u-byte limit",
                         st->path, (unsigned long long)hlen, LOOM_SAFETENSORS_MAX_HEADER);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)st->base + 8, (size_t)hlen,
                              JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root)
        return loom_fail(LOOM_ERR_FORMAT, "%s: header is not valid JSON: %s (at byte %d of %llu)",
                         st->path, jerr.text, jerr.position, (unsigned long long)hlen);
    enum loom_status s = LOOM_OK;
    if (!json_is_object(root)) {
        s = loom_fail(LOOM_ERR_FORMAT, "%s: header is not a JSON object", st->path);
        goto done;
    }
    const unsigned char *data = st->base + 8 + hlen;
    uint64_t data_size = st->size - 8 - hlen;
    size_t cap = json_object_size(root);
    st->items = calloc(cap ? cap : 1, sizeof *st->items);
    if (!st->items) {
        s = loom_fail(LOOM_ERR_OOM, "out of memory reading %s", st->path);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if ((s = parse_metadata(st, v)) != LOOM_OK) goto done;
            continue;
        }
        struct st_item *it = &st->items[st->n];
        if (!(it->e.name = strdup(key))) {
            s = loom_fail(LOOM_ERR_OOM, "out of memory reading %s", st->path);
            goto done;
        }
        st->n++;
        if ((s = parse_entry(st, key, v, data_size, it)) != LOOM_OK) goto done;
    }
    /* No overlaps: in offset order each non-empty range starts at or after the end of the
     * previous non-empty one. (Empty tensors occupy no bytes and may sit anywhere.) */
    if (st->n > 1) qsort(st->items, (size_t)st->n, sizeof *st->items, cmp_offset);
    const struct st_item *prev = NULL;
    for (int64_t i = 0; i < st->n; i++) {
        const struct st_item *it = &st->items[i];
        if (it->e.nbytes == 0) continue;
        if (prev && it->e.offset < prev->end) {
            s = loom_fail(LOOM_ERR_FORMAT, "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] "
                          "overlap", st->path, prev->e.name, (unsigned long long)prev->e.offset,
                          (unsigned long long)prev->end, it->e.name,
                          (unsigned long long)it->e.offset, (unsigned long long)it->end);
            goto done;
        }
        /* no gap either: the tensors cover the data section exactly, as Hugging Face's
         * reader requires (a header whose length is off by a byte leaves one) */
        if (it->e.offset != (prev ? prev->end : 0)) {
            s = loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s' starts at byte %llu of the data "
                          "section, after %llu bytes no tensor holds (header length wrong?)",
                          st->path, it->e.name, (unsigned long long)it->e.offset,
                          (unsigned long long)(it->e.offset - (prev ? prev->end : 0)));
            goto done;
        }
        prev = it;
    }
    if ((prev ? prev->end : 0) != data_size) {
        s = loom_fail(LOOM_ERR_FORMAT, "%s: the tensors end at byte %llu of the %llu-byte data "
                      "section: the rest is no tensor's (header length wrong, or trailing bytes)",
                      st->path, (unsigned long long)(prev ? prev->end : 0),
                      (unsigned long long)data_size);
        goto done;
    }
    for (int64_t i = 0; i < st->n; i++) {
        struct st_item *it = &st->items[i];
        it->e.shape = it->shape;
        it->e.data = data + it->e.offset;
    }
    st->by_name = malloc((size_t)(st->n ? st->n : 1) * sizeof *st->by_name);
    if (!st->by_name) {
        s = loom_fail(LOOM_ERR_OOM, "out of memory reading %s", st->path);
        goto done;
    }
    for (int64_t i = 0; i < st->n; i++) st->by_name[i] = &st->items[i];
    if (st->n > 1) qsort(st->by_name, (size_t)st->n, sizeof *st->by_name, cmp_name);
done:
    json_decref(root);
    return s;
}

enum loom_status loom_safetensors_open(struct loom_safetensors **out, const char *path) {
    *out = NULL;
    struct loom_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        free(st);
        return loom_fail(LOOM_ERR_OOM, "out of memory opening %s", path);
    }
    enum loom_status s = load_bytes(st);
    if (s == LOOM_OK) s = parse_header(st);
    if (s != LOOM_OK) {
        loom_safetensors_close(st);
        return s;
    }
    *out = st;
    return LOOM_OK;
}

const char *loom_safetensors_path(const struct loom_safetensors *st) { return st->path; }
int64_t loom_safetensors_count(const struct loom_safetensors *st) { return st->n; }

const struct loom_safetensors_entry *loom_safetensors_entry_at(const struct loom_safetensors *st,
                                                                int64_t i) {
    return (i >= 0 && i < st->n) ? &st->items[i].e : NULL;
}

const struct loom_safetensors_entry *loom_safetensors_find(const struct loom_safetensors *st,
                                                            const char *name) {
    int64_t lo = 0, hi = st->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const struct loom_safetensors_entry *e = &st->by_name[mid]->e;
        int c = strcmp(name, e->name);
        if (c == 0) return e;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

enum loom_status loom_safetensors_get(const struct loom_safetensors *st, const char *name,
                                      const struct loom_safetensors_entry **out) {
    *out = loom_safetensors_find(st, name);
    if (!*out)
        return loom_fail(LOOM_ERR_FORMAT, "%s: no tensor named '%s' (the file has %lld tensors)",
                         st->path, name, (long long)st->n);
    return LOOM_OK;
}

int64_t loom_safetensors_metadata_count(const struct loom_safetensors *st) { return st->n_meta; }

void loom_safetensors_metadata_at(const struct loom_safetensors *st, int64_t i, const char **key,
                                  const char **value) {
    bool ok = i >= 0 && i < st->n_meta;
    if (key) *key = ok ? st->meta_key[i] : NULL;
    if (value) *value = ok ? st->meta_val[i] : NULL;
}

const char *loom_safetensors_metadata_get(const struct loom_safetensors *st, const char *key) {
    for (int64_t i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_key[i], key) == 0) return st->meta_val[i];
    return NULL;
}

enum loom_status loom_safetensors_expect_shape(const struct loom_safetensors *st, const char *name,
                                               int ndim, const int64_t *shape) {
    const struct loom_safetensors_entry *e;
    LOOM_CHECK(loom_safetensors_get(st, name, &e));
    bool same = e->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = e->shape[d] == shape[d];
    if (!same) {
        char want[160], got[160];
        return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", st->path,
                         name, fmt_shape(got, sizeof got, e->ndim, e->shape),
                         fmt_shape(want, sizeof want, ndim, shape));
    }
    return LOOM_OK;
}

static float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) { /* inf / NaN, payload kept */
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) { /* normal: rebias 15 -> 127 */
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else { /* zero or subnormal: man * 2^-24, exact in float32 */
        float f = ldexpf((float)man, -24);
        memcpy(&bits, &f, sizeof bits);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

enum loom_status loom_safetensors_read_f32(const struct loom_safetensors *st, const char *name,
                                           float *dst, int64_t expected_numel) {
    const struct loom_safetensors_entry *e;
    LOOM_CHECK(loom_safetensors_get(st, name, &e));
    if (e->numel != expected_numel) {
        char got[160];
        return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s' has shape %s (%lld elements), "
                         "expected %lld elements", st->path, name,
                         fmt_shape(got, sizeof got, e->ndim, e->shape), (long long)e->numel,
                         (long long)expected_numel);
    }
    const unsigned char *src = e->data;
    switch (e->dtype) {
    case LOOM_DTYPE_F32:
        if (e->nbytes) memcpy(dst, src, e->nbytes);
        return LOOM_OK;
    case LOOM_DTYPE_BF16:
    case LOOM_DTYPE_F16: {
        bool bf = e->dtype == LOOM_DTYPE_BF16;
        for (int64_t i = 0; i < e->numel; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2); /* the data may be unaligned */
            dst[i] = bf ? bf16_to_f32(h) : f16_to_f32(h);
        }
        return LOOM_OK;
    }
    default:
        return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s' is %s; a float32 read takes F32, BF16 "
                         "or F16", st->path, name, e->dtype_name);
    }
}
