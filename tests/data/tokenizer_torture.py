#!/usr/bin/python3
"""Write the Unicode torture set of the tokenizer tests.

    tokenizer_torture.py OUT_DIR

OUT_DIR/valid/*.txt      valid UTF-8 texts: hand-written cases (emoji, CJK, combining marks,
                         Arabic, digits in letters, contractions in both cases, whitespace runs,
                         trailing spaces, <|endoftext|>, astral characters, NUL bytes, ...), long
                         runs, and seeded random strings over a pool of long-assigned characters
OUT_DIR/wide/*.txt       seeded random strings over every plane, unassigned code points included,
                         with Greek capitals (final sigma), marks of every combining class and
                         Hangul; only for comparisons with an oracle on the same Unicode version
                         (the WordPiece reference runs on Python's unicodedata, as loom's tables)
OUT_DIR/invalid/*.bin    invalid UTF-8; OUT_DIR/invalid.list has "NAME OFFSET" per file, OFFSET
                         being the byte offset of the first bad byte
"""
import os
import random
import sys

CASES = {
    "emoji": "Hello \U0001F44B\U0001F3FD world \U0001F1FA\U0001F1F8 "
             "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 family "
             "\U0001F600\U0001F603\U0001F604!! \u2764\uFE0F \u263A",
    "cjk": "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5\uff0c\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8"
           "\u3001\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\u3002 \u4f60\u597d\uff01\u3053\u3093\u306b\u3061\u306f",
    "combining": "e\u0301 cafe\u0301 Z\u0351\u0315\u0300a\u0300\u0301lgo\u0308 n\u0303o "
                 "\u0301leading mark a\u20dd \u0915\u094d\u0937 \u1100\u1161\u11a8",
    "arabic_hebrew": "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 "
                     "\u0661\u0662\u0663 \u0627\u0644\u0639\u0631\u0628\u064a\u0629\u061f "
                     "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "digits_letters": "abc123def 4567x 1,234.56 3rd 2nd \u0663\u0664\u0665abc \uff15\uff16 x\u00b2\u00b3 "
                      "\u216b \u2460\u2461 12:30pm v1.2.3 0x1F 1e-9 A1B2C3 \u0968\u0966\u0968\u0966",
    "contractions": "I'm you're they've she'll he'd it's don't isn't "
                    "I'M YOU'RE THEY'VE SHE'LL HE'D IT'S DON'T ISN'T "
                    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D ''s ''' 'sss 'dd 'llama "
                    "rock'n'roll o'clock y'all 'tis \u2019s don\u2019t",
    "whitespace_runs": "a  b   c\n\nd\t\te \t \n f\r\n\r\ng    \n   h\n\n\n\n  \t  i",
    "leading_spaces": "     leading spaces",
    "trailing_spaces": "trailing spaces   ",
    "trailing_newline": "a line\n",
    "trailing_mixed": "word \n \t ",
    "only_spaces": "    ",
    "only_newlines": "\n\n\n",
    "single_space": " ",
    "single_letter": "x",
    "empty": "",
    "endoftext": "text<|endoftext|>more <|endoftext|> <|endoftext|><|endoftext|>\n<|endoftext|>",
    "endoftext_alone": "<|endoftext|>",
    "astral": "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522 "
              "\U0001d401\U0001d428\U0001d425\U0001d41d \U0001d7cf\U0001d7d0\U0001d7d1 \U00010348 "
              "\U0002070e\U00020731\U00020779 \U0001f004 \U0001f0cf \U00010000 \U0010fffd \U000e0041",
    "nul": "a\0b \0\0 c\0 \0",
    "unicode_spaces": "a\u00a0b\u2000c\u3000d\ufeffe\u0085f\u180eg\u2028h\u2029i\u202fj\x0bk\x0cl"
                      "\x1cm\x1fn\u205fo\u1680p \u00a0 q\u00a0\u00a0r  \u3000s",
    "punctuation": "Hello!!! ...what?! (really) [yes] {no} \"quoted\" 'single' \u2014 \u2013 \u2026 "
                   "\u00ab \u00bb \u00bf\u00a1 @#$%^&*_+=~`|\\/<>  -- ;;: \u00a7\u00b6",
    "code": "def f(x):\n    return x**2  # comment\n\tif (a&&b||c) { y = [1, 2]; }\n"
            "#include <stdio.h>\nint main(void) { return 0; }\n",
    "urls": "https://example.com/path?q=1&r=two#frag mail: someone@example.org, \\\\server\\share",
    "controls": "bell\x07 escape\x1b[31mred\x1b[0m del\x7f c1\u0080\u009f soft\u00adhyphen zwsp\u200bx",
    "latin1": "C\u00e6sar na\u00efve r\u00e9sum\u00e9 \u00dcber Stra\u00dfe \u00e5ngstr\u00f6m "
              "\u0141\u00f3d\u017a \u0130stanbul \u0131",
    "greek_cyrillic": "\u039f\u0394\u039f\u03a3 \u03b1\u03b2\u03b3 \u041f\u0440\u0438\u0432\u0435\u0442 "
                      "\u043c\u0438\u0440! \u0400\u04ff",
    "indic_thai": "\u0928\u092e\u0938\u094d\u0924\u0947 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35 "
                  "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd",
}

LONG = {
    "long_letters": "a" * 5000,
    "long_ab": "ab" * 3000,
    "long_bang": "!" * 3000,
    "long_spaces_x": " " * 3000 + "x",
    "long_digits": "123" * 2000,
    "long_emoji": "\U0001F642" * 1000,
    "long_newlines": "\n" * 2000 + "end",
    "long_word_mix": "".join(chr(0x61 + (i * 7) % 26) for i in range(4000)),
}


def pool():
    cps = []
    cps += list(range(0x20, 0x7F)) * 6                          # ASCII, weighted
    cps += [0x09, 0x0A, 0x0D, 0x00, 0x0B, 0x0C, 0x1C, 0x1F, 0x7F]
    cps += list(range(0xA0, 0x250))                             # Latin-1, Latin Extended
    cps += list(range(0x300, 0x370))                            # combining marks
    cps += list(range(0x391, 0x3CA)) + list(range(0x410, 0x450))  # Greek, Cyrillic
    cps += list(range(0x5D0, 0x5EB)) + list(range(0x621, 0x64B)) + list(range(0x660, 0x66A))
    cps += list(range(0x905, 0x940)) + list(range(0x966, 0x970))  # Devanagari
    cps += list(range(0xE01, 0xE2F))                            # Thai
    cps += [0x85, 0x1680, 0x180E, 0x2000, 0x2005, 0x200A, 0x200B, 0x200D, 0x2028, 0x2029,
            0x202F, 0x205F, 0x3000, 0xFEFF]                     # spaces and near-spaces
    cps += list(range(0x2010, 0x2028)) + list(range(0x2030, 0x205F))  # general punctuation
    cps += list(range(0x2160, 0x2183)) + list(range(0x2460, 0x2474))  # number forms
    cps += list(range(0x3041, 0x3097)) + list(range(0x30A1, 0x30FB))  # kana
    cps += list(range(0x4E00, 0x4E00 + 400))                    # CJK
    cps += list(range(0xAC00, 0xAC00 + 200))                    # Hangul
    cps += list(range(0xFF01, 0xFF5F))                          # fullwidth
    cps += list(range(0x1F600, 0x1F650)) + list(range(0x1D400, 0x1D450))  # emoji, math letters
    cps += [0x1F3FB, 0x1F3FF, 0xFE0F]
    return cps


def random_strings(n, seed):
    rnd = random.Random(seed)
    p = pool()
    frags = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "<|endoftext|>", "  ", " \n",
             "\r\n", "\t\t", "123", " the", "The", "   "]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rnd.randint(1, 60)):
            if rnd.random() < 0.12:
                parts.append(rnd.choice(frags))
            else:
                parts.append(chr(rnd.choice(p)))
        out.append("".join(parts))
    return out


def wide_strings(n, seed):
    rnd = random.Random(seed)
    special = ([0x3A3, 0x3A3, 0x391, 0x3B1, 0x130, 0x131, 0x345, 0x2E, 0x27, 0x3A, 0xB7, 0x2019,
                0x1D165, 0x1D16D, 0x1D16E, 0x1D15F, 0x1D160, 0x1B44, 0x0F73, 0x0F81, 0x1E08, 0x1EA4,
                0x3099, 0x309A, 0x0E38, 0x0E48, 0x0301, 0x0345, 0x0BCA, 0xFB2C, 0x2126, 0x212B,
                0xF900, 0x2F800, 0xFFFD, 0x00, 0x200D, 0x2028, 0x2029, 0x1680, 0x85]
               + list(range(0x300, 0x370)) + list(range(0x1F00, 0x1F20)) + list(range(0xAC00, 0xAC40)))
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rnd.randint(1, 80)):
            r = rnd.random()
            if r < 0.3:
                cp = rnd.choice(special)
            elif r < 0.5:
                cp = rnd.randint(0x20, 0x7E)
            elif r < 0.6:
                cp = 0x20
            elif r < 0.8:
                cp = rnd.randint(0x80, 0xFFFF)
            else:
                cp = rnd.randint(0x10000, 0x10FFFF)
            if 0xD800 <= cp <= 0xDFFF:
                cp = 0x20
            parts.append(chr(cp))
        out.append("".join(parts))
    return out


INVALID = [
    ("lone_continuation", b"abc\x80def", 3),
    ("truncated_end", b"abc \xe2\x82", 4),
    ("bad_second", b"x\xc3(", 1),
    ("overlong_slash", b"ok \xc0\xaf", 3),
    ("overlong_3", b"\xe0\x80\xaf", 0),
    ("surrogate_high", b"text \xed\xa0\x80 more", 5),
    ("surrogate_low", b"\xed\xbf\xbf", 0),
    ("above_max", b"12345678 \xf4\x90\x80\x80", 9),
    ("f5_byte", b"\xf5\x80\x80\x80", 0),
    ("ff_byte", b"hello world, fine so far \xff", 25),
    ("latin1_word", "caf\u00e9".encode("latin-1"), 3),
    ("valid_then_bad", "\u4e2d\u6587 \U0001F600 ".encode() + b"\xa0", 12),
]


def main():
    out = sys.argv[1]
    os.makedirs(os.path.join(out, "valid"), exist_ok=True)
    os.makedirs(os.path.join(out, "invalid"), exist_ok=True)
    for name, text in list(CASES.items()) + list(LONG.items()):
        with open(os.path.join(out, "valid", name + ".txt"), "wb") as f:
            f.write(text.encode("utf-8"))
    with open(os.path.join(out, "valid", "all_cases.txt"), "wb") as f:
        f.write("\n".join(CASES.values()).encode("utf-8"))
    for i, s in enumerate(random_strings(300, 20240601)):
        with open(os.path.join(out, "valid", "random_%03d.txt" % i), "wb") as f:
            f.write(s.encode("utf-8"))
    os.makedirs(os.path.join(out, "wide"), exist_ok=True)
    for i, s in enumerate(wide_strings(400, 99)):
        with open(os.path.join(out, "wide", "wide_%03d.txt" % i), "wb") as f:
            f.write(s.encode("utf-8"))
    with open(os.path.join(out, "invalid.list"), "w") as lst:
        for name, data, off in INVALID:
            try:
                data.decode("utf-8")
                raise SystemExit("torture: %s is valid UTF-8" % name)
            except UnicodeDecodeError as e:
                assert e.start == off, (name, e.start, off)
            with open(os.path.join(out, "invalid", name + ".bin"), "wb") as f:
                f.write(data)
            lst.write("%s %d\n" % (name, off))


if __name__ == "__main__":
    main()
