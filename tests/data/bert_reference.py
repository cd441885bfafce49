#!/usr/bin/python3
"""Reference BERT WordPiece in plain Python, for the tokenizer tests.

    bert_reference.py VOCAB_TXT lower|cased OUT_DIR FILE...

Writes OUT_DIR/<basename of FILE>.ids, one id per line. Written from the description of the
original BERT tokenizer (the one Megatron ships), with Python's own unicodedata and str.lower(),
so that it checks loom's generated Unicode tables against the Python they came from:
clean-up (drop NUL, U+FFFD and category C* except TAB/LF/CR; TAB/LF/CR/Zs -> space), spaces
around CJK ideographs, str.split(), per word str.lower() + NFD with Mn removed (lower only),
punctuation split off, str.split() again, then greedy longest-match-first WordPiece with "##"
continuations, [UNK] for unmatched words and words over 200 characters.
"""
import os
import sys
import unicodedata

MAX_WORD_CHARS = 200


def is_cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or
            0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or
            0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def is_space(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_control(ch):
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch).startswith("C")


def is_punct(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def basic(text, lower):
    buf = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or is_control(ch):
            continue
        if is_space(ch):
            buf.append(" ")
        elif is_cjk(cp):
            buf.append(" " + ch + " ")
        else:
            buf.append(ch)
    words = []
    for w in "".join(buf).split():
        if lower:
            w = w.lower()
            w = "".join(c for c in unicodedata.normalize("NFD", w) if unicodedata.category(c) != "Mn")
        cur = []
        for c in w:
            if is_punct(c):
                if cur:
                    words.append("".join(cur))
                    cur = []
                words.append(c)
            else:
                cur.append(c)
        if cur:
            words.append("".join(cur))
    return " ".join(words).split()


def wordpiece(word, vocab, unk):
    if len(word) > MAX_WORD_CHARS:
        return [unk]
    out = []
    start = 0
    while start < len(word):
        end = len(word)
        found = None
        while start < end:
            piece = word[start:end]
            if start > 0:
                piece = "##" + piece
            if piece in vocab:
                found = vocab[piece]
                break
            end -= 1
        if found is None:
            return [unk]
        out.append(found)
        start = end
    return out


def load_vocab(path):
    vocab = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            vocab[line.strip()] = i
    return vocab


def main():
    vocab_path, mode, out_dir = sys.argv[1:4]
    vocab = load_vocab(vocab_path)
    unk = vocab["[UNK]"]
    for path in sys.argv[4:]:
        text = open(path, "rb").read().decode("utf-8")
        ids = []
        for w in basic(text, mode == "lower"):
            ids.extend(wordpiece(w, vocab, unk))
        with open(os.path.join(out_dir, os.path.basename(path) + ".ids"), "w") as f:
            f.write("".join("%d\n" % i for i in ids))


if __name__ == "__main__":
    main()
