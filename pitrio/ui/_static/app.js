// pitrio serve: the chat view. No build step, no dependencies.
// Server -> page: append / appendDelta / replace / status (pitrio.ui), plus info, reset,
// sessions, queued, consent, consentDone, output (a slash command's reply), error.
// Page -> server: see pitrio/cli/_serve.py.
"use strict";

const token = new URLSearchParams(location.search).get("token") || "";
const $ = (id) => document.getElementById(id);
const log = $("log");
const input = $("input");
let socket = null;
let working = false;
let sessionId = null;
let retryDelay = 500;
let commands = [];  // [name, help] pairs from the server, for the hint under the input

function hashSession() {
  const match = /session=([^&]+)/.exec(location.hash);
  return match ? decodeURIComponent(match[1]) : null;
}

function send(command) {
  if (socket && socket.readyState === WebSocket.OPEN) {
    socket.send(JSON.stringify(command));
    return true;
  }
  showError("Not connected to the pitrio server.");
  return false;
}

function showError(text) {
  const box = $("error");
  box.textContent = text;
  box.hidden = !text;
}

function nearBottom() {
  return log.scrollHeight - log.scrollTop - log.clientHeight < 80;
}

function scrollDown(stick) {
  if (stick) log.scrollTop = log.scrollHeight;
}

// -- items ---------------------------------------------------------------------------

function part(parent, tag, cls) {
  const el = document.createElement(tag);
  el.className = cls;
  parent.appendChild(el);
  return el;
}

function append(m) {
  const stick = nearBottom();
  let el = log.querySelector(`[data-id="${CSS.escape(m.id)}"]`);
  if (el) el.remove();
  el = document.createElement("div");
  el.dataset.id = m.id;
  el.dataset.kind = m.kind;
  el.className = `item ${m.kind}`;
  if (m.kind === "tool") {
    part(el, "div", "title").textContent = m.title || "tool";
    part(el, "pre", "output").textContent = m.text || "";
    part(el, "div", "summary");
  } else if (m.kind === "assistant") {
    part(el, "div", "thinking");
    part(el, "div", "body").textContent = m.text || "";
    part(el, "div", "meta");
  } else {
    part(el, "div", "body").textContent = m.text || "";
  }
  setState(el, m.working ? "working" : "done");
  log.appendChild(el);
  if (m.kind === "user") dropQueued(m.text || "");
  scrollDown(stick || m.kind === "user");
}

function textPart(el) {
  return el.querySelector(el.dataset.kind === "tool" ? ".output" : ".body");
}

function setState(el, state) {
  el.dataset.state = state;
  el.classList.toggle("working", state === "working");
  el.classList.toggle("error", state === "error");
  el.classList.toggle("aborted", state === "aborted");
  const body = textPart(el);
  el.classList.toggle("empty", !body || !body.textContent);
}

function appendDelta(m) {
  const el = log.querySelector(`[data-id="${CSS.escape(m.id)}"]`);
  if (!el) return;
  const stick = nearBottom();
  const target = m.channel === "thinking" ? el.querySelector(".thinking") : textPart(el);
  if (!target) return;
  // One text node per delta: appending stays O(1) however long the answer grows
  // (textContent += would copy the whole text on every delta).
  target.appendChild(document.createTextNode(m.delta));
  if (m.channel !== "thinking" && m.delta) el.classList.remove("empty");
  scrollDown(stick);
}

function replace(m) {
  const el = log.querySelector(`[data-id="${CSS.escape(m.id)}"]`);
  if (!el) return;
  const stick = nearBottom();
  if (el.dataset.kind === "assistant" && m.state !== "working") {
    renderText(textPart(el), m.text);
  } else {
    textPart(el).textContent = m.text;
  }
  if (m.thinking != null && el.querySelector(".thinking")) {
    el.querySelector(".thinking").textContent = m.thinking;
  }
  const meta = el.querySelector(el.dataset.kind === "tool" ? ".summary" : ".meta");
  if (meta) meta.textContent = m.summary || (m.state === "aborted" ? "aborted" : "");
  setState(el, m.state);
  scrollDown(stick);
}

// A finished answer: ```fenced``` blocks and `inline code` as code, the rest as text.
// Built from DOM nodes, never innerHTML: the model's text cannot inject markup.
function renderText(target, text) {
  target.textContent = "";
  const fence = /```[^\n]*\n([\s\S]*?)```/g;
  let last = 0;
  for (let match; (match = fence.exec(text)); last = fence.lastIndex) {
    inline(target, text.slice(last, match.index));
    part(part(target, "pre", "code"), "code", "").textContent = match[1];
  }
  inline(target, text.slice(last));
}

function inline(target, text) {
  text.split(/(`[^`\n]+`)/).forEach((piece, i) => {
    if (i % 2) part(target, "code", "").textContent = piece.slice(1, -1);
    else if (piece) target.appendChild(document.createTextNode(piece));
  });
}

// A slash command's reply: a block in the log, not part of the conversation (the model
// never sees it, and a reload does not show it again).
function output(m) {
  const el = document.createElement("div");
  el.className = `item output${m.error ? " error" : ""}`;
  el.dataset.kind = "output";
  el.dataset.command = m.command || "";
  part(el, "div", "title").textContent = m.command || "";
  part(el, "pre", "body").textContent = m.text || "";
  if (m.sessions) el.appendChild(sessionList(m.sessions, "picker"));
  log.appendChild(el);
  scrollDown(true);
}

function fillSelect(select, options, value) {
  select.textContent = "";
  for (const [id, label] of options) {
    const option = document.createElement("option");
    option.value = id;
    option.textContent = label;
    select.appendChild(option);
  }
  select.value = value;
}

function showInfo(m) {
  const models = m.models && m.models.length ? m.models : [{ id: m.model, name: m.model }];
  const modelSelect = $("model");
  fillSelect(modelSelect, models.map((x) => [x.id, x.id]), m.model);
  modelSelect.dataset.fixed = models.length < 2 ? "1" : "";
  modelSelect.title = m.modelNote || "";
  const levels = m.thinkingLevels && m.thinkingLevels.length ? m.thinkingLevels : [m.thinking];
  const thinkingSelect = $("thinking");
  fillSelect(thinkingSelect, levels.map((x) => [x, x]), m.thinking);
  thinkingSelect.dataset.fixed = levels.length < 2 ? "1" : "";
  thinkingSelect.title = m.thinkingNote || "";
  commands = m.commands || [];
  $("cwd").textContent = m.cwd;
  $("banner").textContent = m.banner || "";
  $("banner").hidden = !m.banner;
  enableControls();
}

function enableControls() {
  for (const select of [$("model"), $("thinking")]) {
    select.disabled = working || select.dataset.fixed === "1";
  }
}

function showHint() {
  const hint = $("hint");
  const text = input.value;
  hint.textContent = "";
  const match = /^\/(\S*)$/.exec(text);
  const shown = match ? commands.filter(([name]) => name.startsWith(text)) : [];
  for (const [name, help] of shown.slice(0, 12)) {
    const li = part(hint, "li", "");
    part(li, "code", "").textContent = name;
    li.appendChild(document.createTextNode(` ${help}`));
    li.addEventListener("mousedown", (event) => {
      event.preventDefault();
      input.value = name.split(" ")[0] + " ";
      showHint();
      input.focus();
    });
  }
  hint.hidden = !shown.length;
}

function setWorking(value) {
  working = value;
  enableControls();
  document.body.classList.toggle("working", value);
  $("stop").hidden = !value;
  $("send").textContent = value ? "Steer" : "Send";
  input.placeholder = value
    ? "The agent is working: Enter steers it, Alt+Enter queues a follow-up, or Stop"
    : "Ask the agent… (Enter sends, Shift+Enter for a new line)";
}

// -- queue, consent, sessions ----------------------------------------------------------

function dropQueued(text) {
  for (const el of $("queue").children) {
    if (el.dataset.text === text) {
      el.remove();
      return;
    }
  }
}

function showConsent(m) {
  const box = $("consent");
  box.dataset.id = m.id;
  $("consent-title").textContent = m.title;
  box.hidden = false;
}

function renderSessions(items) {
  const list = sessionList(items, "");
  list.id = "session-list";
  $("session-list").replaceWith(list);
}

// Sessions newest first, by their first prompt; a click resumes one.
function sessionList(items, cls) {
  const list = document.createElement("ol");
  list.className = cls;
  for (const item of items) {
    const li = document.createElement("li");
    li.dataset.id = item.id;
    const when = new Date(item.modified * 1000).toLocaleString();
    part(li, "div", "session-title").textContent = item.title || "(no messages yet)";
    part(li, "div", "muted").textContent = `${when} · ${item.id.slice(-8)}`;
    li.title = item.id;
    if (item.current) li.classList.add("current");
    li.addEventListener("click", () => send({ type: "open", id: item.id }));
    list.appendChild(li);
  }
  if (!items.length) part(list, "li", "muted").textContent = "No sessions yet.";
  return list;
}

// -- the socket ----------------------------------------------------------------------

function handle(m) {
  switch (m.type) {
    case "append": append(m); break;
    case "appendDelta": appendDelta(m); break;
    case "replace": replace(m); break;
    case "status": setWorking(m.working); break;
    case "info": showInfo(m); break;
    case "output": output(m); break;
    case "reset":
      log.textContent = "";
      $("queue").textContent = "";
      $("consent").hidden = true;
      sessionId = m.session;
      if (sessionId) {
        history.replaceState(null, "", `?token=${encodeURIComponent(token)}#session=${sessionId}`);
      }
      break;
    case "sessions": renderSessions(m.items); break;
    case "queued": {
      const el = part($("queue"), "div", m.mode);
      el.dataset.text = m.text;
      el.textContent = (m.mode === "steer" ? "steering: " : "follow-up: ") + m.text;
      break;
    }
    case "consent": showConsent(m); break;
    case "consentDone":
      if ($("consent").dataset.id === m.id) $("consent").hidden = true;
      break;
    case "error": showError(m.text); break;
  }
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  socket = new WebSocket(`${scheme}://${location.host}/ws?token=${encodeURIComponent(token)}`);
  socket.addEventListener("open", () => {
    retryDelay = 500;
    $("conn").textContent = "";
    showError("");
    send({ type: "hello", session: hashSession() });
    send({ type: "sessions" });
  });
  socket.addEventListener("message", (event) => {
    const data = JSON.parse(event.data);  // one message, or a batch of them
    for (const m of Array.isArray(data) ? data : [data]) handle(m);
  });
  socket.addEventListener("close", () => {
    $("conn").textContent = "disconnected, retrying…";
    setTimeout(connect, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 5000);
  });
}

// -- input ---------------------------------------------------------------------------

function submit(type) {
  const text = input.value;
  if (!text.trim()) return;
  if (send({ type, text })) {
    input.value = "";
    showHint();
  }
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  submit("prompt");  // while the agent works, the server takes it as a steering message
});
input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    submit(event.altKey ? "follow_up" : "prompt");  // Alt+Enter: after the run
  }
});
input.addEventListener("input", showHint);
input.addEventListener("blur", () => { $("hint").hidden = true; });
input.addEventListener("focus", showHint);
$("model").addEventListener("change", () => send({ type: "set_model", model: $("model").value }));
$("thinking").addEventListener("change", () => {
  send({ type: "set_thinking", level: $("thinking").value });
});
$("stop").addEventListener("click", () => send({ type: "abort" }));
$("new-session").addEventListener("click", () => send({ type: "new" }));
$("sessions-toggle").addEventListener("click", () => {
  $("sessions").hidden = !$("sessions").hidden;
  if (!$("sessions").hidden) send({ type: "sessions" });
});
for (const button of $("consent").querySelectorAll("button")) {
  button.addEventListener("click", () => {
    send({ type: "consent", id: $("consent").dataset.id, answer: button.dataset.answer });
    $("consent").hidden = true;
  });
}

setWorking(false);
connect();
