#!/usr/bin/python3
"""Generate src/data/tokenizer_unicode.c: the Unicode tables of the WordPiece tokenizer.

    /usr/bin/python3 scripts/gen_tokenizer_unicode.py > src/data/tokenizer_unicode.c

The original BERT tokenizer (which Megatron ships) is Python code that asks Python's unicodedata
and str.lower(); these tables are taken from the same Python, so that loom's WordPiece agrees
with it character for character. Tables:

  class    per code point: control (removed), space, punctuation, CJK ideograph, nonspacing mark
           (Mn) with canonical combining class > 0 or = 0, other
  lower    str.lower() for every code point whose lowercase is one other code point, as runs
           (U+0130 -> "i" U+0307 and the final-sigma rule for U+03A3 are handled in code)
  casing   Cased and Case_Ignorable, as str.lower() sees them in its final-sigma rule
  nfd      full canonical decomposition of every code point that has one (Hangul syllables are
           decomposed in code)
  ccc      the canonical combining class of the few non-Mn characters that have one (Mn marks
           are removed after NFD anyway; only their being a starter or not matters)
"""
import sys
import unicodedata as ud

MAXCP = 0x110000
SURR = range(0xD800, 0xE000)

C_OTHER, C_CONTROL, C_SPACE, C_PUNCT, C_CJK, C_MN, C_MN0 = range(7)


def is_cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or
            0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or
            0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def wp_class(cp):
    if cp in SURR:
        return C_CONTROL
    c = chr(cp)
    cat = ud.category(c)
    # _clean_text: NUL, U+FFFD and control characters (category C*, except \t \n \r) go away;
    # whitespace (\t \n \r space, Zs) becomes a space. U+2028/U+2029 (Zl/Zp) survive clean-up
    # but str.split() splits on them, which is the same as a space.
    if c in "\t\n\r " or cat == "Zs" or cp in (0x2028, 0x2029):
        return C_SPACE
    if cp == 0 or cp == 0xFFFD or cat.startswith("C"):
        return C_CONTROL
    if is_cjk(cp):
        return C_CJK
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 or cat.startswith("P"):
        return C_PUNCT
    if cat == "Mn":
        return C_MN if ud.combining(c) else C_MN0
    return C_OTHER


def emit(name, ctype, values, per_line_chars=96):
    out = ["const %s %s[] = {" % (ctype, name)]
    line = "   "
    for v in values:
        item = " %s," % v
        if len(line) + len(item) > per_line_chars:
            out.append(line)
            line = "   "
        line += item
    if line.strip():
        out.append(line)
    out.append("};")
    out.append("const size_t %s_count = %d;" % (name, len(values)))
    return "\n".join(out)


def main():
    parts = []
    # ---- class ranges: (start << 3) | class
    ranges = []
    prev = None
    for cp in range(MAXCP):
        k = wp_class(cp)
        if k != prev:
            ranges.append((cp, k))
            prev = k
    parts.append("/* (first code point << 3) | class, sorted; a class holds up to the next entry */")
    parts.append(emit("loom_tok_class_ranges", "uint32_t", ["0x%X" % ((cp << 3) | k) for cp, k in ranges]))

    # ---- lowercase: runs {first, last, delta, stride}
    low = {}
    for cp in range(MAXCP):
        if cp in SURR:
            continue
        lo = chr(cp).lower()
        if lo != chr(cp):
            if len(lo) == 1:
                low[cp] = ord(lo) - cp
            else:
                assert cp == 0x130 and lo == "i\u0307", (hex(cp), lo)
    runs = []
    for cp in sorted(low):
        d = low[cp]
        if runs:
            first, last, delta, stride = runs[-1]
            if delta == d and (stride == 0 and cp - last in (1, 2) or stride and cp - last == stride):
                runs[-1] = (first, cp, delta, stride or cp - last)
                continue
        runs.append((cp, cp, d, 0))
    runs = [(f, l, d, s or 1) for f, l, d, s in runs]
    # a stride-2 run must not step over a code point that has its own mapping
    for f, l, d, s in runs:
        for cp in range(f, l + 1, s):
            assert low.get(cp) == d
    parts.append("/* {first, last, delta, stride}: lower(c) = c + delta for c = first, first + stride, ... last */")
    parts.append(emit("loom_tok_lower_runs", "struct loom_tok_case_run",
                      ["{0x%X, 0x%X, %d, %d}" % r for r in runs]))

    # ---- casing for the final-sigma rule, probed through str.lower() itself:
    #   (X + "Σ").lower() ends in "ς"      <=> X not case-ignorable and cased
    #   ("AΣ" + X + "B").lower()[1] == "ς" <=> X not case-ignorable and not cased
    flags = []
    for cp in range(MAXCP):
        if cp in SURR:
            flags.append(0)
            continue
        x = chr(cp)
        p1 = (x + "\u03a3").lower()[-1] == "\u03c2"
        p3 = ("A\u03a3" + x + "B").lower()[1] == "\u03c2"
        if p1 and p3:
            raise SystemExit("inconsistent casing probe at U+%04X" % cp)
        ignorable = not p1 and not p3
        flags.append(2 if ignorable else (1 if p1 else 0))
    cranges = []
    prev = None
    for cp, f in enumerate(flags):
        if f != prev:
            cranges.append((cp, f))
            prev = f
    parts.append("/* (first code point << 2) | flags (1: cased, 2: case-ignorable), as the class ranges */")
    parts.append(emit("loom_tok_casing_ranges", "uint32_t", ["0x%X" % ((cp << 2) | f) for cp, f in cranges]))

    # ---- canonical decompositions (full, recursive), Hangul syllables excluded
    keys, pool = [], []
    for cp in range(MAXCP):
        if cp in SURR or 0xAC00 <= cp <= 0xD7A3:
            continue
        d = ud.normalize("NFD", chr(cp))
        if d != chr(cp):
            assert 1 <= len(d) <= 7
            keys.append((cp << 3) | len(d))
            pool.extend(ord(c) for c in d)
    parts.append("/* (code point << 3) | length of its decomposition, sorted, for every code point that has\n"
                 " * a canonical decomposition; the decompositions follow each other in pool, in the same order */")
    parts.append(emit("loom_tok_nfd_keys", "uint32_t", ["0x%X" % k for k in keys]))
    parts.append(emit("loom_tok_nfd_pool", "uint32_t", ["0x%X" % c for c in pool]))

    # ---- ccc of the non-Mn characters that have one
    ccc = [(cp, ud.combining(chr(cp))) for cp in range(MAXCP)
           if cp not in SURR and ud.combining(chr(cp)) and ud.category(chr(cp)) != "Mn"]
    parts.append("/* {code point, canonical combining class} of the non-Mn characters whose class is not 0 */")
    parts.append(emit("loom_tok_ccc_marks", "struct loom_tok_ccc", ["{0x%X, %d}" % x for x in ccc]))

    head = ("/* GENERATED by scripts/gen_tokenizer_unicode.py with Python %s (unicodedata %s).\n"
            " * Do not edit: rerun the script. Unicode tables of the WordPiece tokenizer\n"
            " * (tokenizer_wordpiece.c); what each table holds is said in the script. */\n"
            "#include \"data/tokenizer_impl.h\"\n" % (sys.version.split()[0], ud.unidata_version))
    print(head)
    print("\n\n".join(parts))


if __name__ == "__main__":
    main()
