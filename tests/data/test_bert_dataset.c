/* The sentence splitter of --split-sentences on tricky strings, and the BERT dataset on small
 * synthetic datasets: the sample mapping against an independent walk (Megatron's build_mapping
 * with fixed targets), skipped documents, epochs, a "##" piece after [SEP], and the one-line
 * errors. The statistics over a real book are in test_bert_data.sh (bert_dataset_check). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "expect.h"
#include "loom/bert_dataset.h"
#include "loom/data.h"
#include "loom/tokenizer.h"

static char g_dir[256];

/* ---------------------------------------------------------------------------------------- */
/* splitter                                                                                 */

/* `want`: the sentences joined by '|' */
static void check_split(const char *text, int keep_newlines, const char *want) {
    struct loom_sentences s = {0};
    EXPECT_OK(loom_split_sentences(text, strlen(text), keep_newlines, &s));
    char got[2048] = "";
    size_t k = 0;
    for (size_t i = 0; i < s.n; i++) {
        size_t b = i ? s.end[i - 1] : 0;
        if (i) got[k++] = '|';
        memcpy(got + k, s.text + b, s.end[i] - b);
        k += s.end[i] - b;
    }
    got[k] = 0;
    EXPECTF(strcmp(got, want) == 0, "split of \"%s\": got \"%s\", want \"%s\"", text, got, want);
    loom_sentences_free(&s);
}

static void test_splitter(void) {
    check_split("", 0, "");
    check_split("   \n\n \t ", 0, "");
    check_split("One. Two! Three? Four", 0, "One.|Two!|Three?|Four");
    check_split("Mr. Smith met Dr. Who at St. Paul's. They talked.", 0,
                "Mr. Smith met Dr. Who at St. Paul's.|They talked.");
    check_split("Mrs. and Ms. Jones, Prof. X and Capt. Y came. Gen. Z too.", 0,
                "Mrs. and Ms. Jones, Prof. X and Capt. Y came.|Gen. Z too.");
    check_split("J. R. R. Tolkien wrote it. I. Then more.", 0,
                "J. R. R. Tolkien wrote it.|I. Then more.");
    check_split("Use e.g. this, i.e. that. Done.", 0, "Use e.g. this, i.e. that.|Done.");
    check_split("It costs 3.14 dollars. Version 2.0.1 is out.", 0,
                "It costs 3.14 dollars.|Version 2.0.1 is out.");
    check_split("'Oh dear! Oh dear! I shall be late!' she said.", 0,
                "'Oh dear!|Oh dear!|I shall be late!'|she said.");
    check_split("He said \"Stop.\" Then (quietly.) he left.", 0,
                "He said \"Stop.\"|Then (quietly.)|he left.");
    check_split("Wait... what?! Really?!? Yes.", 0, "Wait...|what?!|Really?!?|Yes.");
    check_split("\xe2\x80\x9cHello.\xe2\x80\x9d Next \xe2\x80\x98one.\xe2\x80\x99 Last", 0,
                "\xe2\x80\x9cHello.\xe2\x80\x9d|Next \xe2\x80\x98one.\xe2\x80\x99|Last");
    check_split("(Mr. Brown) came.", 0, "(Mr. Brown) came.");
    check_split("See www.example.com now. ok", 0, "See www.example.com now.|ok");
    check_split("end.Next begins", 0, "end.Next begins");
    check_split("A title\n\nFirst line of a\nwrapped sentence. Second\r\n\r\nThird", 0,
                "A title|First line of a wrapped sentence.|Second|Third");
    check_split("Spaces  kept   inside. x\n \t\ny", 0, "Spaces  kept   inside.|x|y");
    check_split("Paragraph one\n  \nParagraph two.", 0, "Paragraph one|Paragraph two.");
    check_split("The U.S. is big.", 0, "The U.S.|is big."); /* dotted words end sentences */
    check_split("It was 5 p.m. and late. etc. Not abbreviated.", 0,
                "It was 5 p.m.|and late.|etc.|Not abbreviated.");
    check_split("mr. lower is not listed. ok", 0, "mr.|lower is not listed.|ok");
    /* --keep-newlines: line breaks inside and right after a sentence kept */
    check_split("First line of a\nwrapped sentence. Second\n\nThird\n", 1,
                "First line of a\nwrapped sentence.|Second\n\n|Third\n");
    check_split("One.\n Two.  Three.", 1, "One.\n|Two.|Three.");
    /* reuse of the buffers */
    struct loom_sentences s = {0};
    EXPECT_OK(loom_split_sentences("A b. C d.", 9, 0, &s));
    EXPECT(s.n == 2);
    EXPECT_OK(loom_split_sentences("One", 3, 0, &s));
    EXPECT(s.n == 1 && s.end[0] == 3 && strcmp(s.text, "One") == 0);
    loom_sentences_free(&s);
}

/* ---------------------------------------------------------------------------------------- */
/* synthetic datasets                                                                       */

/* vocab: 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK], 5.. words w5..w49, 50..59 ##p50.. */
static void write_vocab(const char *path, int with_mask) {
    FILE *f = fopen(path, "w");
    fprintf(f, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n%s\n", with_mask ? "[MASK]" : "[unused0]");
    for (int i = 5; i < 50; i++) fprintf(f, "w%d\n", i);
    for (int i = 50; i < 60; i++) fprintf(f, "##p%d\n", i);
    fclose(f);
}

/* docs[d] = number of sentences; sentence lengths from `len_of(d, s)`; ids 5..59 cycling */
static void write_dataset(const char *prefix, int ndocs, const int *nsent,
                          int64_t (*len_of)(int, int)) {
    struct loom_indexed_builder *b = NULL;
    EXPECT_OK(loom_indexed_builder_init(&b, prefix, LOOM_IDX_DTYPE_U16));
    int32_t buf[4096];
    int c = 0;
    for (int d = 0; d < ndocs; d++) {
        for (int s = 0; s < nsent[d]; s++) {
            int64_t n = len_of(d, s);
            for (int64_t i = 0; i < n; i++) buf[i] = 5 + (c++ % 55);
            EXPECT_OK(loom_indexed_builder_add_sequence(b, buf, n));
        }
        EXPECT_OK(loom_indexed_builder_end_document(b));
    }
    EXPECT_OK(loom_indexed_builder_finish(b));
    loom_indexed_builder_free(b);
}

static int64_t len_varied(int d, int s) { return 3 + (d * 7 + s * 13) % 29; }
static int64_t len_long(int d, int s) { return (d == 1 && s == 1) ? LOOM_BERT_LONG_SENTENCE + 1 : 10; }

struct entry {
    int64_t first, end;
};
static int cmp_entry(const void *a, const void *b) {
    const struct entry *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* Megatron's walk with a fixed target, written out again */
static int64_t ref_walk(const struct loom_indexed *ix, int64_t d0, int64_t d1, int64_t target,
                        int min_sent, struct entry *out) {
    int64_t n = 0;
    for (int64_t d = d0; d < d1; d++) {
        int64_t a = loom_indexed_doc_index(ix, d), b = loom_indexed_doc_index(ix, d + 1);
        if (b - a < min_sent) continue;
        int skip = 0;
        for (int64_t s = a; s < b && b - a > 1; s++)
            if (loom_indexed_sequence_length(ix, s) > LOOM_BERT_LONG_SENTENCE) skip = 1;
        if (skip) continue;
        int64_t start = a, len = 0, cnt = 0;
        for (int64_t s = a; s < b; s++) {
            len += loom_indexed_sequence_length(ix, s);
            cnt++;
            int64_t left = b - s - 1;
            if ((len >= target && left > 1 && cnt >= min_sent) || left == 0) {
                out[n++] = (struct entry){start, s + 1};
                start = s + 1;
                len = cnt = 0;
            }
        }
    }
    return n;
}

static void test_mapping(const struct loom_tokenizer *tok) {
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s/varied", g_dir);
    int nsent[40];
    for (int d = 0; d < 40; d++) nsent[d] = d % 9; /* 0..8 sentences, some documents empty */
    write_dataset(prefix, 40, nsent, len_varied);
    struct loom_indexed *ix = NULL;
    EXPECT_OK(loom_indexed_open(&ix, prefix));
    if (!ix) return;
    for (int head = 0; head <= 1; head++) {
        struct loom_bert_dataset_config cfg;
        loom_bert_dataset_config_default(&cfg);
        cfg.data_path = prefix;
        cfg.tokenizer = tok;
        cfg.split = "3,1,0";
        cfg.seq_length = 40;
        cfg.short_seq_prob = 0;
        cfg.binary_head = head;
        cfg.num_samples = 0;
        struct loom_bert_dataset *ds = NULL;
        EXPECT_OK(loom_bert_dataset_open(&ds, &cfg));
        if (!ds) continue;
        int64_t b, e, used;
        loom_bert_dataset_documents(ds, &b, &e, &used);
        EXPECT(b == 0 && e == 30);
        struct entry want[400], got[400];
        int64_t nw = ref_walk(ix, b, e, 37, head ? 2 : 1, want);
        int64_t n = loom_bert_dataset_len(ds);
        EXPECTF(n == nw, "head %d: %lld samples, the walk gives %lld", head, (long long)n,
                (long long)nw);
        EXPECT(loom_bert_dataset_num_epochs(ds) == 1);
        for (int64_t k = 0; k < n && k < 400; k++) {
            int64_t f, en, t;
            EXPECT_OK(loom_bert_dataset_mapping(ds, k, &f, &en, &t));
            got[k] = (struct entry){f, en};
            EXPECT(t == 37);
        }
        if (n == nw) {
            qsort(got, (size_t)n, sizeof *got, cmp_entry);
            qsort(want, (size_t)nw, sizeof *want, cmp_entry);
            EXPECT(memcmp(got, want, (size_t)n * sizeof *got) == 0);
        }
        loom_bert_dataset_free(ds);

        /* epochs: whole epochs until num_samples is reached */
        cfg.num_samples = 3 * nw + 1;
        EXPECT_OK(loom_bert_dataset_open(&ds, &cfg));
        if (ds) {
            EXPECT(loom_bert_dataset_num_epochs(ds) == 4 && loom_bert_dataset_len(ds) == 4 * nw);
            loom_bert_dataset_free(ds);
        }
        /* the valid split's documents */
        cfg.which = LOOM_SPLIT_VALID;
        cfg.num_samples = 0;
        EXPECT_OK(loom_bert_dataset_open(&ds, &cfg));
        if (ds) {
            loom_bert_dataset_documents(ds, &b, &e, &used);
            EXPECT(b == 30 && e == 40);
            EXPECT(loom_bert_dataset_len(ds) == ref_walk(ix, 30, 40, 37, head ? 2 : 1, want));
            loom_bert_dataset_free(ds);
        }
    }
    /* short targets: drawn in [2, T - 3], about short_seq_prob of them */
    {
        struct loom_bert_dataset_config cfg;
        loom_bert_dataset_config_default(&cfg);
        cfg.data_path = prefix;
        cfg.tokenizer = tok;
        cfg.seq_length = 40;
        cfg.short_seq_prob = 0.3;
        cfg.num_samples = 20000;
        struct loom_bert_dataset *ds = NULL;
        EXPECT_OK(loom_bert_dataset_open(&ds, &cfg));
        if (ds) {
            int64_t n = loom_bert_dataset_len(ds), shorts = 0, lo = 99, hi = 0;
            for (int64_t k = 0; k < n; k++) {
                int64_t f, en, t;
                EXPECT_OK(loom_bert_dataset_mapping(ds, k, &f, &en, &t));
                if (t < 37) shorts++;
                lo = t < lo ? t : lo;
                hi = t > hi ? t : hi;
            }
            EXPECT(lo == 2 && hi == 37);
            /* one target per sample, short with probability 0.3 (and then 37 one time in 36):
             * 0.2917 expected, 0.0032 its deviation over 20000 samples */
            EXPECTF(shorts > n * 28 / 100 && shorts < n * 30 / 100, "%lld short of %lld",
                    (long long)shorts, (long long)n);
            loom_bert_dataset_free(ds);
        }
    }
    loom_indexed_free(ix);
}

static void test_skips_and_pieces(const struct loom_tokenizer *tok) {
    /* document 1 has a sentence over LOOM_BERT_LONG_SENTENCE tokens: skipped */
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s/long", g_dir);
    int nsent[3] = {3, 3, 3};
    write_dataset(prefix, 3, nsent, len_long);
    struct loom_bert_dataset_config cfg;
    loom_bert_dataset_config_default(&cfg);
    cfg.data_path = prefix;
    cfg.tokenizer = tok;
    cfg.split = "1";
    cfg.seq_length = 64;
    struct loom_bert_dataset *ds = NULL;
    EXPECT_OK(loom_bert_dataset_open(&ds, &cfg));
    if (ds) {
        int64_t used;
        loom_bert_dataset_documents(ds, NULL, NULL, &used);
        EXPECT(used == 2);
        for (int64_t k = 0; k < loom_bert_dataset_len(ds); k++) {
            int64_t f, e, t;
            EXPECT_OK(loom_bert_dataset_mapping(ds, k, &f, &e, &t));
            EXPECT(f >= 6 || e <= 3);
        }
        loom_bert_dataset_free(ds);
    }

    /* a "##" piece opening segment B starts a word of its own (it is not joined to the word
     * before the [SEP]) */
    snprintf(prefix, sizeof prefix, "%s/pieces", g_dir);
    struct loom_indexed_builder *b = NULL;
    EXPECT_OK(loom_indexed_builder_init(&b, prefix, LOOM_IDX_DTYPE_U16));
    int32_t s1[] = {5, 50, 51, 6, 52}, s2[] = {53, 54, 7, 55};
    for (int d = 0; d < 4; d++) {
        EXPECT_OK(loom_indexed_builder_add_sequence(b, s1, 5));
        EXPECT_OK(loom_indexed_builder_add_sequence(b, s2, 4));
        EXPECT_OK(loom_indexed_builder_end_document(b));
    }
    EXPECT_OK(loom_indexed_builder_finish(b));
    loom_indexed_builder_free(b);
    cfg.data_path = prefix;
    cfg.seq_length = 16;
    cfg.short_seq_prob = 0;
    cfg.mask_prob = 0.5;
    cfg.num_samples = 400;
    EXPECT_OK(loom_bert_dataset_open(&ds, &cfg));
    if (ds) {
        struct loom_bert_sample s;
        EXPECT_OK(loom_bert_sample_alloc(&s, 16));
        int swapped = 0, plain = 0;
        for (int64_t k = 0; k < loom_bert_dataset_len(ds); k++) {
            struct loom_bert_sample_stats sx;
            EXPECT_OK(loom_bert_dataset_get_stats(ds, k, &s, &sx));
            /* words {5 50 51} {6 52} {53 54} {7 55} in either order */
            EXPECT(s.num_tokens == 12 && sx.num_words == 4 && !sx.truncated);
            EXPECT(s.is_random ? sx.len_a == 4 : sx.len_a == 5);
            swapped += s.is_random;
            plain += !s.is_random;
            /* budget min(0.5 * 13, round(12 * 0.5)) = 6 tokens */
            EXPECT(sx.num_to_predict == 6 && sx.num_masked <= 6 && sx.num_masked >= 4);
            int32_t orig[16];
            for (int i = 0; i < 16; i++) orig[i] = s.labels[i] >= 0 ? s.labels[i] : s.tokens[i];
            /* every word all masked or not at all */
            for (int i = 1; i < 12; i++) {
                int piece = orig[i] >= 50 && orig[i] < 60;
                int joined = piece && orig[i - 1] != 2 && orig[i - 1] != 3;
                if (joined) EXPECT((s.labels[i] >= 0) == (s.labels[i - 1] >= 0));
            }
            EXPECT(s.labels[0] == -1 && s.labels[s.is_random ? 5 : 6] == -1 && s.labels[11] == -1);
        }
        EXPECT(swapped > 150 && plain > 150);
        loom_bert_sample_free(&s);
        loom_bert_dataset_free(ds);
    }
}

static void test_errors(const struct loom_tokenizer *tok, const char *vocab_nomask) {
    char docs[300], varied[300];
    snprintf(docs, sizeof docs, "%s/onedoc", g_dir);
    snprintf(varied, sizeof varied, "%s/varied", g_dir);
    int nsent[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    write_dataset(docs, 10, nsent, len_varied);
    struct loom_bert_dataset_config cfg;
    loom_bert_dataset_config_default(&cfg);
    cfg.data_path = docs;
    cfg.tokenizer = tok;
    cfg.seq_length = 64;
    struct loom_bert_dataset *ds = NULL;
    /* one sequence per document: no binary-head sample, said so */
    EXPECT_FAIL(loom_bert_dataset_open(&ds, &cfg), LOOM_ERR_INVALID_ARG, "onedoc",
                "2 sentences", "--split-sentences", "--bert-no-binary-head");
    cfg.binary_head = 0;
    EXPECT_OK(loom_bert_dataset_open(&ds, &cfg));
    if (ds) {
        EXPECT(loom_bert_dataset_len(ds) == 10);
        loom_bert_dataset_free(ds);
        ds = NULL;
    }
    cfg.binary_head = 1;
    cfg.data_path = varied;
    struct loom_bert_dataset_config c = cfg;
    c.seq_length = 4;
    EXPECT_FAIL(loom_bert_dataset_open(&ds, &c), LOOM_ERR_INVALID_ARG, "--seq-length", "5");
    c = cfg;
    c.mask_prob = 1.5;
    EXPECT_FAIL(loom_bert_dataset_open(&ds, &c), LOOM_ERR_INVALID_ARG, "--mask-prob", "[0, 1]");
    c = cfg;
    c.short_seq_prob = -0.1;
    EXPECT_FAIL(loom_bert_dataset_open(&ds, &c), LOOM_ERR_INVALID_ARG, "--short-seq-prob");
    c = cfg;
    c.data_path = "0.5 a 0.5 b";
    EXPECT_FAIL(loom_bert_dataset_open(&ds, &c), LOOM_ERR_INVALID_ARG, "--data-path", "blend");
    c = cfg;
    c.split = "1,0,0";
    c.which = LOOM_SPLIT_TEST;
    EXPECT_FAIL(loom_bert_dataset_open(&ds, &c), LOOM_ERR_INVALID_ARG, "--split 1,0,0", "test",
                "no documents");
    c = cfg;
    char missing[320];
    snprintf(missing, sizeof missing, "%s/missing", g_dir);
    c.data_path = missing;
    EXPECT_FAIL(loom_bert_dataset_open(&ds, &c), LOOM_ERR_IO, "missing");
    struct loom_tokenizer *nomask = NULL;
    EXPECT_OK(loom_tokenizer_load(&nomask, "BertWordPieceLowerCase", vocab_nomask, NULL));
    if (nomask) {
        c = cfg;
        c.tokenizer = nomask;
        EXPECT_FAIL(loom_bert_dataset_open(&ds, &c), LOOM_ERR_INVALID_ARG, "[MASK]", "WordPiece");
        loom_tokenizer_free(nomask);
    }
    /* ids beyond the vocabulary */
    char big[300];
    snprintf(big, sizeof big, "%s/bigids", g_dir);
    struct loom_indexed_builder *b = NULL;
    EXPECT_OK(loom_indexed_builder_init(&b, big, LOOM_IDX_DTYPE_U16));
    int32_t s1[] = {5, 6, 7}, s2[] = {8, 900, 9};
    EXPECT_OK(loom_indexed_builder_add_sequence(b, s1, 3));
    EXPECT_OK(loom_indexed_builder_add_sequence(b, s2, 3));
    EXPECT_OK(loom_indexed_builder_finish(b));
    loom_indexed_builder_free(b);
    c = cfg;
    c.data_path = big;
    c.split = "1";
    EXPECT_OK(loom_bert_dataset_open(&ds, &c));
    if (ds) {
        struct loom_bert_sample s;
        EXPECT_OK(loom_bert_sample_alloc(&s, 64));
        EXPECT_FAIL(loom_bert_dataset_get(ds, 0, &s), LOOM_ERR_FORMAT, "900", "vocabulary");
        EXPECT_FAIL(loom_bert_dataset_get(ds, loom_bert_dataset_len(ds), &s), LOOM_ERR_INVALID_ARG,
                    "out of range");
        loom_bert_sample_free(&s);
        loom_bert_dataset_free(ds);
    }
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/loom_bert_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_splitter();
    char vocab[320], vocab_nomask[320];
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", g_dir);
    snprintf(vocab_nomask, sizeof vocab_nomask, "%s/vocab_nomask.txt", g_dir);
    write_vocab(vocab, 1);
    write_vocab(vocab_nomask, 0);
    struct loom_tokenizer *tok = NULL;
    EXPECT_OK(loom_tokenizer_load(&tok, "BertWordPieceLowerCase", vocab, NULL));
    if (tok) {
        test_mapping(tok);
        test_skips_and_pieces(tok);
        test_errors(tok, vocab_nomask);
        loom_tokenizer_free(tok);
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return expect_finish("test_bert_dataset");
}
