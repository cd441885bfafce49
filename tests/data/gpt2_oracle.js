// GPT-2 oracle for the tokenizer tests: encodes files with the pinned gpt-3-encoder package.
//
//   node gpt2_oracle.js NODE_MODULES_DIR OUT_DIR SHARD NSHARDS FILE...
//
// Writes OUT_DIR/<basename of FILE>.ids.<SHARD> with one id per line: the ids of the SHARD-th of
// NSHARDS contiguous parts of the file (run NSHARDS processes and concatenate the parts in
// order to use several cores). Each file is read as UTF-8 (the
// tests give it valid UTF-8 only). The package appends to its result with Array.concat, which
// is quadratic on a whole book, so the text is cut into pieces of a few KiB first, and only
// where cutting cannot change the pre-tokenization: between a non-whitespace character and a
// whitespace character (no GPT-2 pattern match spans such a boundary, and the match before it
// does not look ahead).
'use strict';
const fs = require('fs');
const path = require('path');

const [nodeModules, outDir, shardArg, nshardArg, ...files] = process.argv.slice(2);
const shard = Number(shardArg), nshards = Number(nshardArg);
if (!nodeModules || !outDir || !(nshards >= 1) || !(shard >= 0 && shard < nshards) || files.length === 0) {
  console.error('usage: node gpt2_oracle.js NODE_MODULES_DIR OUT_DIR SHARD NSHARDS FILE...');
  process.exit(2);
}
const { encode } = require(path.join(path.resolve(nodeModules), 'gpt-3-encoder'));

const isSpace = (ch) => /\s/u.test(ch);

function* pieces(text, target) {
  let start = 0;
  while (start < text.length) {
    let cut = Math.min(start + target, text.length);
    // move forward to the next non-space -> space boundary (or the end)
    while (cut < text.length && !(isSpace(text[cut]) && !isSpace(text[cut - 1]))) cut++;
    // never split a surrogate pair: a boundary char is whitespace, which is BMP
    yield text.slice(start, cut);
    start = cut;
  }
}

for (const f of files) {
  const text = fs.readFileSync(f, 'utf8');
  const all = Array.from(pieces(text, 512));
  const lo = Math.floor(all.length * shard / nshards), hi = Math.floor(all.length * (shard + 1) / nshards);
  const out = [];
  for (const p of all.slice(lo, hi)) {
    for (const id of encode(p)) out.push(id);
  }
  fs.writeFileSync(path.join(outDir, path.basename(f) + '.ids.' + shard), out.length ? out.join('\n') + '\n' : '');
}
