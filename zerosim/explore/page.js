// The page's only code: the explorer's numbers computed here, at whatever the controls say, from the compiled
// steps embedded in the page (zerosim/explore/_compile.py), then drawn. No network, no Python.
//
// `numbers(settings)` is zerosim/explore/_closed.py in JavaScript, line for line: the same walk over the ledger's
// moments for the memory, the same log and the same simulation (analysis/timeline/_simulate.py, _result.py) for
// the time, in the same order of float operations, so the page prints what `zerosim memory --json` and
// `zerosim timeline --json` print (tests/test_explore_browser.py checks it at random settings). Bytes are BigInt:
// activations at long sequences pass 2^53.
"use strict";
const G = JSON.parse(document.getElementById("data").textContent);
const FRAMES = JSON.parse(document.getElementById("steps").textContent);
const NS = "http://www.w3.org/2000/svg";
const KINDS = ["forward", "loss", "recompute", "keep input", "backward"];  // _compile.py KINDS, by index

// ---------------------------------------------------------------- the model (_closed.py) --------------------------
function terms(B, L) {  // (B·L, B·L², B·L·T, B, 1), T = ceil(L / tile)
  const b = BigInt(B), l = BigInt(L), t = BigInt(Math.ceil(L / G.tile));
  return [b * l, b * l * l, b * l * t, b, 1n];
}
function value(coef, t) {
  let s = 0n;
  for (let i = 0; i < coef.length; i++) s += BigInt(coef[i]) * t[i];
  return s;
}
function unrun(packed) {  // _compile.py `unrun`
  const out = [];
  for (const [first, step, count, kind, t] of packed) for (let i = 0; i < count; i++) out.push([first + step * i, kind, t]);
  return out;
}
function layout(units, N) {  // (s, Ψ, offsets)
  let total = 0;
  const offsets = [];
  for (const u of units) { offsets.push(total); total += u; }
  const s = Math.ceil(total / N);
  return [s, s * N, offsets];
}
function resting(units, N, stage, precision, optimizer) {
  const [s, padded] = layout(units, N);
  const p = BigInt(G.precisions[precision].bytes);
  const held = {params: p * BigInt(stage === 3 ? s : padded), grads: p * BigInt(stage >= 2 ? s : padded)};
  if (G.precisions[precision].master) held.master = 4n * BigInt(stage >= 1 ? s : padded);
  for (const name of G.optimizers[optimizer]) held["optim:" + name] = 4n * BigInt(stage >= 1 ? s : padded);
  return held;
}
function memory(c, ops, N, stage, precision, optimizer, B, L) {
  const units = c.units, t = terms(B, L), p = BigInt(G.precisions[precision].bytes);
  const [s, padded] = layout(units, N);
  const rest = resting(units, N, stage, precision, optimizer);
  const live = Object.assign({}, rest);
  const sum = () => Object.values(live).reduce((a, b) => a + b, 0n);
  const nonzero = () => Object.fromEntries(Object.entries(live).filter(([, v]) => v !== 0n));
  let most = sum(), best = nonzero();
  const moment = () => { const total = sum(); if (total > most) { most = total; best = nonzero(); } };
  live.activations = 0n;
  for (const [layer, k, ti] of ops) {
    const tpl = c.templates[ti], kind = KINDS[k];
    const gathered = stage === 3 && kind !== "loss" && kind !== "keep input" && units[layer] > 0;
    const unit = layer >= 0 ? p * BigInt(units[layer]) : 0n;
    if (gathered) { live.params += unit; moment(); }
    const before = live.activations;
    for (const cand of tpl.cands) { live.activations = before + value(cand, t); moment(); }
    live.activations = before + value(tpl.net, t);
    const grads = kind === "backward" && stage >= 2;
    if (grads) { live.grads += unit; moment(); }
    if (gathered) live.params -= unit;
    if (grads) live.grads -= unit;
  }
  const region = BigInt(stage === 0 ? padded : s);
  live.grad32 = 4n * region;
  moment();
  if (precision === "fp32") { live.scratch = 4n * region; moment(); }
  return {resting: rest, peak: most, at_peak: best};
}
function pairwiseSum(a, lo, n) {  // numpy's float64 add.reduce (loops_utils.h.src, pairwise_sum): the same roundings
  if (n < 8) { let res = -0.0; for (let i = 0; i < n; i++) res += a[lo + i]; return res; }
  if (n <= 128) {
    const r = a.slice(lo, lo + 8);
    let i = 8;
    for (; i < n - (n % 8); i += 8) for (let j = 0; j < 8; j++) r[j] += a[lo + i + j];
    let res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) res += a[lo + i];
    return res;
  }
  let n2 = Math.floor(n / 2);
  n2 -= n2 % 8;
  return pairwiseSum(a, lo, n2) + pairwiseSum(a, lo + n2, n - n2);
}
const npSum = a => pairwiseSum(a, 0, a.length);
function busyBefore(cs, ce, ts) {  // _result.py `_busy_before`
  const m = cs.length;
  if (m === 0) return ts.map(() => 0.0);
  const done = [0.0];
  let acc = 0.0;
  for (let i = 0; i < m; i++) { acc = i === 0 ? ce[0] - cs[0] : acc + (ce[i] - cs[i]); done.push(acc); }
  return ts.map(t => {
    let j = 0;
    while (j < m && ce[j] <= t) j++;  // searchsorted(ce, t, side="right"): ce is sorted
    const k = Math.min(j, m - 1);
    const inside = j < m ? Math.max(t - cs[k], 0.0) : 0.0;
    return done[j] + inside;
  });
}
function union(starts, ends) {  // _result.py `_union` (one stream: the calls follow each other, returned as they are)
  let ordered = true;
  for (let i = 1; i < starts.length; i++) if (!(starts[i] >= starts[i - 1] && starts[i] >= ends[i - 1])) ordered = false;
  if (starts.length < 2 || ordered) return [starts, ends];
  const order = starts.map((s, i) => i).sort((a, b) => starts[a] - starts[b] || a - b);
  const os = [], oe = [];
  for (const i of order) {
    if (oe.length && starts[i] < oe[oe.length - 1]) oe[oe.length - 1] = Math.max(oe[oe.length - 1], ends[i]);
    else { os.push(starts[i]); oe.push(ends[i]); }
  }
  return [os, oe];
}
function timeline(c, ops, N, stage, precision, optimizer, B, L, gpu) {
  const units = c.units, t = terms(B, L), prec = G.precisions[precision];
  const [s, padded, offsets] = layout(units, N);
  const itemsize = prec.bytes, rate = gpu.rate[prec.compute], hbm = gpu.hbm;
  // nodes of G.gpus_per_node: a ring that leaves a node crosses between nodes (nodes − 1) times a phase at the
  // network's α, its other steps at NVLink's, its bytes over the node's NICs (analysis/timeline/_simulate.py call_time)
  const intra = G.links.intra, inter = N > G.gpus_per_node ? G.links.inter : null;
  const nodes = inter ? Math.ceil(N / G.gpus_per_node) : 1, nics = Math.max(Math.floor(N / Math.max(nodes, 1)), 1);
  const callEnd = [], cs = [], ce = [], ks = [], ke = [];
  let ready = 0.0, latest = 0.0, free = 0.0;
  function phaseTime(busiest, first) {  // _cost.py phase_time: NCCL's ring latency, then the bytes
    const steps = N - 1;
    if (steps === 0) return 0.0;
    const crossings = inter ? Math.min(Math.max(nodes - 1, 0), steps) : 0;
    const alphaInter = inter ? inter.alpha : intra.alpha;
    const beta = inter ? Math.min(intra.bandwidth, Math.max(nics, 1) * inter.bandwidth) : intra.bandwidth;
    const base = first ? (inter ? inter.base : intra.base) : 0.0;  // once a call: not an all-reduce's second phase
    const latency = base + (steps - crossings) * intra.alpha + crossings * alphaInter;
    return latency + busiest / beta;
  }
  function call(window, first = true) {  // one ring phase over the window [a, b) of the flat buffer, one stream
    let busiest = 0;
    if (N > 1) {
      let sum = 0, min = Infinity;
      for (let r = 0; r < N; r++) {
        const size = Math.max(0, Math.min(window[1], (r + 1) * s) - Math.max(window[0], r * s));
        sum += size;
        min = Math.min(min, size);
      }
      busiest = (sum - min) * itemsize;  // every chunk but the smallest
    }
    const start = Math.max(latest, free);
    const end = start + phaseTime(busiest, first);
    free = end;
    callEnd.push(end); ks.push(start); ke.push(end);
    return callEnd.length - 1;
  }
  function busy(needs, took) {
    let start = ready;
    for (const n of needs) if (callEnd[n] > start) start = callEnd[n];
    ready = start + took;
    latest = Math.max(latest, start + took);
    cs.push(start); ce.push(start + took);
  }
  let last = [];
  for (const [layer, k, ti] of ops) {
    const tpl = c.templates[ti], kind = KINDS[k];
    const window = layer >= 0 ? [offsets[layer], offsets[layer] + units[layer]] : null;
    const needs = stage === 3 && kind !== "loss" && kind !== "keep input" ? [call(window)] : [];
    if (kind !== "keep input") {
      busy(needs, Math.max(Number(value(tpl.flops, t)) / rate, Number(value(tpl.bytes, t)) / hbm));
    }
    if (kind === "backward" && stage >= 2) last = [call(window)];
  }
  const whole = [0, padded];
  if (stage === 0) last = [call(whole), call(whole, false)];  // the all-reduce's two phases: one call's base
  else if (stage === 1) last = [call(whole)];
  const states = G.optimizers[optimizer].length;  // _cost.py optimizer_bytes_per_element: three passes
  const perElement = (itemsize + (4 + 4 + 4 * states) + 4) + (4 + (4 + 4 * states) + itemsize);
  busy(last, (stage === 0 ? padded : s) * perElement / hbm);
  if (stage === 1 || stage === 2) call(whole);  // refresh the params
  const [us, ue] = union(ks, ke);
  const comm = us.map((a, i) => ue[i] - a);
  const computeBusy = npSum(cs.map((a, i) => ce[i] - a));
  const before = busyBefore(cs, ce, ue), after = busyBefore(cs, ce, us);
  const exposed = npSum(comm.map((x, i) => x - (before[i] - after[i])));
  const stepEnd = Math.max(...ce, ...ke);
  return {step_s: stepEnd - 0.0, compute_s: computeBusy, comm_s: npSum(comm), exposed_s: exposed,
          link: (inter || intra).name, device: gpu.device};
}
// Every number the page shows for `s` ({model, ranks, stage, precision, optimizer, seq_len, micro_batch, checkpoint,
// gpu}), or {error: one line} for a setting the model refuses.
function numbers(s) {
  const model = G.models[s.model];
  if (!model) return {error: `no model ${s.model}`};
  for (const name of ["ranks", "seq_len", "micro_batch"]) {
    if (!Number.isInteger(s[name]) || s[name] < 1) return {error: `${name} must be a whole number >= 1, got ${s[name]}`};
  }
  if (s.ranks > G.gpus_per_node && s.ranks % G.gpus_per_node) {  // _closed.py check_ranks: whole nodes of 8
    return {error: `${s.ranks} ranks do not fill nodes of ${G.gpus_per_node} GPUs: gpus_per_node must divide ` +
                   "world_size"};
  }
  if (s.seq_len > model.max_positions) {
    return {error: `seq_len ${s.seq_len} is longer than ${s.model}'s ${model.max_positions} positions`};
  }
  const c = G.steps[`${s.model}|${s.checkpoint}|${G.precisions[s.precision].width}`];
  const ops = unrun(c.ops), gpu = G.gpus[s.gpu];
  const m = memory(c, ops, s.ranks, s.stage, s.precision, s.optimizer, s.micro_batch, s.seq_len);
  const t = timeline(c, ops, s.ranks, s.stage, s.precision, s.optimizer, s.micro_batch, s.seq_len, gpu);
  return Object.assign({params: c.params, capacity: BigInt(gpu.capacity), gpu: gpu.name,
                        fits: m.peak <= BigInt(gpu.capacity)}, m, t);
}

// ---------------------------------------------------------------- the controls -----------------------------------
const state = {};  // control name -> its value now
function el(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
function text(parent, x, y, s, anchor, cls) {
  const t = el("text", {x: x, y: y, "text-anchor": anchor || "start"}, parent);
  if (cls) t.setAttribute("class", cls);
  t.textContent = s;
  return t;
}
function controls() {  // one control per row of G.controls: adding a degree (TP, offload, ...) is adding a row
  const box = document.getElementById("controls");
  for (const c of G.controls) {
    state[c.name] = c.start;
    const row = document.createElement("div");
    row.className = "control";
    const label = document.createElement("label");
    label.textContent = c.label;
    label.htmlFor = "control-" + c.name;
    const out = document.createElement("output");
    out.id = "value-" + c.name;
    label.appendChild(out);
    row.appendChild(label);
    let input;
    if (c.type === "select") {
      input = document.createElement("select");
      for (const v of c.values) input.add(new Option(c.names ? c.names[v] || v : v, String(v)));
      input.value = String(c.start);
      input.addEventListener("input", () => { state[c.name] = c.numeric ? Number(input.value) : input.value; draw(); });
    } else {  // a slider over the stops, and a box for any whole number
      input = document.createElement("input");
      Object.assign(input, {type: "range", min: 0, max: c.values.length - 1, step: 1});
      input.value = String(Math.max(0, c.values.indexOf(c.start)));
      const box2 = document.createElement("input");
      Object.assign(box2, {type: "number", min: 1, step: 1, id: "number-" + c.name, value: String(c.start)});
      box2.setAttribute("aria-label", c.label + " (any whole number)");
      input.addEventListener("input", () => {
        state[c.name] = c.values[Number(input.value)];
        box2.value = String(state[c.name]);
        draw();
      });
      box2.addEventListener("input", () => {
        state[c.name] = Number(box2.value);
        const at = c.values.indexOf(state[c.name]);
        if (at >= 0) input.value = String(at);
        draw();
      });
      const pair = document.createElement("div");
      pair.className = "pair";
      pair.appendChild(input);
      pair.appendChild(box2);
      input.id = "control-" + c.name;
      row.appendChild(pair);
      if (c.note) { const n = document.createElement("div"); n.className = "hint"; n.textContent = c.note; row.appendChild(n); }
      box.appendChild(row);
      continue;
    }
    input.id = "control-" + c.name;
    row.appendChild(input);
    if (c.note) { const n = document.createElement("div"); n.className = "hint"; n.textContent = c.note; row.appendChild(n); }
    box.appendChild(row);
  }
}

// ---------------------------------------------------------------- drawing ----------------------------------------
const gb = bytes => (Number(bytes) / 1e9).toFixed(2) + " GB";
const ms = seconds => (seconds * 1e3).toFixed(1) + " ms";
const SHOWN = ["peak", "capacity", "verdict", "step", "compute", "hidden", "exposed", "params", "link", "sticky-peak",
               "sticky-verdict", "sticky-step"];

function clear() {  // nothing of the last setting survives a redraw: every number is blanked first
  for (const id of SHOWN) {
    const e = document.getElementById(id);
    e.textContent = "—";
    delete e.dataset.bytes;
    delete e.dataset.seconds;
  }
  document.getElementById("verdict").className = "verdict";
  document.getElementById("memory").replaceChildren();
  document.getElementById("time").replaceChildren();
  document.getElementById("kinds").replaceChildren();
  document.getElementById("notes").replaceChildren();
}

function draw() {
  for (const c of G.controls) document.getElementById("value-" + c.name).textContent = String(state[c.name]);
  const s = Object.fromEntries(G.controls.map(c => [c.name, state[c.name]]));
  document.body.dataset.settings = JSON.stringify(s);
  clear();
  const n = numbers(s);
  document.getElementById("error").textContent = n.error ? "Not drawn: " + n.error : "";
  document.body.dataset.drawn = n.error ? "no" : "yes";
  if (n.error) return;
  drawMemory(n, s);
  drawTime(n);
  notes(n, s);
  document.getElementById("sticky-peak").textContent = gb(n.peak);
  document.getElementById("sticky-verdict").textContent = n.fits ? "fits" : "does NOT fit";
  document.getElementById("sticky-step").textContent = ms(n.step_s);
}

function widthOf(svg) {  // drawn at the width it is shown at, so that its text stays at its size on a phone
  return Math.round(Math.max(300, Math.min(640, svg.parentElement.clientWidth || 560)));
}

function drawMemory(p, s) {
  const svg = document.getElementById("memory");
  const W = widthOf(svg), H = 300, left = 52, top = 22, bottom = 40, h = H - top - bottom;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const peak = Number(p.peak), cap = Number(p.capacity);
  const ymax = Math.max(cap, peak) * 1.12;
  const y = v => top + h - h * v / ymax;
  const raw = ymax / 1e9 / 5, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const tick = [1, 2, 5, 10].map(f => f * mag).find(t => t >= raw);  // a round step in GB: 1, 2 or 5 x 10^k
  for (let v = 0; v * 1e9 <= ymax; v += tick) {
    el("line", {x1: left, x2: W - 8, y1: y(v * 1e9), y2: y(v * 1e9), stroke: "#e4e4e4"}, svg);
    text(svg, left - 6, y(v * 1e9) + 4, String(+v.toPrecision(6)), "end");
  }
  const ylab = text(svg, 13, top + h / 2, "GB per GPU", "middle");
  ylab.setAttribute("transform", `rotate(-90 13 ${top + h / 2})`);
  const cols = [["at the peak", p.at_peak], ["at rest after the step", p.resting]];
  const span = (W - left - 8) / 2, w = Math.min(110, span * 0.62);
  cols.forEach(([name, held], i) => {
    const x = left + i * span + (span - w) / 2;
    let sum = 0;
    for (const kind of Object.keys(G.kinds)) {
      const b = Number(held[kind] || 0n);
      if (!b) continue;
      el("rect", {x: x, y: y(sum + b), width: w, height: y(sum) - y(sum + b), fill: G.kinds[kind][1], stroke: "white",
                  "stroke-width": 0.6, "data-kind": kind, "data-bytes": String(held[kind]), class: "bar col" + i}, svg);
      sum += b;
    }
    text(svg, x + w / 2, y(sum) - 5, gb(sum), "middle", "total col" + i);
    text(svg, x + w / 2, H - bottom + 16, W < 420 ? name.replace(" after the step", "") : name, "middle");
  });
  el("line", {x1: left, x2: W - 8, y1: y(cap), y2: y(cap), stroke: "black", "stroke-dasharray": "6 4",
              id: "capacity-line"}, svg);
  text(svg, W - 8, y(cap) - 5, `${p.gpu}: ${gb(p.capacity)}`, "end", "capacity-label").id = "capacity-label";
  const peakEl = document.getElementById("peak");
  peakEl.textContent = gb(p.peak);
  peakEl.dataset.bytes = String(p.peak);
  const capEl = document.getElementById("capacity");
  capEl.textContent = `${p.gpu}'s ${gb(p.capacity)}`;
  capEl.dataset.bytes = String(p.capacity);
  const verdict = document.getElementById("verdict");
  verdict.textContent = p.fits ? "fits" : "does NOT fit";
  verdict.className = "verdict " + (p.fits ? "yes" : "no");
  document.getElementById("params").textContent = Number(p.params).toLocaleString("en-US");
  document.getElementById("params").dataset.bytes = String(p.params);
  const table = document.getElementById("kinds");
  const head = table.insertRow();
  ["memory kind", "at the peak", "at rest"].forEach(x => { head.insertCell().textContent = x; });
  for (const [kind, [label, colour]] of Object.entries(G.kinds)) {
    const a = p.at_peak[kind] || 0n, r = p.resting[kind] || 0n;
    if (!a && !r) continue;
    const row = table.insertRow();
    row.dataset.kind = kind;
    const name = row.insertCell();
    const sw = document.createElement("span");
    sw.className = "swatch";
    sw.style.background = colour;
    name.appendChild(sw);
    const link = document.createElement("a");
    link.href = G.glossary + "#" + G.kinds[kind][2];
    link.addEventListener("click", () => { document.getElementById("glossary-box").open = true; });
    link.textContent = label;
    name.appendChild(link);
    for (const [b, cls] of [[a, "at-peak"], [r, "resting"]]) {
      const c = row.insertCell();
      c.className = "num " + cls;
      c.dataset.bytes = String(b);
      c.textContent = gb(b);
    }
  }
}

function drawTime(p) {
  const svg = document.getElementById("time");
  const hidden = p.comm_s - p.exposed_s;
  const parts = [["compute", p.compute_s], ["hidden", hidden], ["exposed", p.exposed_s]];
  const names = {compute: "compute", hidden: "comm. hidden", exposed: "comm. exposed"};
  const full = widthOf(svg);
  svg.setAttribute("viewBox", `0 0 ${full} 110`);
  const left = 124, W = full - left - 84, most = Math.max(...parts.map(q => q[1])) || 1;
  parts.forEach(([part, s], i) => {
    const yy = 8 + i * 34;
    text(svg, left - 8, yy + 16, names[part], "end");
    el("rect", {x: left, y: yy, width: W * s / most, height: 22, fill: G.time_colours[part], "data-part": part,
                "data-seconds": s}, svg);
    text(svg, left + W * s / most + 5, yy + 16, ms(s));
  });
  for (const [id, s] of [["step", p.step_s], ["compute", p.compute_s], ["hidden", hidden], ["exposed", p.exposed_s]]) {
    const e = document.getElementById(id);
    e.textContent = ms(s);
    e.dataset.seconds = s;
  }
  document.getElementById("link").textContent = `${p.device}, ${p.link}`;
}

function notes(p, s) {  // what a student meets at this setting and might misread
  const box = document.getElementById("notes");
  const say = (html) => { const li = document.createElement("li"); li.innerHTML = html; box.appendChild(li); };
  const gpu = G.gpus[s.gpu];
  if (s.stage === 3) {
    say("<b>Prefetch.</b> Stage 3 here gathers each unit right before it runs and frees it after (seed 004's " +
        "schedule, no prefetch), so its gathers wait for the compute before them and sit exposed. Prefetching the " +
        "next unit (<code>zerosim timeline --forward-prefetch 1 --backward-prefetch pre</code>) hides them behind " +
        "compute and holds one more unit in memory.");
  }
  if (s.precision === "fp32") {
    const r = gpu.rate.bf16 / gpu.rate.fp32;
    say(`<b>fp32.</b> Every layer runs at the ${gpu.device}'s plain FP32 rate, ${r.toFixed(1)}&times; below its ` +
        "16-bit tensor cores, and this model is a roofline at peak rates: so the compute here is that much slower. " +
        "Seed 002's \"2x end to end\" is a measured whole run (data loading, memory-bound kernels, communication) " +
        "and TF32 tensor cores, which PyTorch can use for fp32 matmuls; neither is in this number.");
  }
  if (s.ranks > G.gpus_per_node) {
    say(`<b>Links.</b> Nodes of ${G.gpus_per_node} GPUs: a ring over ${s.ranks} ranks crosses between nodes ` +
        `${Math.ceil(s.ranks / G.gpus_per_node) - 1} times a phase over ${G.links.inter.name} (NCCL's 14 µs a step) ` +
        "and moves its bytes over the node's NICs (<code>zerosim timeline --gpus-per-node 8</code>).");
  }
  say("<b>Assumed.</b> zerosim's own fused kernels at the datasheet's peak rates and a ring per call, as the " +
      "notebooks teach (<code>zerosim memory --kernels fused</code>, <code>zerosim timeline --kernels fused " +
      "--efficiency peak</code>); the commands' defaults (eager kernels at achieved rates) hold more and run slower.");
  say("The peak is the ledger's: every buffer one rank holds at the moment it held the most (the fp32 gradient at " +
      "the optimizer step, gathered units, a unit's gradients), not a formula; the verdict compares it alone with " +
      "the GPU. <code>zerosim memory --gpu</code> adds what no ledger sees (CUDA context, NCCL buffers, the " +
      "allocator's reserve).");
}

let frame = 0;
function showFrame() {
  document.getElementById("frame").textContent = FRAMES[frame];
  document.getElementById("frame-no").textContent = `part ${frame + 1} of ${FRAMES.length}`;
  document.getElementById("prev").disabled = frame === 0;
  document.getElementById("next").disabled = frame === FRAMES.length - 1;
}
document.getElementById("prev").addEventListener("click", () => { frame = Math.max(0, frame - 1); showFrame(); });
document.getElementById("next").addEventListener("click", () => {
  frame = Math.min(FRAMES.length - 1, frame + 1); showFrame();
});

controls();
draw();
showFrame();
let drawnWidth = window.innerWidth;
window.addEventListener("resize", () => { if (window.innerWidth !== drawnWidth) { drawnWidth = window.innerWidth; draw(); } });
