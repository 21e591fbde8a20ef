// The page: settings, the four experiments, charts, downloads and the shareable link. Every computation runs
// in worker.js (the WebAssembly module); this thread only draws. The query string holds the settings
// (docs/web.md): exp (gradnorm | train | residual | standardize), placements, seeds, warmups, any config key,
// dim, trials, depths and scores for the problems, lang (en | ko) and run=1 to run on load. When a run ends,
// its result is written as JSON into <pre id="results"> and window.blocklabResults (the page's test reads it).
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);

  // ---- state ------------------------------------------------------------------------------------------

  const QUICK = { layers: 12, width: 64, heads: 4, copy_len: 8, batch: 8, steps: 400, lr: 0.001, warmups: [0, 100] };
  const SOURCE = { layers: 24, width: 128, heads: 4, copy_len: 32, batch: 16, steps: 1200, lr: 0.001, warmups: [0, 400] };
  const FORM_KEYS = ['norm', 'task', 'layers', 'width', 'heads', 'copy_len', 'batch', 'steps', 'lr'];
  // query-string keys that are not config keys
  const PAGE_KEYS = new Set(['exp', 'placements', 'seeds', 'warmups', 'run', 'lang', 'dim', 'trials', 'depths',
    'scores', 'rows', 'family']);
  const EXPERIMENTS = ['gradnorm', 'train', 'standardize', 'residual'];
  const SOURCE_WALK = { 1: 1.414, 4: 2.235, 16: 4.12, 36: 6.067 };  // docs/source.md, problem 10

  const state = {
    keys: [],  // config_keys()
    keyTypes: {},
    buildInfo: null,
    exp: 'train',
    results: { gradnorm: null, train: null, residual: null, standardize: null },
    table: null,  // problem 9's score table {corner, row_names, column_names, values}
    perColumnRows: ['A', 'B'],
    family: 'mlp.fc2.weight',
    charts: {},
  };

  // ---- the worker ---------------------------------------------------------------------------------------

  const worker = new Worker('worker.js');
  let nextCall = 0;
  const pending = new Map();
  let readyResolve;
  const ready = new Promise((resolve) => (readyResolve = resolve));

  function call(fn, arg) {
    return ready.then(() => new Promise((resolve, reject) => {
      const id = ++nextCall;
      pending.set(id, { resolve, reject });
      worker.postMessage({ type: 'call', id, fn, arg });
    }));
  }

  worker.onmessage = (event) => {
    const msg = event.data;
    if (msg.type === 'ready') {
      state.buildInfo = msg.build_info;
      state.keys = msg.config_keys;
      for (const k of state.keys) state.keyTypes[k.name] = k.type;
      readyResolve();
    } else if (msg.type === 'fatal') {
      statusKey = null;
      setStatus(tr('The WebAssembly module could not be loaded: {1}', msg.message), true);
    } else if (msg.type === 'result') {
      const p = pending.get(msg.id);
      if (!p) return;
      pending.delete(msg.id);
      if (msg.result && msg.result.error !== undefined && Object.keys(msg.result).length === 1)
        p.reject(new Error(msg.result.error));
      else p.resolve({ result: msg.result, wall: msg.wall_seconds });
    } else if (msg.type.startsWith('train')) {
      onTrainMessage(msg);
    }
  };
  worker.onerror = (event) => (statusKey = null, setStatus(tr('The WebAssembly module could not be loaded: {1}', event.message), true));

  // ---- small helpers ------------------------------------------------------------------------------------

  let statusKey = null;
  function setStatus(text, isError) {
    const el = $('status');
    el.textContent = text;
    el.classList.toggle('error', !!isError);
  }

  function showError(id, message) {
    const el = $(id);
    el.hidden = !message;
    el.textContent = message || '';
  }

  function parseList(text, what) {
    const items = String(text).split(/[\s,]+/).filter((s) => s !== '');
    const out = items.map((s) => Number(s));
    if (!out.length || out.some((x) => !Number.isInteger(x) || x < 0))
      throw new Error(tr('{1}: give whole numbers separated by commas', what));
    return out;
  }

  function wholeNumber(text, what) {
    const x = Number(String(text).trim());
    if (String(text).trim() === '' || !Number.isInteger(x) || x < 1) throw new Error(tr('{1}: give a whole number of at least 1', what));
    return x;
  }

  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'text') e.textContent = v;
      else if (k === 'class') e.className = v;
      else e.setAttribute(k, v);
    }
    for (const c of children || []) e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    return e;
  }

  function fillTable(table, head, rows, caption) {
    table.textContent = '';
    if (caption) table.appendChild(el('caption', { text: caption }));
    const thead = el('thead');
    thead.appendChild(el('tr', {}, head.map((h) => el('th', { scope: 'col', text: h }))));
    table.appendChild(thead);
    const tbody = el('tbody');
    for (const r of rows) {
      const tr_ = el('tr');
      r.forEach((cell, i) => {
        const c = cell instanceof Node ? cell : document.createTextNode(cell === undefined ? '' : String(cell));
        const td = el(i === 0 ? 'th' : 'td', i === 0 ? { scope: 'row' } : {});
        td.appendChild(c);
        tr_.appendChild(td);
      });
      tbody.appendChild(tr_);
    }
    table.appendChild(tbody);
    return tbody;
  }

  function download(name, text, type) {
    const url = URL.createObjectURL(new Blob([text], { type }));
    const a = el('a', { href: url, download: name });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 5000);
  }

  function csv(header, rows) {
    const cell = (v) => {
      if (v === null || v === undefined) return '';
      const s = String(v);
      return /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
    };
    return [header, ...rows].map((r) => r.map(cell).join(',')).join('\n') + '\n';
  }

  function publish(result) {
    const text = JSON.stringify(result, null, 1);
    window.blocklabResults = JSON.parse(text);  // a copy: a run that goes on does not change it
    $('results').textContent = text;
  }

  // A run starts: the last result no longer stands for what the page shows.
  function unpublish() {
    window.blocklabResults = null;
    $('results').textContent = '';
  }

  // ---- language ----------------------------------------------------------------------------------------

  function norm(text) {
    return text.replace(/\s+/g, ' ').trim();
  }

  function rememberEnglish() {
    for (const e of document.querySelectorAll('[data-t]')) e.dataset.en = norm(e.textContent);
    for (const e of document.querySelectorAll('[data-t-aria]')) e.dataset.tAria = e.getAttribute('data-t-aria');
  }

  function applyStatic() {
    for (const e of document.querySelectorAll('[data-t]')) e.textContent = tr(e.dataset.en);
    for (const e of document.querySelectorAll('[data-t-aria]')) e.setAttribute('aria-label', tr(e.dataset.tAria));
    document.documentElement.lang = I18n.lang;
    $('lang-en').setAttribute('aria-pressed', String(I18n.lang === 'en'));
    $('lang-ko').setAttribute('aria-pressed', String(I18n.lang === 'ko'));
  }

  let catalogLoaded = null;
  function loadCatalog() {
    if (!catalogLoaded)
      catalogLoaded = fetch('ko.json').then((r) => r.json()).then((c) => (I18n.catalog = c), () => (I18n.catalog = {}));
    return catalogLoaded;
  }

  async function setLanguage(lang) {
    if (lang === 'ko') await loadCatalog();
    I18n.lang = lang;
    applyStatic();
    renderPlacementBoxes();
    renderSelects();
    renderAll();
    if (statusKey) setStatus(tr(statusKey));
    updateLink();
  }

  // ---- settings ----------------------------------------------------------------------------------------

  function renderPlacementBoxes() {
    const box = $('placement-boxes');
    const checked = new Set(selectedPlacements());
    if (!box.children.length) checked.add('post').add('pre');
    box.textContent = '';
    for (const p of PLACEMENTS) {
      const input = el('input', { type: 'checkbox', value: p.name, id: 'pl-' + p.name });
      input.checked = checked.has(p.name);
      input.addEventListener('change', settingsChanged);
      const label = el('label', { for: 'pl-' + p.name, class: 'check' }, [input, ' ', el('span', { text: placementLabel(p.name) }),
        ' ', el('code', { text: p.name })]);
      const swatch = el('span', { class: 'dot', 'aria-hidden': 'true' });
      swatch.style.background = COLORS[p.name];
      label.prepend(swatch);
      box.appendChild(label);
    }
  }

  function selectedPlacements() {
    return [...document.querySelectorAll('#placement-boxes input:checked')].map((i) => i.value);
  }

  function setPlacements(names) {
    for (const i of document.querySelectorAll('#placement-boxes input')) i.checked = names.includes(i.value);
  }

  function renderSelects() {
    const fillSelect = (select, items, ctx) => {
      const value = select.value;
      select.textContent = '';
      for (const it of items) select.appendChild(el('option', { value: it.name, text: trName(ctx, it.label) }));
      if (value) select.value = value;
    };
    fillSelect($('f-norm'), NORMS, 'web');
    fillSelect($('f-task'), TASKS, 'task');
  }

  function applyPreset(p) {
    for (const k of ['layers', 'width', 'heads', 'copy_len', 'batch', 'steps', 'lr']) $('f-' + k).value = p[k];
    $('f-warmups').value = p.warmups.join(',');
    settingsChanged();
  }

  function typed(name, text) {
    const type = state.keyTypes[name];
    if (type === 'int' || type === 'float') {
      const x = Number(text);
      if (text === '' || !Number.isFinite(x) || (type === 'int' && !Number.isInteger(x)))
        throw new Error(tr('{1}: not a number', name));
      return x;
    }
    if (type === 'bool') {
      if (text === 'true' || text === '1') return true;
      if (text === 'false' || text === '0') return false;
      throw new Error(tr('{1}: give true or false', name));
    }
    return text;
  }

  function parseExtra(text) {
    const out = {};
    for (const item of text.split(/\s+/).filter((s) => s)) {
      const eq = item.indexOf('=');
      const name = eq < 0 ? item : item.slice(0, eq);
      if (!(name in state.keyTypes)) throw new Error(tr('unknown config key {1}', name));
      if (eq < 0) throw new Error(tr('{1}: write key=value', name));
      out[name] = typed(name, item.slice(eq + 1));
    }
    return out;
  }

  // The settings as the experiments use them; throws with a message to show when one is not valid.
  function readSettings() {
    const placements = selectedPlacements();
    if (!placements.length) throw new Error(tr('Pick at least one norm placement.'));
    const config = {};
    for (const k of FORM_KEYS) config[k] = typed(k, $('f-' + k).value.trim());
    Object.assign(config, parseExtra($('f-extra').value));
    const seeds = parseList($('f-seeds').value, 'seed');
    const warmups = parseList($('f-warmups').value, 'warmup');
    config.seed = seeds[0];
    config.warmup = warmups[0];
    return { placements, seeds, warmups, config };
  }

  function settingsChanged() {
    if (!state.keys.length) return;  // checked once the module has named the config keys
    try {
      readSettings();
      showError('settings-error', '');
    } catch (err) {
      showError('settings-error', err.message);
    }
    updateLink();
  }

  // ---- the link ----------------------------------------------------------------------------------------

  function linkParams() {
    const q = new URLSearchParams();
    q.set('exp', $('link-exp').value);
    q.set('placements', selectedPlacements().join(','));
    for (const k of FORM_KEYS) q.set(k, $('f-' + k).value.trim());
    const warmups = $('f-warmups').value.split(/[\s,]+/).filter((s) => s);
    q.set(warmups.length > 1 ? 'warmups' : 'warmup', warmups.join(','));
    const seeds = $('f-seeds').value.split(/[\s,]+/).filter((s) => s);
    q.set(seeds.length > 1 ? 'seeds' : 'seed', seeds.join(','));
    for (const item of $('f-extra').value.split(/\s+/).filter((s) => s.includes('='))) {
      const eq = item.indexOf('=');
      q.set(item.slice(0, eq), item.slice(eq + 1));
    }
    if ($('link-exp').value === 'residual') {
      q.set('dim', $('w-dim').value);
      q.set('trials', $('w-trials').value);
      q.set('depths', $('w-depths').value.replace(/\s+/g, ''));
    }
    if ($('link-exp').value === 'standardize' && state.table) {
      q.set('scores', state.table.values.map((r) => r.join(',')).join(';'));
      q.set('rows', state.perColumnRows.join(','));
    }
    if ($('link-exp').value === 'gradnorm' && state.family !== 'mlp.fc2.weight') q.set('family', state.family);
    if (I18n.lang !== 'en') q.set('lang', I18n.lang);
    if ($('link-run').checked) q.set('run', '1');
    return q;
  }

  function linkText() {
    // commas stay readable in the link
    return linkParams().toString().replace(/%2C/gi, ',').replace(/%3B/gi, ';');
  }

  function updateLink() {
    $('link-out').value = location.origin + location.pathname + '?' + linkText();
  }

  async function copyLink() {
    history.replaceState(null, '', '?' + linkText());
    updateLink();
    const text = $('link-out').value;
    let copied = false;
    try {
      if (navigator.clipboard) {
        await navigator.clipboard.writeText(text);
        copied = true;
      }
    } catch (err) {
      copied = false;
    }
    if (!copied) $('link-out').select();
    $('link-msg').textContent = copied ? tr('Link copied.') : tr('The link is in the address bar and in the box.');
  }

  function setLinkExp(exp) {
    state.exp = exp;
    $('link-exp').value = exp;
    updateLink();
  }

  // Fills the settings from the query string; returns {exp, run}.
  function readQuery() {
    const q = new URLSearchParams(location.search);
    const exp = EXPERIMENTS.includes(q.get('exp')) ? q.get('exp') : 'train';
    if (q.has('placements')) {
      const names = q.get('placements') === 'all' ? PLACEMENTS.map((p) => p.name)
        : q.get('placements').split(',').map((n) => (n === 'hybridstar' ? 'hybrid_star' : n));
      state.unknownPlacements = names.filter((n) => !PLACEMENTS.some((p) => p.name === n));
      setPlacements(names);
    } else if (q.has('norm_placement')) {
      setPlacements([q.get('norm_placement')]);
    }
    for (const k of FORM_KEYS) if (q.has(k)) $('f-' + k).value = q.get(k);
    if (q.has('warmups')) $('f-warmups').value = q.get('warmups');
    else if (q.has('warmup')) $('f-warmups').value = q.get('warmup');
    if (q.has('seeds')) $('f-seeds').value = q.get('seeds');
    else if (q.has('seed')) $('f-seeds').value = q.get('seed');
    const extra = [];
    for (const [k, v] of q) {
      if (PAGE_KEYS.has(k) || FORM_KEYS.includes(k) || k === 'warmup' || k === 'seed' || k === 'norm_placement') continue;
      extra.push(k + '=' + v);
    }
    $('f-extra').value = extra.join(' ');
    if (q.has('dim')) $('w-dim').value = q.get('dim');
    if (q.has('trials')) $('w-trials').value = q.get('trials');
    if (q.has('depths')) $('w-depths').value = q.get('depths');
    if (q.has('family')) state.family = q.get('family');
    if (q.has('rows')) state.perColumnRows = q.get('rows').split(',').filter((s) => s);
    if (q.has('scores')) {
      const values = q.get('scores').split(';').map((r) => r.split(',').map(Number));
      state.pendingScores = values;
    }
    return { exp, run: q.get('run') === '1', lang: q.get('lang') };
  }

  // ---- charts ------------------------------------------------------------------------------------------

  function makeChart(id, config) {
    if (state.charts[id]) state.charts[id].destroy();
    const chart = new Chart($(id), config);
    state.charts[id] = chart;
    return chart;
  }

  function axis(title, log, extra) {
    return Object.assign({ type: log ? 'logarithmic' : 'linear', title: { display: true, text: title } }, extra || {});
  }

  function baseOptions(title, xTitle, yTitle, log, xExtra) {
    return {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      parsing: false,
      normalized: true,
      interaction: { mode: 'nearest', intersect: false },
      plugins: {
        title: { display: !!title, text: title },
        legend: { labels: { boxWidth: 26, boxHeight: 3, filter: (item, data) => !data.datasets[item.datasetIndex].hideInLegend } },
        tooltip: { callbacks: { label: (c) => c.dataset.label + ': ' + fmt(c.parsed.y, 5) } },
      },
      scales: { x: axis(xTitle, false, xExtra), y: axis(yTitle, log) },
    };
  }

  // ---- experiment A ------------------------------------------------------------------------------------

  function familyOf(name) {
    return name.replace(/^blocks\.\d+\./, '');
  }

  async function runGradnorm(fromUrl) {
    let s;
    try {
      s = readSettings();
    } catch (err) {
      showError('a-error', err.message);
      if (fromUrl) publish({ exp: 'gradnorm', error: err.message, from_url: true });
      return;
    }
    setLinkExp('gradnorm');
    showError('a-error', '');
    $('run-a').disabled = true;
    unpublish();
    $('a-status').textContent = tr('Computing…');
    const started = performance.now();
    try {
      const { result } = await call('gradnorm', { config: s.config, placements: s.placements, seeds: s.seeds });
      result.page_seconds = (performance.now() - started) / 1000;
      state.results.gradnorm = { result, placements: s.placements, seeds: s.seeds, config: s.config };
      renderGradnorm();
      publish({ exp: 'gradnorm', gradnorm: result.gradnorm, seconds: result.seconds, page_seconds: result.page_seconds,
        config: s.config, placements: s.placements, seeds: s.seeds, from_url: !!fromUrl });
    } catch (err) {
      $('a-status').textContent = '';
      showError('a-error', err.message);
      publish({ exp: 'gradnorm', error: err.message, from_url: !!fromUrl });
    } finally {
      $('run-a').disabled = false;
    }
  }

  function renderGradnorm() {
    const r = state.results.gradnorm;
    if (!r) return;
    const rows = r.result.gradnorm;
    const families = [...new Set(rows.filter((x) => x.block !== null).map((x) => familyOf(x.parameter)))];
    if (!families.includes(state.family)) state.family = families.includes('mlp.fc2.weight') ? 'mlp.fc2.weight' : families[0];
    const select = $('a-family');
    select.textContent = '';
    for (const f of families) select.appendChild(el('option', { value: f, text: f }));
    select.value = state.family;

    $('a-out').hidden = false;
    $('a-controls').hidden = false;
    const log = $('a-log').checked;
    const datasets = [];
    const summary = [];
    let maxBlock = 1;
    for (const placement of r.placements) {
      const color = COLORS[placement] || '#333';
      const perSeed = r.seeds.map((seed) => rows.filter((x) => x.placement === placement && x.seed === seed && x.block !== null &&
        familyOf(x.parameter) === state.family).sort((a, b) => a.block - b.block));
      if (!perSeed[0].length) continue;
      const blocks = perSeed[0].map((x) => x.block);
      maxBlock = Math.max(maxBlock, ...blocks);
      const mean = blocks.map((b, i) => perSeed.reduce((sum, pts) => sum + (pts[i] ? pts[i].grad_norm : NaN), 0) / perSeed.length);
      if (r.seeds.length > 1) {
        perSeed.forEach((pts, k) => datasets.push({
          label: tr('{1}, seed {2}', placementLabel(placement), r.seeds[k]), data: pts.map((x) => ({ x: x.block, y: x.grad_norm })),
          borderColor: color + '66', backgroundColor: color + '66', borderWidth: 1, pointRadius: 0, hideInLegend: true,
        }));
      }
      datasets.push({
        label: r.seeds.length > 1 ? tr('{1}, mean of {2} seeds', placementLabel(placement), r.seeds.length) : placementLabel(placement),
        data: blocks.map((b, i) => ({ x: b, y: mean[i] })), borderColor: color, backgroundColor: color, borderWidth: 2.5,
        pointRadius: 2.5,
      });
      summary.push([placementLabel(placement), fmt(mean[0]), fmt(mean[mean.length - 1]), fmt(mean[mean.length - 1] / mean[0], 3)]);
    }
    const title = state.family === 'mlp.fc2.weight' ? tr('MLP second-layer weight: gradient norm at initialization')
      : tr('{1}: gradient norm at initialization', state.family);
    makeChart('a-chart', {
      type: 'line', data: { datasets },
      options: baseOptions(title, tr('block'), tr('gradient norm (Frobenius)') + (log ? ' — ' + tr('log scale') : ''), log,
        { min: 1, max: maxBlock, ticks: { stepSize: 1 } }),
    });
    const caption = state.family + (r.seeds.length > 1 ? ', ' + tr('mean of {1} seeds', r.seeds.length) : '');
    fillTable($('a-table'), [tr('placement'), tr('block 1'), tr('block {1}', maxBlock), tr('last / first')], summary, caption);
    $('a-status').textContent = tr('Computed in {1} s.', fmt(r.result.seconds, 3));
  }

  function gradnormCsv() {
    const rows = state.results.gradnorm.result.gradnorm;
    return csv(['placement', 'seed', 'block', 'parameter', 'grad_norm'],
      rows.map((x) => [x.placement, x.seed, x.block, x.parameter, x.grad_norm]));
  }

  // ---- experiment B ------------------------------------------------------------------------------------

  let jobId = 0;
  let train = null;  // {job, runs: [{label, placement, warmup, seed, config, metrics, summary, stopped, error}], running}

  function runLabel(placement, warmup, seed, s) {
    let label = warmup > 0 ? tr('{1}, warm-up {2}', placementLabel(placement), warmup) : tr('{1}, no warm-up', placementLabel(placement));
    if (s.seeds.length > 1) label = tr('{1}, seed {2}', label, seed);
    return label;
  }

  function startTraining(fromUrl) {
    let s;
    try {
      s = readSettings();
    } catch (err) {
      showError('b-error', err.message);
      if (fromUrl) publish({ exp: 'train', error: err.message, from_url: true });
      return;
    }
    setLinkExp('train');
    showError('b-error', '');
    const runs = [];
    for (const placement of s.placements)
      for (const warmup of s.warmups)
        for (const seed of s.seeds)
          runs.push({ placement, warmup, seed, config: Object.assign({}, s.config, { norm_placement: placement, warmup, seed }),
            metrics: [], summary: null, stopped: false, error: null });
    train = { job: ++jobId, runs, settings: s, running: true, fromUrl: !!fromUrl, total: 0, lnV: null };
    $('run-b').disabled = true;
    $('stop-b').disabled = false;
    $('continue-b').disabled = true;
    $('b-status').textContent = tr('Starting…');
    unpublish();
    ready.then(() => worker.postMessage({ type: 'train', job: train.job, configs: runs.map((r) => r.config) }));
    setupTrainCharts();
    renderTrainTable();
  }

  function onTrainMessage(msg) {
    if (!train || msg.job !== train.job) return;
    if (msg.type === 'train-started') {
      msg.runs.forEach((r, i) => {
        const run = train.runs[i];
        if (r.error) {
          run.error = r.error;
        } else {
          run.resolved = r.config;
          run.total = r.config.steps;
        }
      });
      const first = train.runs.find((r) => r.resolved);
      train.lnV = first ? Math.log(first.resolved.vocab) : null;
      const errors = train.runs.filter((r) => r.error).map((r) => r.error);
      if (errors.length) showError('b-error', [...new Set(errors)].join('\n'));
      setupTrainCharts();
      renderTrainTable();
    } else if (msg.type === 'train-chunk') {
      const run = train.runs[msg.index];
      run.metrics.push(...msg.metrics);
      if (msg.error) run.error = msg.error;
      appendTrainPoints(msg.index, msg.metrics);
      scheduleTrainRender();
    } else if (msg.type === 'train-summary') {
      const run = train.runs[msg.index];
      run.summary = msg.summary;
      run.stopped = msg.stopped;
      scheduleTrainRender();
    } else if (msg.type === 'train-resumed') {
      train.running = true;
      for (const run of train.runs) run.stopped = false;
      $('stop-b').disabled = false;
      $('continue-b').disabled = true;
      scheduleTrainRender();
    } else if (msg.type === 'train-end') {
      train.running = false;
      train.stopped = msg.stopped;
      $('run-b').disabled = false;
      $('stop-b').disabled = true;
      $('continue-b').disabled = !msg.stopped || train.runs.every((r) => r.error || r.metrics.length >= r.total);
      renderTrainTable();
      updateTrainCharts();
      publishTrain();
    }
  }

  function stopTraining() {
    if (!train || !train.running) return;
    $('stop-b').disabled = true;
    worker.postMessage({ type: 'stop', job: train.job });
  }

  function continueTraining() {
    if (!train || train.running) return;
    $('continue-b').disabled = true;
    $('run-b').disabled = true;
    unpublish();
    worker.postMessage({ type: 'continue', job: train.job });
  }

  function publishTrain() {
    publish({
      exp: 'train',
      stopped: !!train.stopped,
      from_url: train.fromUrl,
      runs: train.runs.map((r) => ({ config: r.resolved || r.config, metrics: r.metrics, summary: r.summary, error: r.error || undefined })),
    });
  }

  function msPerStep(run) {
    if (run.summary && !train.running) return run.summary.ms_per_step;
    if (!run.metrics.length) return null;
    return (1000 * run.metrics.reduce((s, m) => s + m.seconds, 0)) / run.metrics.length;
  }

  let renderQueued = false;
  function scheduleTrainRender() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => {
      renderQueued = false;
      renderTrainTable();
      updateTrainCharts();
    });
  }

  function renderTrainTable() {
    if (!train) return;
    const s = train.settings;
    const rows = train.runs.map((run) => {
      const last = run.metrics[run.metrics.length - 1];
      let outcome = '–';
      if (run.error) outcome = run.error;
      else if (run.summary) outcome = outcomeLabel(run.summary.outcome) + (run.stopped ? ' ' + tr('(stopped)') : '');
      const name = el('span', {}, [el('span', { class: 'dot', 'aria-hidden': 'true' }), runLabel(run.placement, run.warmup, run.seed, s)]);
      name.firstChild.style.background = COLORS[run.placement];
      return [name, (run.total ? run.metrics.length + ' / ' + run.total : run.metrics.length), last ? fmt(last.loss) : '–',
        last ? fmt(last.grad_norm, 3) : '–', fmt(msPerStep(run), 3), outcome];
    });
    const tbody = fillTable($('b-table'), [tr('run'), tr('steps'), tr('loss'), tr('gradient norm'), tr('ms/step'), tr('outcome')], rows);
    [...tbody.children].forEach((tr_, i) => (tr_.dataset.steps = String(train.runs[i].metrics.length)));
    const done = train.runs.reduce((n, r) => n + r.metrics.length, 0);
    const total = train.runs.reduce((n, r) => n + (r.total || 0), 0);
    $('b-status').textContent = train.running ? tr('Training: {1} of {2} steps', done, total)
      : train.stopped ? tr('Stopped at {1} of {2} steps.', done, total) : done ? tr('Finished: {1} steps.', done) : '';

  }

  function dashOf(run) {
    const k = train.settings.warmups.indexOf(run.warmup);
    return [[], [7, 4], [2, 3], [10, 3, 2, 3]][k % 4];
  }

  function setupTrainCharts() {
    if (!train) return;
    $('b-out').hidden = false;
    const log = $('b-log').checked;
    const multiSeed = train.settings.seeds.length > 1;
    const lossSets = train.runs.map((run) => ({
      label: runLabel(run.placement, run.warmup, run.seed, train.settings),
      data: run.metrics.filter((m) => m.loss !== null && m.loss > 0).map((m) => ({ x: m.step, y: m.loss })),
      borderColor: COLORS[run.placement], backgroundColor: COLORS[run.placement], borderDash: dashOf(run),
      borderWidth: multiSeed ? 1.2 : 1.8, pointRadius: 0,
    }));
    const steps = Math.max(1, ...train.runs.map((r) => r.total || r.config.steps));
    if (train.lnV !== null)
      lossSets.push({ label: tr('ln V = {1}: nothing learned', train.lnV.toFixed(3)), data: [{ x: 1, y: train.lnV }, { x: steps, y: train.lnV }],
        borderColor: '#333', borderDash: [4, 4], borderWidth: 1, pointRadius: 0 });
    makeChart('b-loss', {
      type: 'line', data: { datasets: lossSets },
      options: baseOptions(tr('Training loss per step'), tr('step'), log ? tr('loss (log scale)') : tr('loss'), log, { min: 0, max: steps }),
    });
    const gradSets = train.runs.map((run) => ({
      label: runLabel(run.placement, run.warmup, run.seed, train.settings),
      data: run.metrics.filter((m) => m.grad_norm !== null && m.grad_norm > 0).map((m) => ({ x: m.step, y: m.grad_norm })),
      borderColor: COLORS[run.placement], backgroundColor: COLORS[run.placement], borderDash: dashOf(run),
      borderWidth: 1.2, pointRadius: 0,
    }));
    makeChart('b-grad', {
      type: 'line', data: { datasets: gradSets },
      options: baseOptions(tr('Gradient norm per step'), tr('step'), tr('gradient norm') + ' — ' + tr('log scale'), true, { min: 0, max: steps }),
    });
  }

  function appendTrainPoints(index, metrics) {
    const loss = state.charts['b-loss'];
    const grad = state.charts['b-grad'];
    if (!loss || !grad) return;
    for (const m of metrics) {
      if (m.loss !== null && m.loss > 0) loss.data.datasets[index].data.push({ x: m.step, y: m.loss });
      if (m.grad_norm !== null && m.grad_norm > 0) grad.data.datasets[index].data.push({ x: m.step, y: m.grad_norm });
    }
  }

  function updateTrainCharts() {
    for (const id of ['b-loss', 'b-grad']) if (state.charts[id]) state.charts[id].update('none');
  }

  function trainCsv() {
    const rows = [];
    train.runs.forEach((run, i) => {
      for (const m of run.metrics) rows.push([i + 1, run.placement, run.warmup, run.seed, m.step, m.loss, m.lr, m.grad_norm, m.skipped, m.seconds]);
    });
    return csv(['run', 'placement', 'warmup', 'seed', 'step', 'loss', 'lr', 'grad_norm', 'skipped', 'seconds'], rows);
  }

  // ---- problem 9 ---------------------------------------------------------------------------------------

  function nameOf(text) {
    return trName('score table', text);
  }

  function renderScoreInputs() {
    const t = state.table;
    const table = $('p9-input');
    table.textContent = '';
    const thead = el('thead');
    thead.appendChild(el('tr', {}, [el('th', { scope: 'col', text: nameOf(t.corner) }),
      ...t.column_names.map((c) => el('th', { scope: 'col', text: nameOf(c) }))]));
    table.appendChild(thead);
    const tbody = el('tbody');
    t.row_names.forEach((r, i) => {
      const cells = [el('th', { scope: 'row', text: r })];
      t.column_names.forEach((c, j) => {
        const input = el('input', { type: 'text', inputmode: 'decimal', value: String(t.values[i][j]),
          'aria-label': nameOf(t.corner) + ' ' + r + ', ' + nameOf(c), 'data-row': i, 'data-col': j });
        input.addEventListener('input', scoresEdited);
        cells.push(el('td', {}, [input]));
      });
      tbody.appendChild(el('tr', {}, cells));
    });
    table.appendChild(tbody);

    const rows = $('p9-rows');
    rows.textContent = '';
    for (const r of t.row_names) {
      const input = el('input', { type: 'checkbox', value: r, id: 'p9-row-' + r });
      input.checked = state.perColumnRows.includes(r);
      input.addEventListener('change', () => {
        state.perColumnRows = [...document.querySelectorAll('#p9-rows input:checked')].map((x) => x.value);
        standardize();
      });
      rows.appendChild(el('label', { for: 'p9-row-' + r, class: 'check' }, [input, ' ' + r]));
    }
  }

  let editTimer = null;
  function scoresEdited() {
    clearTimeout(editTimer);
    editTimer = setTimeout(standardize, 120);
  }

  function readScores() {
    const t = state.table;
    const values = t.values.map((r) => r.slice());
    for (const input of document.querySelectorAll('#p9-input input')) {
      const i = Number(input.dataset.row);
      const j = Number(input.dataset.col);
      const text = input.value.trim();
      const x = Number(text);
      const bad = text === '' || !Number.isFinite(x);
      input.classList.toggle('bad', bad);
      input.setAttribute('aria-invalid', String(bad));
      if (bad) throw new Error(tr('{1}, {2}: not a number', t.row_names[i], nameOf(t.column_names[j])));
      values[i][j] = x;
    }
    return values;
  }

  async function standardize(fromUrl) {
    let query;
    try {
      const values = readScores();
      query = { table: Object.assign({}, state.table, { values }), rows: state.perColumnRows };
    } catch (err) {
      showError('p9-error', err.message);
      return;
    }
    try {
      const { result } = await call('standardize', query);
      state.table.values = query.table.values;
      state.results.standardize = result;
      showError('p9-error', '');
      renderStandardize();
      if (fromUrl === true) publish(Object.assign({ exp: 'standardize' }, result));
      if (state.exp === 'standardize') updateLink();
    } catch (err) {
      showError('p9-error', err.message);
    }
  }

  function renderStandardize() {
    const r = state.results.standardize;
    if (!r) return;
    const head = (t) => [nameOf(t.corner), ...t.column_names.map(nameOf)];
    fillTable($('p9-rows-out'), [...head(r.rows), tr('mean'), tr('sd')],
      r.rows.row_names.map((name, i) => [name, ...r.rows.values[i].map((x) => fmt(x)), fmt(r.row_stats[i].mean), fmt(r.row_stats[i].sd)]));
    $('p9-cols-h').textContent = tr('per subject (column) over {1}', r.columns.row_names.join(', '));
    fillTable($('p9-cols-out'), head(r.columns), r.columns.row_names.map((name, i) => [name, ...r.columns.values[i].map((x) => fmt(x))]));
  }

  function standardizeCsv() {
    const r = state.results.standardize;
    const rows = [];
    for (const [view, t] of [['scores', r.table], ['per_row', r.rows], ['per_column', r.columns]])
      t.row_names.forEach((name, i) => rows.push([view, name, ...t.values[i]]));
    return csv(['view', r.table.corner, ...r.table.column_names], rows);
  }

  async function loadSourceTable() {
    const { result } = await call('standardize', {});
    state.table = result.table;
    if (state.pendingScores) {
      const v = state.pendingScores;
      if (v.length === state.table.row_names.length && v.every((r) => r.length === state.table.column_names.length))
        state.table.values = v;
      state.pendingScores = null;
    }
    state.perColumnRows = state.perColumnRows.filter((r) => state.table.row_names.includes(r));
    renderScoreInputs();
  }

  // ---- problem 10 --------------------------------------------------------------------------------------

  async function runResidual(fromUrl) {
    let s;
    let walk;
    try {
      s = readSettings();
      walk = { dim: wholeNumber($('w-dim').value, tr('Dimension D')), trials: wholeNumber($('w-trials').value, tr('Trials')),
        depths: parseList($('w-depths').value, tr('Depths L for the table')), seed: 0 };
    } catch (err) {
      showError('p10-error', err.message);
      if (fromUrl) publish({ exp: 'residual', error: err.message, from_url: true });
      return;
    }
    setLinkExp('residual');
    showError('p10-error', '');
    $('run-10').disabled = true;
    unpublish();
    $('p10-status').textContent = tr('Computing…');
    try {
      const { result } = await call('residual', { config: s.config, placements: s.placements, seeds: s.seeds, walk });
      state.results.residual = { result, walk, placements: s.placements, seeds: s.seeds, layers: s.config.layers };
      renderResidual();
      publish(Object.assign({ exp: 'residual', from_url: !!fromUrl }, result));
    } catch (err) {
      $('p10-status').textContent = '';
      showError('p10-error', err.message);
      publish({ exp: 'residual', error: err.message, from_url: !!fromUrl });
    } finally {
      $('run-10').disabled = false;
    }
  }

  function renderResidual() {
    const r = state.results.residual;
    if (!r) return;
    $('p10-out').hidden = false;
    const w = r.result.walk;
    const rows = r.walk.depths.filter((d) => d < w.depth.length).map((d) => [d, fmt(w.sqrt_depth_plus_1[d]), SOURCE_WALK[d] !== undefined
      && r.walk.dim === 256 ? SOURCE_WALK[d].toFixed(3) : '–', fmt(w.mean_length[d]), fmt(w.mean_relative_change[d], 3)]);
    fillTable($('p10-table'), [tr('blocks L'), 'sqrt(L+1)', tr('source'), tr('measured mean length'), tr('relative change by block L')], rows,
      tr('Random-walk residual stream: start length 1, each block adds a random unit vector (D={1}, {2} trials)', r.walk.dim, r.walk.trials));
    makeChart('p10-walk', {
      type: 'line',
      data: {
        datasets: [
          { label: tr('simulated mean length'), data: w.depth.map((d, i) => ({ x: d, y: w.mean_length[i] })), borderColor: '#1565c0',
            backgroundColor: '#1565c0', pointRadius: 1.5, borderWidth: 2 },
          { label: 'sqrt(L+1)', data: w.depth.map((d, i) => ({ x: d, y: w.sqrt_depth_plus_1[i] })), borderColor: '#333',
            borderDash: [5, 4], borderWidth: 1, pointRadius: 0 },
        ],
      },
      options: baseOptions(tr('stream length after L blocks'), tr('blocks L'), tr('mean |h^(L)|'), false,
        { min: 0, max: w.depth[w.depth.length - 1] }),
    });
    const rel = $('p10-rel').checked;
    const log = $('p10-log').checked;
    const datasets = [];
    let maxLayer = 0;
    for (const placement of r.placements)
      for (const seed of r.seeds) {
        const pts = r.result.init.filter((x) => x.placement === placement && x.seed === seed).sort((a, b) => a.layer - b.layer);
        if (!pts.length) continue;
        const base = pts[0].mean_token_norm;
        maxLayer = Math.max(maxLayer, pts[pts.length - 1].layer);
        datasets.push({
          label: r.seeds.length > 1 ? tr('{1}, seed {2}', placementLabel(placement), seed) : tr('{1}, {2} blocks, at init', placementLabel(placement), r.layers),
          data: pts.map((x) => ({ x: x.layer, y: rel ? x.mean_token_norm / base : x.mean_token_norm })),
          borderColor: COLORS[placement], backgroundColor: COLORS[placement], borderWidth: 2, pointRadius: 1.5,
        });
      }
    if (rel) {
      const ref = [];
      for (let l = 0; l <= maxLayer; ++l) ref.push({ x: l, y: Math.sqrt(l + 1) });
      datasets.push({ label: tr('sqrt(l+1): unit random additions'), data: ref, borderColor: '#333', borderDash: [5, 4], borderWidth: 1, pointRadius: 0 });
    }
    makeChart('p10-stream', {
      type: 'line', data: { datasets },
      options: baseOptions(tr('Residual stream per layer (0 = embeddings, l = after block l)'), tr('layer l'),
        rel ? tr('mean |h_t^(l)| / mean |h_t^(0)|') : tr('mean per-token norm'), log, { min: 0, max: maxLayer }),
    });
    $('p10-status').textContent = tr('Computed in {1} s.', fmt(r.result.seconds, 3));
  }

  function walkCsv() {
    const w = state.results.residual.result.walk;
    return csv(['depth', 'mean_length', 'sqrt_depth_plus_1', 'mean_relative_change'],
      w.depth.map((d, i) => [d, w.mean_length[i], w.sqrt_depth_plus_1[i], w.mean_relative_change[i]]));
  }

  function initCsv() {
    const init = state.results.residual.result.init;
    return csv(['placement', 'seed', 'layer', 'mean_vector_norm', 'mean_token_norm'],
      init.map((x) => [x.placement, x.seed, x.layer, x.mean_vector_norm, x.mean_token_norm]));
  }

  // ---- everything together -----------------------------------------------------------------------------

  function renderAll() {
    renderGradnorm();
    if (train) {
      setupTrainCharts();
      renderTrainTable();
    }
    if (state.table) renderScoreInputs();
    renderStandardize();
    renderResidual();
    renderBuildInfo();
  }

  function renderBuildInfo() {
    const b = state.buildInfo;
    if (!b) return;
    $('build-info').textContent = tr('blocklab {1}, instruction set {2}', b.version, b.isa) + ' · ' + b.kernels;
  }

  function wire() {
    $('lang-en').addEventListener('click', () => setLanguage('en'));
    $('lang-ko').addEventListener('click', () => setLanguage('ko'));
    $('preset-quick').addEventListener('click', () => applyPreset(QUICK));
    $('preset-source').addEventListener('click', () => applyPreset(SOURCE));
    $('placements-two').addEventListener('click', () => { setPlacements(['post', 'pre']); settingsChanged(); });
    $('placements-all').addEventListener('click', () => { setPlacements(PLACEMENTS.map((p) => p.name)); settingsChanged(); });
    $('settings-form').addEventListener('input', settingsChanged);
    $('settings-form').addEventListener('change', settingsChanged);
    for (const id of ['link-exp', 'link-run', 'w-dim', 'w-trials', 'w-depths']) $(id).addEventListener('change', updateLink);
    $('link-exp').addEventListener('change', () => (state.exp = $('link-exp').value));
    $('copy-link').addEventListener('click', copyLink);
    $('run-a').addEventListener('click', () => runGradnorm(false));
    $('a-family').addEventListener('change', () => { state.family = $('a-family').value; renderGradnorm(); updateLink(); });
    $('a-log').addEventListener('change', renderGradnorm);
    $('a-csv').addEventListener('click', () => download('gradnorm.csv', gradnormCsv(), 'text/csv'));
    $('a-json').addEventListener('click', () => download('gradnorm.json', JSON.stringify(state.results.gradnorm.result, null, 1), 'application/json'));
    $('run-b').addEventListener('click', () => startTraining(false));
    $('stop-b').addEventListener('click', stopTraining);
    $('continue-b').addEventListener('click', continueTraining);
    $('b-log').addEventListener('change', () => { setupTrainCharts(); });
    $('b-csv').addEventListener('click', () => download('train_metrics.csv', trainCsv(), 'text/csv'));
    $('b-json').addEventListener('click', () => download('train.json', JSON.stringify({ runs: train.runs.map((r) => ({
      config: r.resolved || r.config, metrics: r.metrics, summary: r.summary })) }, null, 1), 'application/json'));
    $('p9-reset').addEventListener('click', async () => {
      state.perColumnRows = ['A', 'B'];
      await loadSourceTable();
      standardize();
    });
    $('p9-csv').addEventListener('click', () => download('standardize.csv', standardizeCsv(), 'text/csv'));
    $('p9-json').addEventListener('click', () => download('standardize.json', JSON.stringify(state.results.standardize, null, 1), 'application/json'));
    $('run-10').addEventListener('click', () => runResidual(false));
    $('p10-rel').addEventListener('change', renderResidual);
    $('p10-log').addEventListener('change', renderResidual);
    $('p10-walk-csv').addEventListener('click', () => download('residual_walk.csv', walkCsv(), 'text/csv'));
    $('p10-init-csv').addEventListener('click', () => download('residual_init.csv', initCsv(), 'text/csv'));
    $('p10-json').addEventListener('click', () => download('residual.json', JSON.stringify(state.results.residual.result, null, 1), 'application/json'));
  }

  // Without a query string the form starts from the quick preset; with one, from blocklab's defaults (those of
  // `blocklab train --help`), so that a link means what the same flags mean on the command line.
  function startingValues(hasQuery) {
    if (!hasQuery) {
      applyPreset(QUICK);
      $('f-norm').value = 'layernorm';
      $('f-task').value = 'copy';
      $('f-seeds').value = '0';
      return;
    }
    const defaults = {};
    for (const k of state.keys) defaults[k.name] = k.default;
    for (const k of FORM_KEYS) $('f-' + k).value = String(defaults[k]);
    $('f-warmups').value = String(defaults.warmup);
    $('f-seeds').value = String(defaults.seed);
    setPlacements(['post', 'pre']);
  }

  async function main() {
    rememberEnglish();
    Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
    Chart.defaults.color = '#333';
    Chart.defaults.plugins.title.font = { size: 14, weight: '600' };
    renderPlacementBoxes();
    renderSelects();
    wire();
    const early = new URLSearchParams(location.search);
    const lang = early.get('lang') || ((navigator.language || '').toLowerCase().startsWith('ko') ? 'ko' : 'en');
    statusKey = N_('Loading the WebAssembly module…');
    await setLanguage(lang === 'ko' ? 'ko' : 'en');
    await ready;
    startingValues([...early.keys()].some((k) => k !== 'lang'));
    const q = readQuery();
    setLinkExp(q.exp);
    statusKey = N_('Ready.');
    setStatus(tr(statusKey));
    renderBuildInfo();
    settingsChanged();
    if (state.unknownPlacements && state.unknownPlacements.length)
      showError('settings-error', tr('unknown norm placement {1}', state.unknownPlacements.join(', ')));
    await loadSourceTable();
    await standardize(q.run && q.exp === 'standardize');
    if (q.run) {
      if (q.exp === 'gradnorm') runGradnorm(true);
      else if (q.exp === 'train') startTraining(true);
      else if (q.exp === 'residual') runResidual(true);
    }
  }

  window.blocklabUntranslated = () => [...I18n.missing].sort();
  window.addEventListener('DOMContentLoaded', main);
})();
