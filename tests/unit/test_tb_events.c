/* Tests of include/loom/tb_events.h: CRC-32C against the published check values (the
 * "123456789" check and RFC 3720's 32-byte vectors), the TFRecord framing of a written file (each
 * record's length, its masked checksums, nothing torn), and the errors naming
 * --tensorboard-dir. The Event contents are read back by tests/ref/tb_read.py in
 * tests/model/test_tensorboard.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "expect.h"
#include "loom/tb_events.h"

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint32_t masked(uint32_t c) {
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
/* the first place of needle[m] in hay[n], or NULL */
static const unsigned char *find(const unsigned char *hay, size_t n, const char *needle, size_t m) {
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(hay + i, needle, m) == 0) return hay + i;
    return NULL;
}

int main(void) {
    unsigned char v[32];
    EXPECT(loom_crc32c("123456789", 9) == 0xe3069283u);
    memset(v, 0, sizeof v);
    EXPECT(loom_crc32c(v, 32) == 0x8a9136aau);
    memset(v, 0xff, sizeof v);
    EXPECT(loom_crc32c(v, 32) == 0x62a8ab43u);
    for (int i = 0; i < 32; i++)
        v[i] = (unsigned char)i;
    EXPECT(loom_crc32c(v, 32) == 0x46dd794eu);
    EXPECT(loom_crc32c("", 0) == 0);

    char dir[128];
    snprintf(dir, sizeof dir, "%s/loom_tb_test.%ld/a/b",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
    struct loom_tb *tb = NULL;
    EXPECT_OK(loom_tb_open(&tb, dir)); /* the folders are made */
    if (tb) {
        const char *path = loom_tb_path(tb);
        EXPECT(strncmp(path, dir, strlen(dir)) == 0 && strstr(path, "/events.out.tfevents."));
        EXPECT_OK(loom_tb_scalar(tb, "lm loss", 2.5, 7));
        EXPECT_OK(loom_tb_scalar(tb, "grad-norm", -0.125, 1LL << 40));
        EXPECT_OK(loom_tb_flush(tb));
        FILE *f = fopen(path, "rb");
        unsigned char buf[4096];
        size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f) fclose(f);
        /* three whole records, their checksums right */
        int records = 0;
        size_t i = 0;
        while (i + 12 <= n) {
            uint64_t len = 0;
            for (int k = 0; k < 8; k++)
                len |= (uint64_t)buf[i + k] << (8 * k);
            EXPECT(le32(buf + i + 8) == masked(loom_crc32c(buf + i, 8)));
            if (i + 16 + len > n) break;
            EXPECT(le32(buf + i + 12 + len) == masked(loom_crc32c(buf + i + 12, len)));
            i += 16 + len;
            records++;
        }
        EXPECTF(records == 3 && i == n, "%d records, %zu of %zu bytes\n", records, i, n);
        /* the last record's value: the float -0.125 after the tag "grad-norm" */
        const float want = -0.125f;
        unsigned char wb[4];
        memcpy(wb, &want, 4);
        const unsigned char *at = find(buf, n, "grad-norm\x15", 10); /* then field 2, 32-bit */
        EXPECT(at != NULL && memcmp(at + 10, wb, 4) == 0);
        loom_tb_close(tb);
        unlink(path);
    }
    /* a folder that cannot be made: one error naming the flag */
    char file[160];
    snprintf(file, sizeof file, "%s/plain", dir);
    FILE *pf = fopen(file, "w");
    if (pf) fclose(pf);
    char under[200];
    snprintf(under, sizeof under, "%s/sub", file);
    struct loom_tb *bad = NULL;
    EXPECT_FAIL(loom_tb_open(&bad, under), LOOM_ERR_IO, "--tensorboard-dir", "plain");
    EXPECT(bad == NULL);
    unlink(file);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s/loom_tb_test.%ld",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
    if (system(cmd) != 0) fprintf(stderr, "could not remove the test folder\n");
    return expect_finish("test_tb_events");
}
