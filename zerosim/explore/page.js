// The page's only code: read the embedded grid, draw the point the controls select. No network, no Python.
"use strict";
const G = JSON.parse(document.getElementById("grid").textContent);
const FRAMES = JSON.parse(document.getElementById("steps").textContent);
const NS = "http://www.w3.org/2000/svg";
const AXES = Object.keys(G.axes);
const NAMES = {model: "model", ranks: "N ranks (GPUs)", stage: "ZeRO stage", seq_len: "sequence length L",
               checkpoint: "activation checkpointing"};
const pick = {};  // axis -> index into G.axes[axis]

function gb(bytes) { return (bytes / 1e9).toFixed(2) + " GB"; }
function ms(seconds) { return (seconds * 1e3).toFixed(1) + " ms"; }
function el(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
function text(parent, x, y, s, anchor) {
  const t = el("text", {x: x, y: y, "font-size": 12, "text-anchor": anchor || "start"}, parent);
  t.textContent = s;
  return t;
}

function controls() {
  const box = document.getElementById("controls");
  for (const a of AXES) {
    const values = G.axes[a];
    pick[a] = Math.max(0, values.indexOf(G.start[a]));
    const label = document.createElement("label");
    label.textContent = NAMES[a] || a;
    const out = document.createElement("output");
    out.id = "value-" + a;
    label.appendChild(out);
    box.appendChild(label);
    let input;
    if (typeof values[0] === "number") {  // a slider over the grid's values
      input = document.createElement("input");
      Object.assign(input, {type: "range", min: 0, max: values.length - 1, step: 1, value: pick[a]});
    } else {
      input = document.createElement("select");
      values.forEach((v, i) => input.add(new Option(v, i)));
      input.value = pick[a];
    }
    input.id = "control-" + a;
    input.addEventListener("input", () => { pick[a] = Number(input.value); draw(); });
    box.appendChild(input);
  }
  const fixed = document.createElement("div");
  fixed.className = "fixed";
  fixed.textContent = "Fixed: " + Object.entries(G.fixed).map(([k, v]) => k.replace("_", "-") + " " + v).join(", ") +
    ". Links: NVLink 4 within a node of 8 GPUs, InfiniBand NDR across nodes.";
  box.appendChild(fixed);
}

function draw() {
  const key = AXES.map(a => G.axes[a][pick[a]]).join("|");
  for (const a of AXES) document.getElementById("value-" + a).textContent = String(G.axes[a][pick[a]]);
  const p = G.points[key];
  document.body.dataset.key = key;
  document.getElementById("error").textContent = p.error ? "Not drawn: " + p.error : "";
  if (p.error) return;
  drawMemory(p);
  drawTime(p);
}

function drawMemory(p) {
  const svg = document.getElementById("memory");
  svg.replaceChildren();
  const W = 560, H = 300, left = 60, top = 16, bottom = 40, h = H - top - bottom;
  const ymax = Math.max(p.capacity, p.peak) * 1.12;
  const y = v => top + h - h * v / ymax;
  const raw = ymax / 1e9 / 5, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const tick = [1, 2, 5, 10].map(f => f * mag).find(t => t >= raw);  // a round step in GB: 1, 2 or 5 x 10^k
  for (let v = 0; v * 1e9 <= ymax; v += tick) {
    el("line", {x1: left, x2: W - 10, y1: y(v * 1e9), y2: y(v * 1e9), stroke: "#e4e4e4"}, svg);
    text(svg, left - 6, y(v * 1e9) + 4, String(+v.toPrecision(6)), "end");
  }
  const ylab = text(svg, 14, top + h / 2, "GB per GPU", "middle");
  ylab.setAttribute("transform", `rotate(-90 14 ${top + h / 2})`);
  const cols = [["at the peak", p.at_peak], ["at rest after the step", p.resting]];
  cols.forEach(([name, held], i) => {
    const x = left + 50 + i * 230, w = 120;
    let sum = 0;
    for (const kind of Object.keys(G.kinds)) {
      const b = held[kind] || 0;
      if (!b) continue;
      el("rect", {x: x, y: y(sum + b), width: w, height: y(sum) - y(sum + b), fill: G.kinds[kind][1],
                  stroke: "white", "stroke-width": 0.6, "data-kind": kind, "data-bytes": b, class: "bar col" + i}, svg);
      sum += b;
    }
    text(svg, x + w / 2, y(sum) - 5, gb(sum), "middle").setAttribute("class", "total col" + i);
    text(svg, x + w / 2, H - bottom + 16, name, "middle");
  });
  el("line", {x1: left, x2: W - 10, y1: y(p.capacity), y2: y(p.capacity), stroke: "black",
              "stroke-dasharray": "6 4", id: "capacity-line"}, svg);
  document.getElementById("peak").textContent = gb(p.peak);
  document.getElementById("peak").dataset.bytes = p.peak;
  document.getElementById("capacity").textContent = `${p.gpu}'s ${gb(p.capacity)} (dashed line)`;
  const verdict = document.getElementById("verdict");
  verdict.textContent = p.fits ? "fits" : "does NOT fit";
  verdict.className = "verdict " + (p.fits ? "yes" : "no");
  const table = document.getElementById("kinds");
  table.replaceChildren();
  const head = table.insertRow();
  ["memory kind", "at the peak", "at rest"].forEach(s => { head.insertCell().textContent = s; });
  for (const [kind, [label, colour]] of Object.entries(G.kinds)) {
    const a = p.at_peak[kind] || 0, r = p.resting[kind] || 0;
    if (!a && !r) continue;
    const row = table.insertRow();
    row.dataset.kind = kind;
    row.insertCell().innerHTML = `<span class="swatch" style="background:${colour}"></span>`;
    row.cells[0].appendChild(document.createTextNode(label));
    for (const [b, cls] of [[a, "at-peak"], [r, "resting"]]) {
      const c = row.insertCell();
      c.className = "num " + cls;
      c.dataset.bytes = b;
      c.textContent = gb(b);
    }
  }
}

function drawTime(p) {
  const svg = document.getElementById("time");
  svg.replaceChildren();
  const parts = [["compute", p.compute_s], ["hidden", p.comm_s - p.exposed_s], ["exposed", p.exposed_s]];
  const names = {compute: "compute", hidden: "comm. hidden", exposed: "comm. exposed"};
  const left = 110, W = 560 - left - 80, most = Math.max(...parts.map(q => q[1])) || 1;
  parts.forEach(([part, s], i) => {
    const yy = 8 + i * 36;
    text(svg, left - 8, yy + 17, names[part], "end");
    el("rect", {x: left, y: yy, width: W * s / most, height: 24, fill: G.time_colours[part], "data-part": part,
                "data-seconds": s}, svg);
    text(svg, left + W * s / most + 5, yy + 17, ms(s));
  });
  for (const [id, s] of [["step", p.step_s], ["compute", p.compute_s], ["hidden", p.comm_s - p.exposed_s],
                         ["exposed", p.exposed_s]]) {
    const e = document.getElementById(id);
    e.textContent = ms(s);
    e.dataset.seconds = s;
  }
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
