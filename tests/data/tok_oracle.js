// Oracle of the tokenizer tests for the tokenizers of imported models: encodes files with an
// independent JavaScript implementation from the pinned npm packages.
//
//   node tok_oracle.js KIND MODEL NODE_MODULES OUT_DIR SHARD NSHARDS FILE...
//
//   KIND hf        MODEL: a folder with tokenizer.json and tokenizer_config.json; encoded by
//                  @lenml/tokenizers (a port of transformers.js), special tokens included
//   KIND tiktoken  MODEL: ENCODING:OFFSET, e.g. cl100k_base:1000; encoded by js-tiktoken's
//                  encode_ordinary equivalent (no special tokens), every id plus OFFSET (the
//                  special tokens Megatron-LM's TikTokenizer puts first)
//   KIND spm       MODEL: a SentencePiece .model; encoded by SentencePiece itself (its
//                  WebAssembly build in @sctg/sentencepiece-js), with the bos id first as
//                  Megatron-LM's Llama2Tokenizer does
//
// Writes OUT_DIR/<basename>.ids.<SHARD>: the ids of the SHARD-th of NSHARDS contiguous parts.
// Texts are cut into parts only where cutting cannot change the result: before a U+0020 that
// follows a character other than whitespace (no pre-tokenizer match of these files spans such a
// place). SentencePiece-style files (no pre-tokenizer: the whole text is one word) are not cut.
//
// The regexes of tokenizer.json files and tiktoken encodings are written for engines whose \s is
// Unicode White_Space; JavaScript's \s differs (it has U+FEFF, lacks U+0085). The oracle is
// handed each pattern with \s spelled out as White_Space, so that it splits as those engines do.
'use strict';
const fs = require('fs');
const path = require('path');

const [kind, model, nodeModules, outDir, shardArg, nshardArg, ...files] = process.argv.slice(2);
const shard = Number(shardArg), nshards = Number(nshardArg);
if (!kind || !model || !nodeModules || !outDir || !(nshards >= 1) || files.length === 0) {
  console.error('usage: node tok_oracle.js hf|tiktoken|spm MODEL NODE_MODULES OUT_DIR SHARD NSHARDS FILE...');
  process.exit(2);
}
const nm = (p) => require(path.join(path.resolve(nodeModules), p));

const WS = '\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
function whiteSpace(pat) {
  let out = '', inClass = false;
  for (let i = 0; i < pat.length; i++) {
    const c = pat[i];
    if (c === '\\' && i + 1 < pat.length) {
      const d = pat[i + 1];
      if (d === 's') out += inClass ? WS : '[' + WS + ']';
      else if (d === 'S' && !inClass) out += '[^' + WS + ']';
      else out += c + d;
      i++;
      continue;
    }
    if (c === '[' && !inClass) inClass = true;
    else if (c === ']' && inClass) inClass = false;
    out += c;
  }
  return out;
}

function fixPretok(p) {
  if (!p) return;
  if (p.type === 'Sequence') p.pretokenizers.forEach(fixPretok);
  if (p.type === 'Split' && p.pattern && p.pattern.Regex) p.pattern.Regex = whiteSpace(p.pattern.Regex);
}

let encode, cuttable = true, bos = null;
async function setup() {
  if (kind === 'hf') {
    const json = JSON.parse(fs.readFileSync(path.join(model, 'tokenizer.json'), 'utf8'));
    const config = JSON.parse(fs.readFileSync(path.join(model, 'tokenizer_config.json'), 'utf8'));
    fixPretok(json.pre_tokenizer);
    cuttable = json.pre_tokenizer !== null && !json.post_processor?.type?.includes('Template');
    const { TokenizerLoader } = nm('@lenml/tokenizers');
    const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });
    encode = (t) => tok.encode(t);
  } else if (kind === 'tiktoken') {
    const [name, off] = model.split(':');
    const ranks = nm('js-tiktoken/dist/ranks/' + name + '.cjs');
    const { Tiktoken } = nm('js-tiktoken/dist/lite.cjs');
    const r = ranks.default || ranks;
    const enc = new Tiktoken({ ...r, pat_str: whiteSpace(r.pat_str) });
    const offset = Number(off || 0);
    encode = (t) => enc.encode(t, [], []).map((x) => x + offset);
  } else if (kind === 'spm') {
    const { SentencePieceProcessor } = nm('@sctg/sentencepiece-js');
    const sp = new SentencePieceProcessor();
    await sp.loadFromB64StringModel(fs.readFileSync(model).toString('base64'));
    cuttable = false;
    bos = 1;
    encode = (t) => Array.from(sp.encodeIds(t));
  } else {
    throw new Error('unknown kind ' + kind);
  }
}

const isWs = (ch) => /[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/u.test(ch);
function* parts(text, target) {
  if (!cuttable) {
    yield text;
    return;
  }
  let start = 0;
  while (start < text.length) {
    let cut = Math.min(start + target, text.length);
    while (cut < text.length && !(text[cut] === ' ' && !isWs(text[cut - 1]))) cut++;
    yield text.slice(start, cut);
    start = cut;
  }
}

setup().then(() => {
  for (const f of files) {
    const text = fs.readFileSync(f, 'utf8');
    const all = Array.from(parts(text, 4096));
    const lo = Math.floor(all.length * shard / nshards), hi = Math.floor(all.length * (shard + 1) / nshards);
    const out = [];
    if (bos !== null && shard === 0) out.push(bos);
    for (const p of all.slice(lo, hi)) for (const id of encode(p)) out.push(id);
    fs.writeFileSync(path.join(outDir, path.basename(f) + '.ids.' + shard), out.length ? out.join('\n') + '\n' : '');
  }
}).catch((e) => { console.error('tok_oracle: ' + (e && e.stack || e)); process.exit(1); });
