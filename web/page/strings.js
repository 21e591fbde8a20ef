// The page's wording. Everything the page shows is written in English, in index.html (elements marked
// data-t, data-t-aria, data-t-title) and in app.js (through tr / trc below), and looked up by that English
// text in ko.json, which the build generates from po/ko.po: first under the context "web" (short labels of
// this page), then without one (sentences the reports share). {1}, {2}, ... are values filled in, as in
// po/ko.po. A new sentence on the page needs its Korean in po/ko.po (msgfmt --check -o /dev/null po/ko.po).
'use strict';

const I18n = {
  lang: 'en',
  catalog: {},
  // English strings looked up in Korean that have no entry (the page's test checks that none are left)
  missing: new Set(),
};

function fill(text, args) {
  return text.replace(/\{(\d+)\}/g, (whole, n) => (args[n - 1] === undefined ? whole : String(args[n - 1])));
}

function lookup(ctx, text, required) {
  if (I18n.lang !== 'ko') return text;
  const c = I18n.catalog;
  const found = (ctx && c[ctx + '\u0004' + text]) || c['web\u0004' + text] || c[text];
  if (found) return found;
  if (required) I18n.missing.add(ctx ? ctx + ': ' + text : text);
  return text;
}

// tr('Run {1} steps', 40): the page's wording in the current language
function tr(text, ...args) {
  return fill(lookup(null, text, true), args);
}

// trc('outcome', 'learned'): a word whose translation depends on where it stands
function trc(ctx, text, ...args) {
  return fill(lookup(ctx, text, true), args);
}

// Marks a string to translate later (it is passed to tr when shown).
function N_(text) {
  return text;
}

// A name (a placement's label, a norm's): translated where the catalogue has it, else left as it is.
function trName(ctx, text) {
  return lookup(ctx, text, false);
}

// The designs of norm_placement, in the order of `blocklab train --help` (docs/placements.md).
const PLACEMENTS = [
  { name: 'post', label: 'Post-LN' },
  { name: 'pre', label: 'Pre-LN' },
  { name: 'peri', label: 'Peri-LN' },
  { name: 'reordered', label: 'Reordered (OLMo 2)' },
  { name: 'deepnorm', label: 'DeepNorm' },
  { name: 'admin', label: 'Admin' },
  { name: 'rezero', label: 'ReZero' },
  { name: 'tfixup', label: 'T-Fixup' },
  { name: 'mix', label: 'Mix-LN' },
  { name: 'lns', label: 'LN-Scaling' },
  { name: 'hybrid', label: 'HybridNorm' },
  { name: 'hybrid_star', label: 'HybridNorm*' },
  { name: 'hc', label: 'Hyper-connections' },
  { name: 'mhc', label: 'mHC' },
  { name: 'ngpt', label: 'nGPT' },
];

const NORMS = [
  { name: 'layernorm', label: 'LayerNorm' },
  { name: 'rmsnorm', label: 'RMSNorm' },
  { name: 'dyt', label: 'DyT' },
  { name: 'derf', label: 'Derf' },
];

const TASKS = [
  { name: 'copy', label: 'copy' },
  { name: 'reverse', label: 'reverse' },
];

const COLORS = {
  post: '#c62828', pre: '#1565c0', peri: '#2e7d32', reordered: '#6a1b9a', deepnorm: '#795548',
  admin: '#d81b60', rezero: '#616161', tfixup: '#9e9d24', mix: '#00838f', lns: '#ef6c00',
  hybrid: '#283593', hybrid_star: '#558b2f', hc: '#8d6e63', mhc: '#ad1457', ngpt: '#4527a0',
};

function placementLabel(name) {
  const p = PLACEMENTS.find((x) => x.name === name);
  return trName('placement', p ? p.label : name);
}

// The outcome labels of train_summary (probe/outcome.h): the English label, with its Korean gloss.
function outcomeLabel(outcome) {
  return trc('outcome', outcome);
}

// Numbers as the page shows them (the CSV and JSON downloads keep every digit).
function fmt(x, digits = 4) {
  if (x === null || x === undefined || Number.isNaN(x)) return '–';
  if (!Number.isFinite(x)) return x > 0 ? '∞' : '-∞';
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a >= 1e5 || a < 1e-3) return x.toExponential(digits - 1);
  return Number(x.toPrecision(digits)).toString();
}
