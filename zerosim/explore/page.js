// The page's only code: it looks the selected setting up in the grid embedded in the page and draws it. It computes
// no number: every byte and second shown is a field of `zerosim memory --json` or `zerosim timeline --json`, run once
// per setting when the grid was compiled (zerosim/explore/_grid.py), so there is no second model here to drift from
// the package's. tests/test_explore_browser.py runs the CLI again at test time and compares what is drawn.
"use strict";
const G = JSON.parse(document.getElementById("data").textContent);
const FRAMES = JSON.parse(document.getElementById("steps").textContent);
const NS = "http://www.w3.org/2000/svg";

// ---------------------------------------------------------------- the lookup -------------------------------------
// A setting is one value per axis. An axis that does not apply (G.applies: prefetch below stage 3) is held at its
// first value, as _grid.py `canonical` holds it; the point's place in the grid is its mixed-radix index.
function applies(name, s) {
  return !(name in G.applies) || Object.entries(G.applies[name]).every(([other, values]) => values.includes(s[other]));
}
function canonical(s) {
  const out = Object.assign({}, s);
  for (const name of Object.keys(G.applies)) {
    if (!applies(name, out)) out[name] = G.axes.find(a => a.name === name).values[0];
  }
  return out;
}
function indexOf(s) {
  let i = 0;
  for (const a of G.axes) i = i * a.values.length + a.values.indexOf(s[a.name]);
  return i;
}
// {memory, time} records of setting `s`, or {error: the CLI's one line}
function lookup(s) {
  const at = G.grid.points[String(indexOf(canonical(s)))];
  if (!at) return {error: "this setting is not in the page's grid"};
  const [m, t] = at;
  if (m < 0) return {error: G.grid.errors[-1 - m]};
  if (t < 0) return {error: G.grid.errors[-1 - t]};
  return {memory: G.grid.memory[m], time: G.grid.time[t]};
}
function command(s, which) {  // the command line the setting stands for: _grid.py `argv`, less --json
  const words = G.base[which].slice();
  for (const a of G.axes) words.push(...a.flags[String(s[a.name])][which]);
  return "zerosim " + words.join(" ");
}

// ---------------------------------------------------------------- the controls -----------------------------------
const state = {};
function controls() {  // one select per axis of the grid
  const box = document.getElementById("controls");
  for (const a of G.axes) {
    state[a.name] = a.start;
    const row = document.createElement("div");
    row.className = "control";
    const label = document.createElement("label");
    label.textContent = a.label;
    label.htmlFor = "control-" + a.name;
    row.appendChild(label);
    const input = document.createElement("select");
    input.id = "control-" + a.name;
    for (const v of a.values) input.add(new Option(a.names[String(v)], String(v)));
    input.value = String(a.start);
    input.addEventListener("input", () => {
      state[a.name] = a.values.find(v => String(v) === input.value);
      draw();
    });
    row.appendChild(input);
    const hint = document.createElement("div");
    hint.className = "hint";
    hint.id = "hint-" + a.name;
    hint.textContent = a.note;
    row.appendChild(hint);
    box.appendChild(row);
  }
}
function set(changes) {  // move controls as a reader would (the compare table's buttons)
  Object.assign(state, changes);
  for (const a of G.axes) document.getElementById("control-" + a.name).value = String(state[a.name]);
  draw();
}

// ---------------------------------------------------------------- drawing ----------------------------------------
const gb = bytes => (Number(bytes) / 1e9).toFixed(2) + " GB";
const ms = seconds => (seconds * 1e3).toFixed(1) + " ms";
const SHOWN = ["peak", "extra", "total", "capacity", "verdict", "step", "compute", "comm", "hidden", "exposed",
               "tokens", "params", "link", "host-wait", "sticky-total", "sticky-verdict", "sticky-step",
               "sticky-exposed"];
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
function put(id, shown, data) {
  const e = document.getElementById(id);
  e.textContent = shown;
  if (data) Object.assign(e.dataset, data);
}
function clear() {  // nothing of the last setting survives a redraw: every number is blanked first
  for (const id of SHOWN) {
    const e = document.getElementById(id);
    e.textContent = id === "host-wait" ? "" : "—";
    delete e.dataset.bytes;
    delete e.dataset.seconds;
  }
  document.getElementById("verdict").className = "verdict";
  for (const id of ["memory", "time", "kinds", "purposes", "compare", "notes"]) {
    document.getElementById(id).replaceChildren();
  }
  document.getElementById("commands").textContent = "";
}
function widthOf(svg) {  // drawn at the width it is shown at, so that its text stays at its size on a phone
  return Math.round(Math.max(300, Math.min(640, svg.parentElement.clientWidth || 560)));
}

function draw() {
  const s = Object.fromEntries(G.axes.map(a => [a.name, state[a.name]]));
  const c = canonical(s);
  for (const a of G.axes) {  // an axis that does not apply is greyed, with the reason
    const off = !applies(a.name, s);
    document.getElementById("control-" + a.name).disabled = off;
    document.getElementById("hint-" + a.name).textContent = off ? G.why_not[a.name] : a.note;
  }
  document.body.dataset.settings = JSON.stringify(c);
  clear();
  const n = lookup(c);
  document.getElementById("error").textContent = n.error ? "Not drawn: " + n.error : "";
  document.body.dataset.drawn = n.error ? "no" : "yes";
  document.getElementById("commands").textContent = command(c, "memory") + "\n" + command(c, "timeline");
  drawCompare(c);
  if (n.error) return;
  drawMemory(n.memory);
  drawTime(n.time);
  notes(n, c);
  put("sticky-total", gb(n.memory.fit.total));
  put("sticky-verdict", n.memory.fit.fits ? "fits" : "does NOT fit");
  put("sticky-step", ms(n.time.step_s));
  put("sticky-exposed", ms(n.time.exposed_comm_s));
}

function drawMemory(m) {
  const svg = document.getElementById("memory");
  const W = widthOf(svg), H = 300, left = 52, top = 22, bottom = 40, h = H - top - bottom;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const cols = [["at the peak", m.at_peak, m.fit.overheads_total], ["at rest after the step", m.resting, 0]];
  if (m.host) cols.push(["on the host (this GPU's share)", m.host.resting, 0]);
  const sum = held => Object.values(held).reduce((a, b) => a + Number(b), 0);
  const cap = Number(m.fit.capacity);
  const ymax = Math.max(cap, Number(m.fit.total), ...cols.map(([, held]) => sum(held))) * 1.12;
  const y = v => top + h - h * v / ymax;
  const raw = ymax / 1e9 / 5, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const tick = [1, 2, 5, 10].map(f => f * mag).find(t => t >= raw);  // a round step in GB: 1, 2 or 5 x 10^k
  for (let v = 0; v * 1e9 <= ymax; v += tick) {
    el("line", {x1: left, x2: W - 8, y1: y(v * 1e9), y2: y(v * 1e9), stroke: "#e4e4e4"}, svg);
    text(svg, left - 6, y(v * 1e9) + 4, String(+v.toPrecision(6)), "end");
  }
  const ylab = text(svg, 13, top + h / 2, "GB", "middle");
  ylab.setAttribute("transform", `rotate(-90 13 ${top + h / 2})`);
  const span = (W - left - 8) / cols.length, w = Math.min(110, span * 0.62);
  cols.forEach(([name, held, extra], i) => {
    const x = left + i * span + (span - w) / 2;
    let total = 0;
    for (const kind of Object.keys(G.kinds)) {
      const b = Number(held[kind] || 0);
      if (!b) continue;
      el("rect", {x: x, y: y(total + b), width: w, height: y(total) - y(total + b), fill: G.kinds[kind][1],
                  stroke: "white", "stroke-width": 0.6, "data-kind": kind, "data-bytes": String(held[kind]),
                  class: "bar col" + i}, svg);
      total += b;
    }
    if (extra) {  // what no ledger sees: CUDA context, NCCL's buffers, the allocator's reserve (the CLI's estimates)
      el("rect", {x: x, y: y(total + extra), width: w, height: y(total) - y(total + extra), fill: "#cccccc",
                  stroke: "#888", "stroke-dasharray": "3 2", "data-kind": "estimates", "data-bytes": String(extra),
                  class: "bar col" + i}, svg);
      total += extra;
    }
    text(svg, x + w / 2, y(total) - 5, gb(total), "middle", "total col" + i);
    const label = W < 420 ? name.replace(" after the step", "").replace(" (this GPU's share)", "") : name;
    text(svg, x + w / 2, H - bottom + 16, label, "middle", W < 420 ? "small" : "");
  });
  el("line", {x1: left, x2: W - 8, y1: y(cap), y2: y(cap), stroke: "black", "stroke-dasharray": "6 4",
              id: "capacity-line"}, svg);
  text(svg, W - 8, y(cap) - 5, `capacity ${gb(m.fit.capacity)}`, "end", "small").id = "capacity-label";
  put("peak", gb(m.peak), {bytes: String(m.peak)});
  put("extra", gb(m.fit.overheads_total), {bytes: String(m.fit.overheads_total)});
  put("total", gb(m.fit.total), {bytes: String(m.fit.total)});
  put("capacity", gb(m.fit.capacity), {bytes: String(m.fit.capacity)});
  put("verdict", m.fit.fits ? "fits" : "does NOT fit");
  document.getElementById("verdict").className = "verdict " + (m.fit.fits ? "yes" : "no");
  put("params", Number(m.params).toLocaleString("en-US"), {bytes: String(m.params)});
  const table = document.getElementById("kinds");
  const head = table.insertRow();
  ["memory kind", "at the peak", "at rest"].concat(m.host ? ["host"] : []).forEach(x => {
    head.insertCell().textContent = x;
  });
  const rows = Object.entries(G.kinds).map(([k, v]) => [k, v[0], v[1], v[2]]);
  rows.push(["estimates", "not in a ledger: " + m.overheads.map(o => o[0]).join(", "), "#cccccc", null]);
  for (const [kind, label, colour, anchor] of rows) {
    const a = kind === "estimates" ? m.fit.overheads_total : m.at_peak[kind] || 0;
    const r = kind === "estimates" ? 0 : m.resting[kind] || 0;
    const hst = m.host && kind !== "estimates" ? m.host.resting[kind] || 0 : 0;
    if (!a && !r && !hst) continue;
    const row = table.insertRow();
    row.dataset.kind = kind;
    const name = row.insertCell();
    const sw = document.createElement("span");
    sw.className = "swatch";
    sw.style.background = colour;
    name.appendChild(sw);
    if (anchor) {
      const link = document.createElement("a");
      link.href = "#" + anchor;
      link.addEventListener("click", () => { document.getElementById("glossary-box").open = true; });
      link.textContent = label;
      name.appendChild(link);
    } else name.appendChild(document.createTextNode(label));
    for (const [b, cls] of [[a, "at-peak"], [r, "resting"]].concat(m.host ? [[hst, "host"]] : [])) {
      const cell = row.insertCell();
      cell.className = "num " + cls;
      cell.dataset.bytes = String(b);
      cell.textContent = gb(b);
    }
  }
}

function drawTime(t) {
  // two lanes on one time axis: the GPU's compute, then what it waits for (exposed communication, the host), and
  // the communication stream, its hidden part under the compute and its exposed part after it
  const svg = document.getElementById("time");
  const full = widthOf(svg), H = 150, left = 110, right = 12, W = full - left - right;
  svg.setAttribute("viewBox", `0 0 ${full} ${H}`);
  const hidden = t.overlapped_s, exposed = t.exposed_comm_s, step = t.step_s;
  const wait = t.offload ? Math.max(step - t.compute_s - exposed, 0) : 0;  // drawn only: the CLI's step is the total
  const x = v => left + W * v / step;
  const bar = (lane, a, b, part, what) => {
    if (b <= a) return;
    el("rect", {x: x(a), y: 14 + lane * 40, width: Math.max(x(b) - x(a), 0.5), height: 24,
                fill: G.time_colours[part], "data-part": what, "data-seconds": b - a}, svg);
  };
  text(svg, left - 8, 31, "GPU compute", "end");
  text(svg, left - 8, 71, "communication", "end");
  bar(0, 0, t.compute_s, "compute", "compute");
  bar(0, t.compute_s, t.compute_s + exposed, "exposed", "waits: exposed");
  if (wait) bar(0, t.compute_s + exposed, step, "host", "waits: host");
  bar(1, 0, hidden, "hidden", "hidden");
  bar(1, t.compute_s, t.compute_s + exposed, "exposed", "exposed");
  el("line", {x1: x(step), x2: x(step), y1: 8, y2: 100, stroke: "black", "stroke-dasharray": "4 3"}, svg);
  text(svg, x(step), 114, `step ${ms(step)}`, "end", "small");
  text(svg, left, 114, "0", "start", "small");
  // the key: each part's total, laid end to end (the simulator interleaves them through the step)
  const key = [["compute", "compute"], ["hidden", "hidden comm."], ["exposed", "exposed comm."]]
    .concat(wait ? [["host", "waits for the host"]] : []);
  let kx = 8, ky = 128;
  for (const [part, label] of key) {
    const box = el("rect", {x: kx, y: ky, width: 10, height: 10, fill: G.time_colours[part]}, svg);
    const t = text(svg, kx + 14, ky + 9, label, "start", "small");
    const w = 14 + t.getComputedTextLength() + 12;  // the label as drawn, and a gap
    if (kx > 8 && kx + w > full - 4) {  // a phone: the key wraps
      kx = 8;
      ky += 15;
      box.setAttribute("x", kx); box.setAttribute("y", ky);
      t.setAttribute("x", kx + 14); t.setAttribute("y", ky + 9);
    }
    kx += w;
  }
  svg.setAttribute("viewBox", `0 0 ${full} ${ky + 16}`);
  put("step", ms(step), {seconds: String(step)});
  put("compute", ms(t.compute_s), {seconds: String(t.compute_s)});
  put("comm", ms(t.comm_s), {seconds: String(t.comm_s)});
  put("hidden", ms(hidden), {seconds: String(hidden)});
  put("exposed", ms(exposed), {seconds: String(exposed)});
  if (t.offload) {
    put("host-wait", `; the optimizer's step on the CPU ${ms(t.offload.cpu_s)} and the PCIe copies ` +
        `${ms(t.offload.pcie_s)}: the GPU idles ${ms(t.offload.idle_s)} in all, waiting for them and for the exposed ` +
        "communication", {seconds: String(t.offload.idle_s)});
  }
  put("tokens", Math.round(t.tokens_per_s_per_gpu).toLocaleString("en-US"), {value: String(t.tokens_per_s_per_gpu)});
  put("link", `${t.device}, ${t.link}` + (t.inter_link ? ` within a node, ${t.inter_link} between nodes` : ""));
  const table = document.getElementById("purposes");
  const head = table.insertRow();
  ["communication, by what it is for", "seconds busy"].forEach(x => { head.insertCell().textContent = x; });
  for (const [purpose, seconds] of Object.entries(t.by_purpose)) {
    const row = table.insertRow();
    row.dataset.purpose = purpose;
    row.insertCell().textContent = purpose;
    const cell = row.insertCell();
    cell.className = "num";
    cell.dataset.seconds = String(seconds);
    cell.textContent = ms(seconds);
  }
}

function drawCompare(c) {  // the same setting at each TP degree and with offload: columns of looked-up numbers
  const table = document.getElementById("compare");
  const cols = [["TP 1", {tp: 1, offload: "none"}], ["TP 2", {tp: 2, offload: "none"}],
                ["TP 8", {tp: 8, offload: "none"}], ["offload to CPU", {tp: 1, offload: "cpu"}]];
  const head = table.insertRow();
  head.appendChild(document.createElement("th")).textContent = "";
  for (const [name, change] of cols) {
    const th = document.createElement("th");
    const b = document.createElement("button");
    b.textContent = name;
    b.addEventListener("click", () => set(change));
    th.appendChild(b);
    if (c.tp === change.tp && c.offload === change.offload) th.className = "here";
    head.appendChild(th);
  }
  const looked = cols.map(([, change]) => lookup(canonical(Object.assign({}, c, change))));
  const rows = [["memory per GPU", n => gb(n.memory.fit.total) + (n.memory.fit.fits ? "" : " ✗")],
                ["step", n => ms(n.time.step_s)], ["exposed comm.", n => ms(n.time.exposed_comm_s)],
                ["tokens/s per GPU", n => Math.round(n.time.tokens_per_s_per_gpu).toLocaleString("en-US")]];
  for (const [label, show] of rows) {
    const row = table.insertRow();
    row.insertCell().textContent = label;
    looked.forEach((n, i) => {
      const cell = row.insertCell();
      cell.className = "num col" + i;
      cell.textContent = n.error ? "—" : show(n);
      if (n.error) cell.title = n.error;
    });
  }
}

function notes(n, c) {  // what a student meets at this setting and might misread
  const box = document.getElementById("notes");
  const say = html => { const li = document.createElement("li"); li.innerHTML = html; box.appendChild(li); };
  if (c.stage === 3 && c.prefetch === "off") {
    say("<b>Prefetch.</b> Stage 3 gathers each layer right before it runs (no prefetch): the gather waits for the " +
        "compute before it and the compute waits for the gather, so most of it is exposed. Turn prefetch on: the " +
        "next layer is gathered while this one computes, and one more layer is held at the peak.");
  }
  if (c.bucket === "none" && c.stage < 2) {
    say("<b>Buckets.</b> Stages 0 and 1 reduce the whole gradient after backward: all of it exposed. A bucket " +
        "starts reducing once it fills, while backward goes on, and hides most of it.");
  }
  if (c.overlap === "off") {
    say("<b>One stream.</b> With overlap off the communication runs on the compute's stream: nothing is hidden.");
  }
  say(`<b>The verdict counts what no ledger sees</b>, as <code>zerosim memory --gpu</code> does: ` +
      n.memory.overheads.map(([name, b]) => `${name} ${gb(b)}`).join(", ") + ".");
  say("<b>Assumed.</b> zerosim's own fused kernels at the datasheet's peak rates, bf16 with an fp32 master, Adam, one " +
      "sequence per GPU (the flags above); the commands' defaults (eager kernels at calibrated rates) hold more and " +
      "run slower.");
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
