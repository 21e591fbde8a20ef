// The page's module (web/api.cpp) under Node: every entry point answers JSON, bad input comes back as
// {"error": ...} with the CLI's message, and a training session steps, stops and summarises as the CLI would.
// Usage: node --no-experimental-fetch web/test_api.js build-web/blocklab_web.js
'use strict';
const assert = require('assert');
const path = require('path');

const createBlocklab = require(path.resolve(process.argv[2]));

function call(m, name, ...args) {
  const text = m[name](...args);
  return JSON.parse(text);
}

createBlocklab().then((m) => {
  const info = call(m, 'build_info');
  assert.strictEqual(info.isa, 'wasm_simd128');
  assert.deepStrictEqual(info.isa_levels, ['generic', 'wasm_simd128']);
  for (const part of info.optional_parts) assert.strictEqual(part.present, false, part.name);

  const keys = call(m, 'config_keys');
  const names = keys.map((k) => k.name);
  for (const k of ['norm_placement', 'layers', 'width', 'lr', 'warmup', 'steps', 'batch', 'seed']) assert.ok(names.includes(k), k);
  assert.strictEqual(keys.find((k) => k.name === 'layers').default, 24);

  // bad input: the CLI's messages, never an exception into JavaScript
  assert.match(call(m, 'resolve_config', '{"layers": "x"}').error, /layers: expected an integer/);
  assert.match(call(m, 'resolve_config', '{"depth": 3}').error, /unknown config key 'depth'/);
  assert.match(call(m, 'resolve_config', 'not json').error, /not valid JSON/);
  assert.match(call(m, 'gradnorm', '{"placements": ["sideways"]}').error, /sideways/);
  assert.match(call(m, 'train_start', '{"task": "text"}').error, /text task is not in this build/);
  assert.match(call(m, 'train_steps', 99, 1).error, /no training session 99/);
  assert.match(call(m, 'standardize', '{"table": {"row_names": ["A"], "column_names": ["x", "y"], "values": [[1]]}}').error,
               /row A has 1 values for 2 columns/);

  // problem 9: the source's table standardized per row: each row has mean 0 and population sd 1
  const st = call(m, 'standardize', '{}');
  assert.deepStrictEqual(st.table.row_names, ['A', 'B', 'C']);
  for (const row of st.rows.values) {
    const mean = row.reduce((a, b) => a + b, 0) / row.length;
    const sd = Math.sqrt(row.reduce((a, b) => a + (b - mean) ** 2, 0) / row.length);
    assert.ok(Math.abs(mean) < 1e-12 && Math.abs(sd - 1) < 1e-12, JSON.stringify(row));
  }

  assert.match(call(m, 'standardize', '{"table": {"row_names": ["A"], "column_names": ["x", "y"], "values": [[1, null]]}}').error,
               /every score must be a number, got null/);
  // per column over A and B: their mean and sd, not all three rows'
  const ab = call(m, 'standardize', '{"rows": ["A", "B"]}');
  assert.deepStrictEqual(ab.columns.row_names, ['A', 'B']);
  assert.deepStrictEqual(ab.column_stats.map((c) => c.mean), [75, 65, 55]);

  // experiment A on a small stack: one row per tensor and placement; Post-LN's last fc2 gradient exceeds its first
  const small = { layers: 6, width: 32, heads: 2, copy_len: 4, batch: 4 };
  const g = call(m, 'gradnorm', JSON.stringify({ config: small, placements: ['post', 'pre'], seeds: [0] }));
  const fc2 = (p) => g.gradnorm.filter((r) => r.placement === p && r.parameter.endsWith('mlp.fc2.weight'));
  assert.strictEqual(fc2('post').length, 6);
  assert.deepStrictEqual(fc2('pre').map((r) => r.block), [1, 2, 3, 4, 5, 6]);
  assert.ok(fc2('post')[5].grad_norm > fc2('post')[0].grad_norm);
  assert.ok(g.gradnorm.every((r) => r.grad_norm > 0));

  // experiment B in chunks: the steps continue where they stopped, and the summary labels the curve
  const s = call(m, 'train_start', JSON.stringify({ ...small, steps: 7 }));
  assert.strictEqual(s.config.layers, 6);
  const a = call(m, 'train_steps', s.session, 3), b = call(m, 'train_steps', s.session, 10);
  assert.deepStrictEqual(a.metrics.map((r) => r.step), [1, 2, 3]);
  assert.deepStrictEqual(b.metrics.map((r) => r.step), [4, 5, 6, 7]);
  assert.ok(!a.done && b.done && b.steps_done === 7);
  const summary = call(m, 'train_summary', s.session);
  assert.strictEqual(summary.steps, 7);
  assert.ok(['never-started', 'learning', 'learned'].includes(summary.outcome), summary.outcome);
  // the same config again gives the same losses, bit for bit
  const again = call(m, 'train_start', JSON.stringify({ ...small, steps: 7 }));
  const c = call(m, 'train_steps', again.session, 7);
  assert.deepStrictEqual(c.metrics.map((r) => r.loss), a.metrics.concat(b.metrics).map((r) => r.loss));
  m.train_free(s.session);
  assert.match(call(m, 'train_summary', s.session).error, /no training session/);

  // problem 10: the random walk's mean length grows like sqrt(L + 1)
  const r = call(m, 'residual', JSON.stringify({ config: small, placements: ['pre'], walk: { dim: 64, trials: 200, depths: [16] } }));
  assert.strictEqual(r.walk.depth.length, 17);
  assert.ok(Math.abs(r.walk.mean_length[16] / Math.sqrt(17) - 1) < 0.05, r.walk.mean_length[16]);
  assert.strictEqual(r.init.length, 7);  // layers 0..6
  console.log('web api: every check passed');
}).catch((e) => {
  console.error(e);
  process.exit(1);
});
