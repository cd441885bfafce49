/* Tokenizers under Megatron-LM's --tokenizer-type names (docs/tokenizers.md has the details):
 *
 *   type                       files
 *   GPT2BPETokenizer           --vocab-file vocab.json --merge-file merges.txt
 *   BertWordPieceLowerCase     --vocab-file vocab.txt
 *   BertWordPieceCase          --vocab-file vocab.txt
 *   HuggingFaceTokenizer       --tokenizer-model tokenizer.json, or a folder holding one (and
 *                              tokenizer_config.json, for the end-of-document token)
 *   SentencePieceTokenizer     --tokenizer-model tokenizer.model (SentencePiece ModelProto, BPE)
 *   GPTSentencePieceTokenizer  --tokenizer-model tokenizer.model
 *   Llama2Tokenizer            --tokenizer-model tokenizer.model
 *   TikTokenizer               --tokenizer-model a tiktoken rank file, --tiktoken-pattern
 *   NullTokenizer              --vocab-size N: text is ids written as decimal numbers
 *
 * GPT-2 gives exactly the ids of OpenAI's encoder (and of the gpt-3-encoder npm package, which the
 * tests run as the oracle). Pre-tokenization uses the GPT-2 pattern with JavaScript's meaning of
 * \s (the oracle's: TAB..CR, Zs, U+2028, U+2029, U+FEFF); OpenAI's Python encoder (regex
 * module, White_Space) differs on exactly two characters: U+0085 is a space there, U+FEFF not. The text
 * "<|endoftext|>" inside a document is NOT the special token: it is encoded as ordinary text
 * (<|, endoftext, |>), as Megatron's GPT2Tokenizer and the oracle do; the end-of-document id is
 * appended by the caller (preprocess --append-eod) from loom_tokenizer_eod().
 *
 * WordPiece follows the original BERT tokenizer that Megatron ships: clean-up (NUL, U+FFFD and
 * control characters removed, whitespace made a space), CJK ideographs split off, for the
 * LowerCase variant Python's str.lower() then NFD with nonspacing marks (Mn) removed,
 * punctuation split off, then greedy longest-match-first with "##" continuations; a word that
 * matches nowhere, or is longer than LOOM_WORDPIECE_MAX_WORD_CHARS code points, becomes [UNK].
 * Unicode properties are those of Python 3.11's unicodedata (Unicode 14.0).
 *
 * Thread safety: a loaded tokenizer is read-only; any number of threads may call encode/decode
 * on it at once (GPT-2 keeps a per-thread cache of pieces, 4 MB per thread, freed when the thread
 * exits).
 */
#ifndef LOOM_TOKENIZER_H
#define LOOM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "loom/status.h"

/* Words longer than this many code points become [UNK] (the original BERT tokenizer's and
 * Megatron's max_input_chars_per_word; Hugging Face's BertTokenizer uses 100). */
#define LOOM_WORDPIECE_MAX_WORD_CHARS 200

struct loom_tokenizer;

/* The three SentencePiece front ends of Megatron-LM, over one model reader. */
enum loom_spm_flavor {
    LOOM_SPM_MEGATRON, /* SentencePieceTokenizer: adds <CLS> <SEP> <EOD> <MASK> (and <PAD>/<BOS>/
                          <EOS> the model lacks) after the model's pieces, found in the text as
                          literals; the end of document is <EOD> */
    LOOM_SPM_GPT,      /* GPTSentencePieceTokenizer: the model's ids; end of document </s> */
    LOOM_SPM_LLAMA2,   /* Llama2Tokenizer: <s> first, then the model's ids; end of document </s> */
};

/* Everything a tokenizer may be built from (the flags of the same names). */
struct loom_tokenizer_spec {
    const char *type;             /* --tokenizer-type */
    const char *vocab_file;       /* --vocab-file */
    const char *merge_file;       /* --merge-file */
    const char *tokenizer_model;  /* --tokenizer-model */
    int64_t vocab_size;           /* --vocab-size: NullTokenizer's ids before the end-of-document
                                     one; TikTokenizer's total (0: every rank in the file) */
    const char *tiktoken_pattern; /* --tiktoken-pattern v1|v2|cl100k|o200k (NULL: v2) */
    int64_t tiktoken_num_special_tokens; /* --tiktoken-num-special-tokens (< 0: 1000) */
};

/* The valid --tokenizer-type values, as a LOOM_FLAG_CHOICE list. */
#define LOOM_TOKENIZER_CHOICES                                                                   \
    "GPT2BPETokenizer|BertWordPieceLowerCase|BertWordPieceCase|HuggingFaceTokenizer|"            \
    "SentencePieceTokenizer|GPTSentencePieceTokenizer|Llama2Tokenizer|TikTokenizer|NullTokenizer"

/* The valid --tokenizer-type values, comma-separated (for messages). */
extern const char *const LOOM_TOKENIZER_TYPES;

/* Build a tokenizer from a spec. Missing or unusable files and flags are one-line errors that
 * name the flag or file. */
enum loom_status loom_tokenizer_open(struct loom_tokenizer **out, const struct loom_tokenizer_spec *spec);

/* Load a tokenizer. type: one of the names above (anything else is LOOM_ERR_INVALID_ARG listing
 * the valid names). merge_file: the GPT-2 merges file; must be NULL or is ignored for WordPiece.
 * A missing, unreadable or malformed file is a one-line error naming the file and the problem. */
enum loom_status loom_tokenizer_load(struct loom_tokenizer **out, const char *type,
                                     const char *vocab_file, const char *merge_file);
void loom_tokenizer_free(struct loom_tokenizer *t);

/* Append the ids of text[0..len) to the growable array (*ids, *n, *cap): *ids is realloc'd as
 * needed (it may start as NULL with *n = *cap = 0). Invalid UTF-8 -> LOOM_ERR_FORMAT whose
 * message gives the byte offset of the first bad byte; nothing is appended then. */
enum loom_status loom_tokenizer_encode(const struct loom_tokenizer *t, const char *text,
                                       size_t len, int32_t **ids, size_t *n, size_t *cap);

/* Decode ids to a malloc'd NUL-terminated string (*len excludes the NUL; len may be NULL).
 * GPT-2: the exact bytes of the tokens, so decode(encode(x)) == x for every valid UTF-8 x (ids
 * that split a character may give invalid UTF-8, which is returned as is). WordPiece: tokens
 * joined by spaces with "##" continuations glued to the previous token (lossy, as in BERT).
 * An id outside [0, vocab size) is LOOM_ERR_INVALID_ARG. */
enum loom_status loom_tokenizer_decode(const struct loom_tokenizer *t, const int32_t *ids,
                                       size_t n, char **text, size_t *len);

/* Number of ids (largest id + 1): 50257 for GPT-2, 30522 for bert-base vocab.txt. */
int64_t loom_tokenizer_vocab_size(const struct loom_tokenizer *t);
/* End-of-document id: <|endoftext|> for GPT-2, [SEP] for BERT, the eos_token of
 * tokenizer_config.json for HuggingFaceTokenizer, </s> or <EOD> for SentencePiece, </s> (after the
 * special tokens) for TikTokenizer, vocab size for NullTokenizer; -1 if there is none. */
int32_t loom_tokenizer_eod(const struct loom_tokenizer *t);
/* Special ids by name: "[CLS]" "[SEP]" "[MASK]" "[PAD]" "[UNK]" (also accepted without the
 * brackets, any case), and "BOS": the id that encode puts in front of every text (Llama 2's <s>,
 * a tokenizer.json template's first token); -1 where the tokenizer has none. */
int32_t loom_tokenizer_special(const struct loom_tokenizer *t, const char *name);
/* The type name the tokenizer was loaded with. */
const char *loom_tokenizer_type(const struct loom_tokenizer *t);

#endif
