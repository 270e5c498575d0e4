// hymt's translation page. Plain JavaScript, no framework, no build step; it talks to the native API
// (/api/status, /api/translate with SSE streaming) and LibreTranslate's /translate_file.
"use strict";

const $ = (id) => document.getElementById(id);
const store = {
  get: (k, d) => { try { const v = localStorage.getItem("hymt." + k); return v === null ? d : JSON.parse(v); } catch { return d; } },
  set: (k, v) => { try { localStorage.setItem("hymt." + k, JSON.stringify(v)); } catch { /* private mode */ } },
};

let languages = [];      // [{code, name, native}] from /api/status
let charLimit = 5000;
let running = null;      // AbortController of the translation in flight
let detected = null;     // the last detected source code

// ---- theme ---------------------------------------------------------------------------------------
function applyTheme(theme) {
  document.documentElement.dataset.theme = theme;
  $("theme").setAttribute("aria-pressed", theme === "dark" ? "true" : "false");
}
applyTheme(store.get("theme", matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light"));
$("theme").addEventListener("click", () => {
  const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
  applyTheme(next);
  store.set("theme", next);
});

// ---- language pickers ----------------------------------------------------------------------------
function label(l) {
  if (l.code === "auto") return "Detect language";
  return (l.native && l.native !== l.name ? `${l.native} — ${l.name}` : l.name) + ` (${l.code})`;
}

function fillPicker(select, filter, withAuto) {
  const keep = select.value;
  const q = filter.value.trim().toLowerCase();
  const all = (withAuto ? [{ code: "auto", name: "Detect language", native: "" }] : []).concat(languages);
  let shown = all.filter((l) => !q || l.code.toLowerCase().startsWith(q) || l.name.toLowerCase().includes(q) ||
                                 (l.native || "").toLowerCase().includes(q));
  if (!shown.length) shown = all;  // nothing matches: keep every choice rather than none
  select.replaceChildren(...shown.map((l) => new Option(label(l), l.code, false, l.code === keep)));
  if (!shown.some((l) => l.code === keep) && shown.length) select.value = shown[0].code;
}

function setupPicker(id, withAuto, fallback) {
  const select = $(id), filter = $(id + "-filter");
  select.value = "";
  fillPicker(select, filter, withAuto);
  const saved = store.get(id, fallback);
  if ([...select.options].some((o) => o.value === saved)) select.value = saved;
  filter.addEventListener("input", () => {
    fillPicker(select, filter, withAuto);
    store.set(id, select.value);
  });
  filter.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); select.focus(); } });
  select.addEventListener("change", () => { store.set(id, select.value); if (id === "source") showDetected(null); });
}

function nameOf(code) {
  const l = languages.find((x) => x.code === code);
  return l ? (l.native && l.native !== l.name ? `${l.name} (${l.native})` : l.name) : code;
}

function showDetected(d) {
  detected = d ? d.language : null;
  $("detected").textContent = d ? `Detected: ${nameOf(d.language)} (${Math.round(d.confidence * 100)}%)` : "";
}

// ---- counter ------------------------------------------------------------------------------------
function chars(s) { return [...s].length; }
function updateCount() {
  const n = chars($("input").value);
  const count = $("count");
  count.textContent = `${n} / ${charLimit}`;
  count.classList.toggle("over", n > charLimit);
  $("translate").disabled = n === 0 || n > charLimit;
}

// ---- requests ------------------------------------------------------------------------------------
function headers(json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function setState(el, text, isError) {
  el.textContent = text;
  el.classList.toggle("error", !!isError);
}

async function errorText(res) {
  try { const j = await res.json(); return typeof j.error === "string" ? j.error : j.error.message; }
  catch { return `HTTP ${res.status}`; }
}

// Reads a text/event-stream response, calling onEvent(name, data) per event.
async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let name = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) name = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (data) onEvent(name, JSON.parse(data));
    }
  }
}

function glossary() {
  return [...$("glossary").tBodies[0].rows]
    .map((r) => ({ source: r.cells[0].firstChild.value.trim(), target: r.cells[1].firstChild.value.trim() }))
    .filter((t) => t.source && t.target);
}

async function translate() {
  const text = $("input").value;
  if (!text || chars(text) > charLimit) return;
  if (running) running.abort();
  const controller = new AbortController();
  running = controller;
  const state = $("state");
  setState(state, "Translating…");
  $("output").value = "";
  const body = { text, source: $("source").value, target: $("target").value, stream: true };
  const terms = glossary();
  if (terms.length) body.glossary = terms;
  const context = $("context").value.trim();
  if (context) body.context = context;
  try {
    const res = await fetch("/api/translate", {
      method: "POST", headers: headers(true), body: JSON.stringify(body), signal: controller.signal,
    });
    if (!res.ok) { setState(state, await errorText(res), true); return; }
    await readEvents(res, (name, data) => {
      if (name === "partial") {
        $("output").value = data.text;
      } else if (name === "done") {
        $("output").value = data.translations[0];
        if (body.source === "auto") showDetected(data.detected[0]);
        const note = data.finish_reason === "stop" ? "" : ` (stopped: ${data.finish_reason})`;
        setState(state, `Done in ${data.seconds.toFixed(2)} s, ${data.usage.output_tokens} tokens${note}`);
      } else if (name === "error") {
        setState(state, data.error, true);
      }
    });
  } catch (e) {
    if (e.name !== "AbortError") setState(state, "The server did not answer: " + e.message, true);
  } finally {
    if (running === controller) running = null;
    refreshStatus(false);  // the speed just measured
  }
}

// ---- swap, copy, clear ---------------------------------------------------------------------------
$("swap").addEventListener("click", () => {
  const src = $("source"), tgt = $("target");
  const from = src.value === "auto" ? detected : src.value;
  if (!from) return;
  const to = tgt.value;
  $("source-filter").value = "";
  $("target-filter").value = "";
  fillPicker(src, $("source-filter"), true);
  fillPicker(tgt, $("target-filter"), false);
  src.value = to;
  tgt.value = from;
  store.set("source", to);
  store.set("target", from);
  const out = $("output").value;
  if (out) { $("input").value = out; $("output").value = ""; }
  showDetected(null);
  updateCount();
});

$("copy").addEventListener("click", async () => {
  const text = $("output").value;
  if (!text) return;
  try { await navigator.clipboard.writeText(text); setState($("state"), "Copied"); }
  catch { $("output").select(); setState($("state"), "Select and copy with Ctrl+C"); }
});

$("clear").addEventListener("click", () => {
  $("input").value = "";
  $("output").value = "";
  showDetected(null);
  updateCount();
  $("input").focus();
});

$("translate").addEventListener("click", translate);
$("input").addEventListener("input", updateCount);
document.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); translate(); }
});

// ---- glossary ------------------------------------------------------------------------------------
function addTerm(source, target) {
  const row = $("glossary").tBodies[0].insertRow();
  const n = $("glossary").tBodies[0].rows.length;
  for (const [i, value] of [source, target].entries()) {
    const input = document.createElement("input");
    input.value = value;
    input.setAttribute("aria-label", (i === 0 ? "Source term " : "Translation of term ") + n);
    input.addEventListener("input", saveTerms);
    row.insertCell().append(input);
  }
  const remove = document.createElement("button");
  remove.type = "button";
  remove.className = "ghost";
  remove.textContent = "✕";
  remove.setAttribute("aria-label", "Remove term " + n);
  remove.addEventListener("click", () => { row.remove(); saveTerms(); });
  row.insertCell().append(remove);
  return row;
}
function saveTerms() { store.set("glossary", glossary()); }
$("add-term").addEventListener("click", () => addTerm("", "").cells[0].firstChild.focus());
for (const t of store.get("glossary", [])) addTerm(t.source, t.target);
$("context").value = store.get("context", "");
$("context").addEventListener("input", () => store.set("context", $("context").value));

// ---- files ---------------------------------------------------------------------------------------
$("upload").addEventListener("click", () => {
  const file = $("file").files[0];
  const state = $("file-state"), progress = $("progress"), link = $("download");
  if (!file) { setState(state, "Choose a file first", true); return; }
  const form = new FormData();
  form.append("file", file);
  form.append("source", $("source").value);
  form.append("target", $("target").value);
  const xhr = new XMLHttpRequest();
  xhr.open("POST", "/translate_file");
  for (const [k, v] of Object.entries(headers(false))) xhr.setRequestHeader(k, v);
  link.hidden = true;
  progress.hidden = false;
  progress.value = 0;
  setState(state, "Uploading…");
  xhr.upload.addEventListener("progress", (e) => {
    if (e.lengthComputable) progress.value = Math.round((e.loaded / e.total) * 100);
  });
  xhr.upload.addEventListener("load", () => setState(state, "Translating…"));
  xhr.addEventListener("load", () => {
    progress.value = 100;
    let reply = null;
    try { reply = JSON.parse(xhr.responseText); } catch { /* not JSON */ }
    if (xhr.status === 200 && reply && reply.translatedFileUrl) {
      const url = new URL(reply.translatedFileUrl, location.href);
      link.href = url.pathname;  // same origin, whatever host name the server saw
      link.textContent = "Download " + decodeURIComponent(url.pathname.split("/").pop());
      link.hidden = false;
      setState(state, "Done");
    } else {
      setState(state, reply && reply.error ? reply.error : `HTTP ${xhr.status}`, true);
    }
  });
  xhr.addEventListener("error", () => setState(state, "Upload failed", true));
  xhr.send(form);
});

// ---- status line ---------------------------------------------------------------------------------
async function refreshStatus(first) {
  try {
    const res = await fetch("/api/status");
    const s = await res.json();
    if (s.status !== "ready") {
      $("status").textContent = s.status === "loading" ? "Loading the model…" : "The server is not ready";
      return false;
    }
    if (first) {
      languages = s.languages;
      charLimit = s.max_text_chars;
      $("input").maxLength = charLimit * 2;  // a hard stop well past the limit; the counter shows the limit
      $("key-box").hidden = !s.key_required;
      setupPicker("source", true, "auto");
      setupPicker("target", false, languages.length > 1 ? languages[1].code : languages[0].code);
      updateCount();
    }
    const rate = s.tokens_per_second > 0 ? `${s.tokens_per_second.toFixed(1)} tokens/s` : "idle";
    $("status").textContent = `Model ${s.model}${s.demo ? " (demo)" : ""} · memory mode ${s.mode} · ${rate}` +
      (s.running || s.queued ? ` · ${s.running} running, ${s.queued} queued` : "");
    return true;
  } catch {
    $("status").textContent = "The server does not answer";
    return false;
  }
}

(async function start() {
  $("api-key").value = store.get("apiKey", "");
  $("api-key").addEventListener("input", () => store.set("apiKey", $("api-key").value));
  updateCount();
  while (!(await refreshStatus(true))) await new Promise((r) => setTimeout(r, 1000));
  setInterval(() => refreshStatus(false), 3000);
})();
