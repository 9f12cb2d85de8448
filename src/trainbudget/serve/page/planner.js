// The planner page: read the inputs, ask /api/estimate (debounced), draw the answer.
// No framework and no network beyond this server: the page works offline.
"use strict";

const INPUTS = ["model", "config", "gpu", "gpus", "tokens", "seq_len", "global_batch",
  "framework", "precision", "recompute", "price_per_gpu_hour"];
const DEBOUNCE_MS = 250;  // typing "1024" sends one question, not four
const GB = 1e9;           // the CLI's unit: GB = 1e9 bytes
const PART_COLORS = { params: "#2f6db5", grads: "#6aa84f", optimizer: "#e69138",
  activations: "#a64d79", temporaries: "#999999", buffers: "#45818e", compute: "#2f6db5",
  pipeline_bubble: "#cccccc", tp_comm: "#e69138", pp_comm: "#a64d79", cp_comm: "#6aa84f",
  dp_comm: "#cc4125", optimizer_step: "#45818e", offload: "#674ea7" };
const form = document.getElementById("inputs");
let answer = null, commands = [], selected = 0, asked = 0, timer = null, engines = {};

const $ = (id) => document.getElementById(id);
function el(tag, attrs = {}, text = "") {
  const node = document.createElementNS(tag === "svg" || attrs.svg ? "http://www.w3.org/2000/svg"
    : "http://www.w3.org/1999/xhtml", tag);
  for (const [k, v] of Object.entries(attrs)) if (k !== "svg") node.setAttribute(k, v);
  if (text) node.textContent = text;
  return node;
}
const fixed = (x, digits) => x.toLocaleString("en-US",
  { minimumFractionDigits: digits, maximumFractionDigits: digits });
const whole = (x) => x.toLocaleString("en-US", { maximumFractionDigits: 0 });
const bytes = (b) => `${(b / GB).toPrecision(4).replace(/\.?0+$/, "")} GB`;
const seconds = (s) => s >= 1 ? `${s.toPrecision(4)} s` : `${(s * 1e3).toPrecision(3)} ms`;

function question() {
  const q = {};
  for (const name of INPUTS) {
    const value = form.elements[name].value;
    if (value.trim() !== "") q[name] = value;
  }
  return q;
}

async function post(path, body) {
  const response = await fetch(path, { method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json" } });
  return response;
}

async function ask() {
  const mine = ++asked, q = question();
  document.body.dataset.state = "loading";
  history.replaceState(null, "", "?" + new URLSearchParams(
    Object.entries(q).filter(([k]) => k !== "config")));
  const response = await post("/api/estimate", q);
  const body = await response.json();
  if (mine !== asked) return;  // a newer question is on its way: drop this answer
  clearErrors();
  if (!response.ok) { showError(body.field, body.error); return; }
  const listed = await post("/api/commands", q);
  if (mine !== asked) return;
  commands = listed.ok ? (await listed.json()).commands : [];
  answer = body;
  selected = 0;
  render();
  document.body.dataset.state = "ready";
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(() => ask().catch((err) => showError("", `request failed: ${err}`)),
    DEBOUNCE_MS);
}

function clearErrors() {
  for (const node of document.querySelectorAll(".error")) node.textContent = "";
  for (const node of form.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
}

// stale: the answer shown no longer matches the inputs (dimmed until a good answer comes)
function showError(field, message, stale = true) {
  const slot = document.querySelector(`.error[data-for="${CSS.escape(field || "")}"]`)
    || $("top-error");
  slot.textContent = message;
  if (form.elements[field]) form.elements[field].setAttribute("aria-invalid", "true");
  if (stale) document.body.dataset.state = "error";
}

function render() {
  const a = answer;
  $("days").textContent = a.time_days != null ? `${fixed(a.time_days, 2)} days` : "no --tokens";
  $("days").dataset.value = a.time_days ?? "";
  $("days-range").textContent = a.time_days_range
    ? `${fixed(a.time_days_range.low, 2)}-${fixed(a.time_days_range.high, 2)} days` : "";
  $("gpu-hours").textContent = a.gpu_hours != null ? whole(a.gpu_hours) : "-";
  $("cost").textContent = a.cost != null ? `$${whole(a.cost)}` : "set a price";
  $("plan").textContent = a.plan ? a.plan.description : "one GPU, no layout";
  $("fits").textContent = a.fits === false ? "does not fit in memory" : (a.plan ? "fits" : "");
  $("why").textContent = a.why ? `why: ${a.why}` : "";
  renderPlans();
  renderSelected();
  renderRange();
  renderDerivation();
  const list = $("assumptions");
  list.replaceChildren(...(a.assumptions || []).map((line) => el("li", {}, line)));
}

function renderPlans() {
  const rows = (answer.plans || []).map((p, rank) => {
    const tr = el("tr", { "data-rank": rank, class: rank === selected ? "selected" : "" });
    const layout = el("td", {}, p.plan.description);
    if (commands[rank]) layout.append(el("code", { class: "cmd" }, commands[rank]));
    layout.append(actions(rank));
    tr.append(el("td", {}, String(rank + 1)), layout, el("td", { class: "num" },
      seconds(p.step_seconds)), el("td", { class: "num" },
      `${bytes(p.memory_bytes.total)}${p.fits ? "" : " (does not fit)"}`),
    el("td", { class: "num" }, p.time_days != null ? fixed(p.time_days, 2) : "-"),
    el("td", { class: "num" }, `${fixed(100 * p.mfu, 1)} %`));
    tr.addEventListener("click", (e) => {
      if (e.target.closest("button, select")) return;
      selected = rank;
      renderPlans();
      renderSelected();
    });
    return tr;
  });
  $("plans").tBodies[0].replaceChildren(...rows);
}

function actions(rank) {
  const td = el("div", { class: "actions" });
  const copy = el("button", { type: "button", class: "copy" }, "copy as CLI command");
  copy.addEventListener("click", () => copyText(commands[rank] || "", copy));
  const engine = el("select", { class: "engine" });
  for (const [name, version] of Object.entries(engines)) {
    engine.append(el("option", { value: name, title: version }, name));
  }
  const download = el("button", { type: "button", class: "emit" }, "emit config");
  download.addEventListener("click", () => emitConfig(rank, engine.value)
    .catch((err) => showError("", `emit failed: ${err}`, false)));
  td.append(copy, " ", engine, " ", download);
  return td;
}

async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {  // no clipboard permission: select the text so Ctrl-C copies it
    const area = el("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  button.textContent = "copied";
  setTimeout(() => { button.textContent = "copy as CLI command"; }, 1500);
}

async function emitConfig(rank, engine) {
  const response = await post("/api/emit", { ...question(), rank, engine });
  if (!response.ok) { showError("", (await response.json()).error, false); return; }
  const name = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
  const link = el("a", { href: URL.createObjectURL(await response.blob()),
    download: name ? name[1] : `${engine}.txt` });
  document.body.append(link);
  link.click();
  link.remove();
}

function renderSelected() {
  const p = (answer.plans || [])[selected] || answer;
  const label = p.plan ? `plan ${selected + 1}: ${p.plan.description}` : "one GPU";
  $("mem-plan").textContent = label;
  $("step-plan").textContent = label;
  drawMemory(p);
  drawStep(p);
  $("overlap").textContent = p.overlap ? `overlap: ${p.overlap}` : "";
}

// One bar per pipeline stage, 0 to the GPU's capacity; the peak stage split into its parts.
function drawMemory(p) {
  const svg = $("memory-plot"), W = 300, X0 = 70, capacity = p.device_memory_bytes;
  const usable = p.memory_limit_bytes;  // the fits rule's limit on the allocated peak
  const stages = p.memory_bytes_per_stage || { only: p.memory_bytes.total };
  const names = Object.keys(stages), barH = Math.max(8, Math.min(28, 110 / names.length));
  const scale = (b) => X0 + W * Math.min(b, capacity * 1.25) / (capacity * 1.25);
  svg.replaceChildren();
  names.forEach((stage, i) => {
    const y = 8 + i * (barH + 4);
    svg.append(el("text", { svg: 1, x: 0, y: y + barH * 0.7 }, stage.slice(0, 11)));
    if (stage === p.memory_bytes.peak_stage) {
      let x = X0;
      for (const part of ["params", "grads", "optimizer", "activations", "temporaries",
        "buffers"]) {
        const w = scale(p.memory_bytes[part] || 0) - X0;
        svg.append(el("rect", { svg: 1, x, y, width: Math.max(0, w), height: barH,
          fill: PART_COLORS[part] }, ));
        x += w;
      }
    } else {
      svg.append(el("rect", { svg: 1, x: X0, y, width: scale(stages[stage]) - X0,
        height: barH, fill: "#7f9cc4" }));
    }
  });
  const bottom = 8 + names.length * (barH + 4);
  const lines = [[usable, "limit", "4 3", "end", -2], [capacity, "capacity", "", "start", 2]];
  for (const [value, text, dash, anchor, dx] of lines) {
    svg.append(el("line", { svg: 1, x1: scale(value), x2: scale(value), y1: 2, y2: bottom,
      stroke: "#b3261e", "stroke-dasharray": dash }));
    svg.append(el("text", { svg: 1, x: scale(value) + dx, y: bottom + 12,
      "text-anchor": anchor }, text));
  }
  const end = legend(svg, ["params", "grads", "optimizer", "activations", "temporaries",
    "buffers"], bottom + 28);
  svg.setAttribute("viewBox", `0 0 400 ${end + 6}`);
  const peak = p.memory_bytes.total;
  $("memory-note").textContent = `peak ${bytes(peak)} of ${bytes(capacity)}; usable ` +
    `${bytes(usable)} (${p.fits_rule}): headroom ` +
    `${bytes(usable - peak)}${peak > usable ? " (over the limit)" : ""}`;
}

// The step as a stacked bar of its exposed terms, with the all-hidden / nothing-hidden bounds.
function drawStep(p) {
  const svg = $("step-plot"), W = 370, X0 = 10;
  svg.replaceChildren();
  const parts = Object.entries(p.step_breakdown_seconds || { compute: p.step_seconds || 0 })
    .filter(([, s]) => s > 0);
  const bounds = p.step_bounds_seconds || { lower: p.step_seconds, upper: p.step_seconds };
  const top = Math.max(bounds.upper || 0, p.step_seconds || 0) || 1;
  let x = X0;
  for (const [name, s] of parts) {
    const w = W * s / top;
    svg.append(el("rect", { svg: 1, x, y: 10, width: w, height: 40,
      fill: PART_COLORS[name === "optimizer" ? "optimizer_step" : name] || "#888" }));
    x += w;
  }
  const marks = [["all hidden", bounds.lower, 64], ["nothing hidden", bounds.upper, 78]];
  for (const [name, value, y] of marks) {
    if (value == null) continue;
    const at = X0 + W * value / top;
    svg.append(el("line", { svg: 1, x1: at, x2: at, y1: 4, y2: y - 10, stroke: "#1d2430",
      "stroke-dasharray": "3 2" }));
    svg.append(el("text", { svg: 1, x: Math.min(at, X0 + W - 80), y }, name));
  }
  svg.append(el("text", { svg: 1, x: X0, y: 94 }, `step ${seconds(p.step_seconds || 0)}`));
  const end = legend(svg, parts.map(([n]) => n), 112,
    (n) => n === "optimizer" ? "optimizer_step" : n);
  svg.setAttribute("viewBox", `0 0 400 ${end + 6}`);
}

function legend(svg, names, y, colorOf = (n) => n) {
  let x = 0;
  for (const name of names) {
    if (x + 18 + 6.5 * name.length > 400) { x = 0; y += 16; }
    svg.append(el("rect", { svg: 1, x, y: y - 9, width: 10, height: 10,
      fill: PART_COLORS[colorOf(name)] || "#888" }));
    svg.append(el("text", { svg: 1, x: x + 13, y }, name));
    x += 18 + 6.5 * name.length;
  }
  return y;
}

function renderRange() {
  const r = answer.step_seconds_range;
  $("range").textContent = r
    ? `step ${seconds(r.low)}-${seconds(r.high)} (x${fixed(r.low_factor, 2)}-` +
      `x${fixed(r.high_factor, 2)}): ${r.method}; ${r.runs} runs (${r.basis})`
    : "no range: the error range is measured for planned layouts (--gpus N)";
}

function renderDerivation() {
  $("derivation").tBodies[0].replaceChildren(...(answer.derivation || []).map((row) => {
    const tr = el("tr");
    tr.append(el("td", {}, row.quantity), el("td", {}, `= ${row.formula}\n= ${row.value}`));
    return tr;
  }));
}

async function start() {
  const lists = await (await fetch("/api/choices")).json();
  engines = lists.engines;
  for (const name of ["model", "gpu", "framework", "precision", "recompute"]) {
    const select = form.elements[name];
    if (lists.defaults[name]) {  // "" leaves the CLI's default, and the command line short
      select.append(el("option", { value: "" }, `default (${lists.defaults[name]})`));
    }
    for (const value of lists[name]) select.append(el("option", { value }, value));
  }
  form.elements.model.value = "llama-3-8b";
  for (const [name, value] of new URLSearchParams(location.search)) {
    if (form.elements[name]) form.elements[name].value = value;
  }
  form.addEventListener("input", schedule);
  $("config-file").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (file) { form.elements.config.value = await file.text(); schedule(); }
  });
  await ask();
}

start().catch((err) => showError("", `the page could not start: ${err}`));
