/* TensorBoard event files (see loom/tb_events.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "loom/fileio.h"
#include "loom/tb_events.h"

struct loom_tb {
    int fd;
    char *path;
    unsigned char *buf; /* records queued since the last flush */
    size_t len, cap;
};

/* ---- CRC-32C: reflected polynomial 0x82f63b78, table-driven ---- */

static uint32_t crc_table[256];
static int crc_ready;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
    crc_ready = 1;
}

uint32_t loom_crc32c(const void *data, size_t n) {
    if (!crc_ready) crc_init();
    const unsigned char *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static uint32_t masked_crc(const void *data, size_t n) {
    const uint32_t c = loom_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protocol-buffer encoding, the few wire types an Event needs ---- */

struct pb {
    unsigned char b[640];
    size_t n;
};

static void pb_byte(struct pb *p, unsigned v) {
    p->b[p->n++] = (unsigned char)v;
}
static void pb_varint(struct pb *p, uint64_t v) {
    while (v >= 0x80) {
        pb_byte(p, (unsigned)(v & 0x7f) | 0x80);
        v >>= 7;
    }
    pb_byte(p, (unsigned)v);
}
static void pb_le(struct pb *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++)
        pb_byte(p, (unsigned)(v >> (8 * i)) & 0xff);
}
/* field number f, wire type w */
static void pb_key(struct pb *p, unsigned f, unsigned w) {
    pb_varint(p, (uint64_t)(f << 3 | w));
}
static void pb_double(struct pb *p, unsigned f, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    pb_key(p, f, 1);
    pb_le(p, u, 8);
}
static void pb_float(struct pb *p, unsigned f, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    pb_key(p, f, 5);
    pb_le(p, u, 4);
}
static void pb_bytes(struct pb *p, unsigned f, const void *data, size_t n) {
    pb_key(p, f, 2);
    pb_varint(p, n);
    memcpy(p->b + p->n, data, n);
    p->n += n;
}

static double wall_time(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

/* Queue one TFRecord around data[n] */
static enum loom_status queue_record(struct loom_tb *tb, const unsigned char *data, size_t n) {
    const size_t need = tb->len + n + 16;
    if (need > tb->cap) {
        size_t cap = tb->cap ? tb->cap : 4096;
        while (cap < need)
            cap *= 2;
        unsigned char *b = realloc(tb->buf, cap);
        if (!b) return loom_fail(LOOM_ERR_OOM, "out of memory for --tensorboard-dir records");
        tb->buf = b;
        tb->cap = cap;
    }
    unsigned char *r = tb->buf + tb->len;
    for (int i = 0; i < 8; i++)
        r[i] = (unsigned char)((uint64_t)n >> (8 * i));
    const uint32_t lc = masked_crc(r, 8), dc = masked_crc(data, n);
    for (int i = 0; i < 4; i++)
        r[8 + i] = (unsigned char)(lc >> (8 * i));
    memcpy(r + 12, data, n);
    for (int i = 0; i < 4; i++)
        r[12 + n + i] = (unsigned char)(dc >> (8 * i));
    tb->len += n + 16;
    return LOOM_OK;
}

enum loom_status loom_tb_open(struct loom_tb **out, const char *dir) {
    *out = NULL;
    enum loom_status s = loom_mkdir_p(dir);
    if (s != LOOM_OK) {
        char why[512]; /* the message is rewritten in the buffer it is read from */
        snprintf(why, sizeof why, "%s", loom_last_error());
        return loom_fail(s, "--tensorboard-dir %s: %s", dir, why);
    }
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
    host[sizeof host - 1] = 0;
    struct loom_tb *tb = calloc(1, sizeof *tb);
    size_t plen = strlen(dir) + strlen(host) + 96;
    if (tb) tb->path = malloc(plen);
    if (!tb || !tb->path) {
        free(tb);
        return loom_fail(LOOM_ERR_OOM, "out of memory");
    }
    tb->fd = -1;
    snprintf(tb->path, plen, "%s/events.out.tfevents.%010lld.%s.%ld.0", dir, (long long)wall_time(),
             host, (long)getpid());
    tb->fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (tb->fd < 0) {
        s = loom_fail(LOOM_ERR_IO, "--tensorboard-dir: cannot create %s: %s", tb->path,
                      strerror(errno));
        loom_tb_close(tb);
        return s;
    }
    struct pb p = {.n = 0};
    pb_double(&p, 1, wall_time());
    pb_bytes(&p, 3, "brain.Event:2", 13);
    s = queue_record(tb, p.b, p.n);
    if (s == LOOM_OK) s = loom_tb_flush(tb);
    if (s != LOOM_OK) {
        loom_tb_close(tb);
        return s;
    }
    *out = tb;
    return LOOM_OK;
}

enum loom_status loom_tb_scalar(struct loom_tb *tb, const char *tag, double value, int64_t step) {
    const size_t tl = strlen(tag);
    if (tl > 256) return loom_fail(LOOM_ERR_INVALID_ARG, "tensorboard tag too long: %s", tag);
    struct pb v = {.n = 0}, sum = {.n = 0}, ev = {.n = 0};
    pb_bytes(&v, 1, tag, tl);       /* Summary.Value.tag */
    pb_float(&v, 2, (float)value);  /* Summary.Value.simple_value */
    pb_bytes(&sum, 1, v.b, v.n);    /* Summary.value */
    pb_double(&ev, 1, wall_time()); /* Event.wall_time */
    pb_key(&ev, 2, 0);              /* Event.step */
    pb_varint(&ev, (uint64_t)step);
    pb_bytes(&ev, 5, sum.b, sum.n); /* Event.summary */
    return queue_record(tb, ev.b, ev.n);
}

enum loom_status loom_tb_flush(struct loom_tb *tb) {
    size_t off = 0;
    while (off < tb->len) {
        ssize_t w = write(tb->fd, tb->buf + off, tb->len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return loom_fail(LOOM_ERR_IO, "--tensorboard-dir: cannot write %s: %s", tb->path,
                             w < 0 ? strerror(errno) : "no progress");
        off += (size_t)w;
    }
    tb->len = 0;
    return LOOM_OK;
}

void loom_tb_close(struct loom_tb *tb) {
    if (!tb) return;
    if (tb->fd >= 0) {
        if (tb->len) (void)loom_tb_flush(tb);
        close(tb->fd);
    }
    free(tb->buf);
    free(tb->path);
    free(tb);
}

const char *loom_tb_path(const struct loom_tb *tb) {
    return tb->path;
}
