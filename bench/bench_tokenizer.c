/* Tokenizer throughput on the Gutenberg corpus (the .txt files of data/gutenberg, written by
 * scripts/fetch_data.sh).
 *
 *   bench_tokenizer [DATA_DIR] [THREADS]     DATA_DIR defaults to ./data; THREADS to OpenMP's
 *
 * Prints MB/s (10^6 bytes of text per second) for GPT2BPETokenizer and BertWordPieceLowerCase:
 * one thread, first pass (empty piece cache) and second pass, then THREADS threads encoding
 * the books in parallel (dynamic schedule), with the per-core figure. Files that are not UTF-8
 * (two of the books are Latin-1) are converted from Latin-1 first.
 */
#include <dirent.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/fileio.h"
#include "loom/tokenizer.h"

struct doc {
    char *text;
    size_t len;
};

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }

static int valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 0 : c >= 0xC2 && c < 0xE0 ? 1 : c >= 0xE0 && c < 0xF0 ? 2 : c >= 0xF0 && c < 0xF5 ? 3 : 9;
        if (k == 9 || i + k >= n + (k == 0)) return 0;
        for (size_t j = 1; j <= k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return 0;
        i += k + 1;
    }
    return 1;
}

static void latin1_to_utf8(struct doc *d) {
    char *o = malloc(2 * d->len + 1);
    size_t k = 0;
    for (size_t i = 0; i < d->len; i++) {
        unsigned char c = (unsigned char)d->text[i];
        if (c < 0x80) {
            o[k++] = (char)c;
        } else {
            o[k++] = (char)(0xC0 | (c >> 6));
            o[k++] = (char)(0x80 | (c & 0x3F));
        }
    }
    o[k] = 0;
    free(d->text);
    d->text = o;
    d->len = k;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* wall seconds; *cpu: CPU seconds of all threads (process CPU time) */
static double run(const struct loom_tokenizer *t, const struct doc *docs, int nd, int threads,
                  size_t *ntok, double *cpu) {
    size_t total = 0;
    int fail = 0;
    double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    double t0 = now();
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) reduction(+ : total, fail)
    for (int i = 0; i < nd; i++) {
        int32_t *ids = NULL;
        size_t n = 0, cap = 0;
        if (loom_tokenizer_encode(t, docs[i].text, docs[i].len, &ids, &n, &cap) != LOOM_OK) fail++;
        total += n;
        free(ids);
    }
    double dt = now() - t0;
    *cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    if (fail) {
        fprintf(stderr, "bench_tokenizer: %d documents failed: %s\n", fail, loom_last_error());
        exit(1);
    }
    *ntok = total;
    return dt;
}

int main(int argc, char **argv) {
    const char *data = argc > 1 ? argv[1] : "data";
    int threads = argc > 2 ? atoi(argv[2]) : omp_get_max_threads();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/gutenberg", data);
    DIR *dp = opendir(dir);
    if (!dp) {
        fprintf(stderr, "bench_tokenizer: cannot open %s (run scripts/fetch_data.sh)\n", dir);
        return 1;
    }
    char *names[64];
    int nn = 0;
    struct dirent *e;
    while ((e = readdir(dp)) && nn < 64) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".txt") == 0) names[nn++] = strdup(e->d_name);
    }
    closedir(dp);
    qsort(names, (size_t)nn, sizeof *names, cmp_str);
    struct doc docs[64];
    size_t bytes = 0;
    for (int i = 0; i < nn; i++) {
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (loom_read_file(p, (size_t)1 << 30, &docs[i].text, &docs[i].len) != LOOM_OK) {
            loom_print_error();
            return 1;
        }
        if (!valid_utf8((const unsigned char *)docs[i].text, docs[i].len)) latin1_to_utf8(&docs[i]);
        bytes += docs[i].len;
        free(names[i]);
    }
    printf("corpus: %d books, %.2f MB; %d threads\n", nn, (double)bytes / 1e6, threads);

    struct {
        const char *type, *vocab, *merges;
    } kinds[] = {
        {"GPT2BPETokenizer", "gpt2/vocab.json", "gpt2/merges.txt"},
        {"BertWordPieceLowerCase", "bert/vocab.txt", NULL},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char v[4096], m[4096];
        snprintf(v, sizeof v, "%s/%s", data, kinds[k].vocab);
        if (kinds[k].merges) snprintf(m, sizeof m, "%s/%s", data, kinds[k].merges);
        struct loom_tokenizer *t;
        double t0 = now();
        if (loom_tokenizer_load(&t, kinds[k].type, v, kinds[k].merges ? m : NULL) != LOOM_OK) {
            loom_print_error();
            return 1;
        }
        double load = now() - t0;
        size_t ntok;
        double c1, c2, cp;
        double d1 = run(t, docs, nn, 1, &ntok, &c1);
        double d2 = run(t, docs, nn, 1, &ntok, &c2);
        double dp_ = run(t, docs, nn, threads, &ntok, &cp);
        double mb = (double)bytes / 1e6;
        printf("%-24s load %.2f s, %zu tokens (%.2f bytes/token)\n", kinds[k].type, load, ntok,
               (double)bytes / (double)ntok);
        printf("  1 thread, first pass : %7.2f MB/s wall, %7.2f MB/s per CPU second\n", mb / d1, mb / c1);
        printf("  1 thread, second pass: %7.2f MB/s wall, %7.2f MB/s per CPU second\n", mb / d2, mb / c2);
        printf("  %2d threads           : %7.2f MB/s wall, %7.2f MB/s per CPU second\n", threads, mb / dp_,
               mb / cp);
        loom_tokenizer_free(t);
    }
    for (int i = 0; i < nn; i++) free(docs[i].text);
    return 0;
}
