/* Helpers shared by the libFuzzer targets: a private temporary directory for the files the
 * readers open (they take paths), and splitting one input into several files. */
#ifndef LOOM_FUZZ_UTIL_H
#define LOOM_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Separator between the parts of an input made of several files */
#define FZ_SEP "\n@@@@\n"

static char fz_root[256];
static char fz_names[8][64];
static int fz_nnames;

static inline void fz_cleanup(void) {
    char path[512];
    for (int i = 0; i < fz_nnames; i++) {
        snprintf(path, sizeof path, "%s/%s", fz_root, fz_names[i]);
        unlink(path);
    }
    rmdir(fz_root);
}

/* The process's temporary directory, made on first use and removed at exit */
static inline const char *fz_dir(void) {
    if (!fz_root[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(fz_root, sizeof fz_root, "%s/loom-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(fz_root)) {
            perror("mkdtemp");
            abort();
        }
        atexit(fz_cleanup);
    }
    return fz_root;
}

/* Write data[0..n) to the directory's file `name`; path receives its path */
static inline void fz_write(const char *name, const void *data, size_t n, char *path, size_t cap) {
    int known = 0;
    for (int i = 0; i < fz_nnames; i++) known |= strcmp(fz_names[i], name) == 0;
    if (!known && fz_nnames < 8) snprintf(fz_names[fz_nnames++], sizeof fz_names[0], "%s", name);
    snprintf(path, cap, "%s/%s", fz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* Split data at the first max-1 occurrences of FZ_SEP: part[i] and len[i] for i < max (missing
 * parts are empty); returns how many separators were found */
static inline int fz_split(const uint8_t *data, size_t size, int max, const uint8_t **part, size_t *len) {
    const size_t sl = sizeof FZ_SEP - 1;
    int found = 0;
    for (int i = 0; i < max; i++) {
        part[i] = data;
        len[i] = 0;
    }
    size_t start = 0;
    for (int i = 0; i < max - 1; i++) {
        size_t at = start;
        while (at + sl <= size && memcmp(data + at, FZ_SEP, sl) != 0) at++;
        if (at + sl > size) break;
        part[i] = data + start;
        len[i] = at - start;
        start = at + sl;
        found++;
    }
    part[found] = data + start;
    len[found] = size - start;
    return found;
}

#endif
