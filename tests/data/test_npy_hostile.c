/* Megatron's index cache files (.npy, read by loom_npy_load): shapes whose element count
 * overflows 64 bits, or that match the data only after wrapping around, are refused with an
 * error naming the file; a well-formed file gives back its values. The files are written here
 * by hand following the .npy format (magic, version, header length, a Python dict literal). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/index_cache.h"
#include "expect.h"

static char dir[64];

/* DIR/NAME: a version 1.0 .npy with the given descr and shape text, then nbytes of data */
static const char *npy(const char *name, const char *descr, const char *shape, const void *data,
                       size_t nbytes) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char hdr[256];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, shape);
    while ((n + 10) % 64 != 63) hdr[n++] = ' ';
    hdr[n++] = '\n';
    FILE *f = fopen(path, "wb");
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 255),
                             (unsigned char)(n >> 8)};
    if (!f || fwrite(pre, 1, 10, f) != 10 || fwrite(hdr, 1, (size_t)n, f) != (size_t)n ||
        (nbytes && fwrite(data, 1, nbytes, f) != nbytes) || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    return path;
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/loom-npy-XXXXXX");
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    int64_t *v = NULL, rows = -1, cols = -1;

    /* a well-formed 2 x 3 int64 array */
    int64_t vals[6] = {0, 1, -2, 3, (int64_t)1 << 40, -((int64_t)1 << 50)};
    const char *p = npy("ok.npy", "<i8", "(2, 3)", vals, sizeof vals);
    EXPECT_OK(loom_npy_load(p, &v, &rows, &cols));
    EXPECT(rows == 2 && cols == 3);
    EXPECT(v && memcmp(v, vals, sizeof vals) == 0);
    free(v);
    v = NULL;

    /* 4 x 2^62 elements of 8 bytes: the byte count wraps to 0, matching an empty data section */
    p = npy("wrap.npy", "<i8", "(4, 4611686018427387904)", NULL, 0);
    EXPECT_FAIL(loom_npy_load(p, &v, &rows, &cols), LOOM_ERR_FORMAT, p, "shape");
    EXPECT(v == NULL);
    /* 2^39 x 2^39 int8: the element count overflows int64 */
    p = npy("overflow.npy", "|i1", "(549755813888, 549755813888)", vals, 8);
    EXPECT_FAIL(loom_npy_load(p, &v, &rows, &cols), LOOM_ERR_FORMAT, p, "shape");
    /* a column count beyond int64 */
    p = npy("range.npy", "<i8", "(1, 99999999999999999999)", vals, 8);
    EXPECT_FAIL(loom_npy_load(p, &v, &rows, &cols), LOOM_ERR_FORMAT, p);
    /* 2^61 + 1 rows of 8 bytes: 8 bytes of data after wrapping */
    p = npy("wrap1.npy", "<i8", "(2305843009213693953,)", vals, 8);
    EXPECT_FAIL(loom_npy_load(p, &v, &rows, &cols), LOOM_ERR_FORMAT, p, "shape");
    /* data that is not a whole number of items */
    p = npy("partial.npy", "<i4", "(3,)", vals, 10);
    EXPECT_FAIL(loom_npy_load(p, &v, &rows, &cols), LOOM_ERR_FORMAT, p, "shape");

    const char *names[] = {"ok.npy", "wrap.npy", "overflow.npy", "range.npy", "wrap1.npy",
                           "partial.npy"};
    char path[128];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    return expect_finish("test_npy_hostile");
}
