// The page's computing thread: loads the WebAssembly module (blocklab_web.js, web/api.cpp) and runs every
// call into it, so that the page itself stays responsive. Messages from the page:
//   {type: "call", id, fn, arg}          fn in build_info, config_keys, resolve_config, gradnorm, residual,
//                                        standardize; arg is the query object (JSON-encoded here)
//                                        -> {type: "result", id, result, wall_seconds}
//   {type: "train", job, configs}        frees the previous job's runs, starts one training run per config and
//                                        trains them round-robin, a few steps at a time
//                                        -> {type: "train-started", job, runs: [{config} | {error}]}
//                                        -> {type: "train-chunk", job, index, metrics, steps_done, done} ...
//                                        -> {type: "train-summary", job, index, summary, stopped}
//                                        -> {type: "train-end", job, stopped}
//   {type: "stop", job}                  stops after the chunk in progress; a summary of every run so far
//   {type: "continue", job}              goes on from where "stop" left off
// Between two chunks the thread returns to its event loop (setTimeout 0), which is where "stop" gets through.
'use strict';

importScripts('blocklab_web.js');

let api = null;
const ready = createBlocklab().then(
  (module) => {
    api = module;
    postMessage({
      type: 'ready',
      build_info: JSON.parse(api.build_info()),
      config_keys: JSON.parse(api.config_keys()),
    });
  },
  (err) => postMessage({ type: 'fatal', message: String((err && err.message) || err) }));

const CALLS = new Set(['build_info', 'config_keys', 'resolve_config', 'gradnorm', 'residual', 'standardize']);

// A chunk aims at about this many milliseconds, so that "stop" and the page's other calls wait no longer.
const CHUNK_MS = 120;
const MAX_CHUNK = 25;

let job = null;  // {id, runs: [{session, total, done, steps, seconds}], running, next}

function freeJob() {
  if (!job) return;
  for (const run of job.runs) if (run.session) api.train_free(run.session);
  job = null;
}

function startJob(id, configs) {
  freeJob();
  job = { id, runs: [], running: true, next: 0 };
  const started = [];
  for (const config of configs) {
    const r = JSON.parse(api.train_start(JSON.stringify(config)));
    if (r.error) {
      job.runs.push({ session: 0, done: true, steps: 0, seconds: 0 });
      started.push({ error: r.error });
    } else {
      job.runs.push({ session: r.session, total: r.config.steps, done: false, steps: 0, seconds: 0 });
      started.push({ config: r.config });
    }
  }
  postMessage({ type: 'train-started', job: id, runs: started });
  schedule();
}

function summarize(index, stopped) {
  const run = job.runs[index];
  if (!run.session || run.steps === 0) return;
  const summary = JSON.parse(api.train_summary(run.session));
  postMessage({ type: 'train-summary', job: job.id, index, summary, stopped });
}

function chunkSize(run) {
  if (run.steps === 0) return 1;
  const msPerStep = (1000 * run.seconds) / run.steps;
  return Math.max(1, Math.min(MAX_CHUNK, Math.floor(CHUNK_MS / Math.max(msPerStep, 1e-3))));
}

function tick() {
  if (!job || !job.running) return;
  const n = job.runs.length;
  let index = -1;
  for (let k = 0; k < n; ++k) {
    const i = (job.next + k) % n;
    if (!job.runs[i].done) {
      index = i;
      break;
    }
  }
  if (index < 0) {
    job.running = false;
    postMessage({ type: 'train-end', job: job.id, stopped: false });
    return;
  }
  job.next = (index + 1) % n;
  const run = job.runs[index];
  const r = JSON.parse(api.train_steps(run.session, chunkSize(run)));
  if (r.error) {
    run.done = true;
    postMessage({ type: 'train-chunk', job: job.id, index, metrics: [], steps_done: run.steps, done: true, error: r.error });
  } else {
    for (const m of r.metrics) run.seconds += m.seconds;
    run.steps = r.steps_done;
    run.done = r.done;
    postMessage({ type: 'train-chunk', job: job.id, index, metrics: r.metrics, steps_done: r.steps_done, done: r.done });
    if (r.done) summarize(index, false);
  }
  schedule();
}

function schedule() {
  setTimeout(tick, 0);
}

function stop(id) {
  if (!job || job.id !== id || !job.running) return;
  job.running = false;
  job.runs.forEach((run, index) => {
    if (!run.done) summarize(index, true);
  });
  postMessage({ type: 'train-end', job: job.id, stopped: true });
}

function resume(id) {
  if (!job || job.id !== id || job.running) return;
  if (job.runs.every((run) => run.done)) return;
  job.running = true;
  postMessage({ type: 'train-resumed', job: job.id });
  schedule();
}

onmessage = async (event) => {
  const msg = event.data;
  await ready;
  if (!api) return;
  try {
    if (msg.type === 'call') {
      if (!CALLS.has(msg.fn)) throw new Error('unknown call ' + msg.fn);
      const start = performance.now();
      const text = msg.arg === undefined ? api[msg.fn]() : api[msg.fn](JSON.stringify(msg.arg));
      const wall = (performance.now() - start) / 1000;
      postMessage({ type: 'result', id: msg.id, result: JSON.parse(text), wall_seconds: wall });
    } else if (msg.type === 'train') {
      startJob(msg.job, msg.configs);
    } else if (msg.type === 'stop') {
      stop(msg.job);
    } else if (msg.type === 'continue') {
      resume(msg.job);
    } else if (msg.type === 'free') {
      freeJob();
    }
  } catch (err) {
    postMessage({ type: 'result', id: msg.id, result: { error: String((err && err.message) || err) } });
  }
};
