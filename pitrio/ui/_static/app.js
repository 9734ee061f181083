// pitrio serve: the chat view. No build step; two vendored, pinned libraries (VENDORED.md):
// markdown-it renders the answers, highlight.js colors their code blocks.
// Server -> page: append / appendDelta / replace / status (pitrio.ui), plus info, reset,
// history (older items), sessions, queued, queueCleared, consent, consentDone, output (a
// slash command's reply), error. Page -> server: see pitrio/web/_serve.py.
// The token is never in the page: the server moved it into an HttpOnly cookie, which the
// browser sends with every request and the WebSocket's upgrade.
"use strict";

const $ = (id) => document.getElementById(id);
const log = $("log");
const input = $("input");
let socket = null;
let working = false;
let sessionId = null;
let earlier = 0;  // how many older items the server holds (reset, then each history reply)
let pendingHistory = null;  // the history request in flight: {session, before}
let pagedBack = false;  // a history reply was shown since the last reset
// From a reset to the status that ends its snapshot: the log is still filling (the snapshot
// may come in several frames, each laid out and scrolled before the next), so a log short of
// a screen is not yet a reason to ask for older items.
let filling = false;
let retryDelay = 500;
const narrow = window.matchMedia("(max-width: 700px)");  // app.css's narrow layout
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

// A new item at the end of the log; or, from a history reply, above `before` (an element),
// leaving the scroll position and the queue alone.
function append(m, before = null) {
  const stick = !before && nearBottom();
  let el = log.querySelector(`[data-id="${CSS.escape(m.id)}"]`);
  if (before && el) return;  // shown already: the item is not shown twice
  if (el) el.remove();
  el = document.createElement("div");
  el.dataset.id = m.id;
  el.dataset.kind = m.kind;
  el.className = `item ${m.kind}`;
  if (m.kind === "tool") {
    showVisibly(part(el, "div", "title"), m.title || "tool");  // a bidi control stays inert
    part(el, "pre", "output").textContent = m.text || "";
    part(el, "div", "summary");
  } else if (m.kind === "assistant") {
    part(el, "div", "thinking");
    renderAnswer(el, part(el, "div", "body md"), m.text || "");
    part(el, "div", "meta");
  } else {
    part(el, "div", "body").textContent = m.text || "";
  }
  setState(el, m.working ? "working" : "done");
  if (before) {
    log.insertBefore(el, before);
    return;
  }
  log.appendChild(el);
  if (m.kind === "user") dropQueued(m.text || "");
  scrollDown(stick || m.kind === "user");
}

// -- older items (history) ---------------------------------------------------------------
// A page gets the tail of a long session; scrolled near the top, it asks for the 50 items
// before the oldest it shows, and puts them above it with the scroll position kept: the item
// the user was looking at stays where it was. Item ids start again in each session, so a
// reply is used only for the request in flight, in the session of the last reset.

function historyMark() {
  let mark = $("history-mark");
  if (!mark) {
    mark = document.createElement("div");
    mark.id = "history-mark";
    log.prepend(mark);
  }
  if (pendingHistory) mark.textContent = "loading earlier messages…";
  else if (earlier > 0) mark.textContent = `${earlier} earlier message${earlier === 1 ? "" : "s"}`;
  else mark.textContent = pagedBack ? "beginning of the conversation" : "";
  mark.hidden = !mark.textContent;
  return mark;
}

function oldestItem() {
  return log.querySelector(".item[data-id]");
}

function loadEarlier() {
  if (filling || pendingHistory || earlier <= 0 || log.scrollTop > 300) return;
  const oldest = oldestItem();
  if (!oldest) return;
  const request = { session: sessionId, before: oldest.dataset.id };
  if (!send({ type: "history", before: request.before, limit: 50 })) return;
  pendingHistory = request;
  historyMark();
}

function showHistory(m) {
  const request = pendingHistory;
  if (!request || m.session !== sessionId || m.session !== request.session || m.before !== request.before) {
    return;  // another session's, or a request made before the last reset
  }
  pendingHistory = null;
  const anchor = log.querySelector(`.item[data-id="${CSS.escape(m.before)}"]`);
  if (!anchor || anchor !== oldestItem()) {
    historyMark();
    return;
  }
  const top = anchor.getBoundingClientRect().top;
  for (const message of m.messages || []) {
    if (message.type === "append") append(message, anchor);
    else if (message.type === "replace") replace(message, true);
  }
  earlier = Math.max(0, m.earlier || 0);
  pagedBack = true;
  historyMark();
  log.scrollTop += anchor.getBoundingClientRect().top - top;  // the same item stays put
  loadEarlier();  // still at the top (a short page of items): the next ones
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
  if (m.channel !== "thinking" && el.dataset.kind === "assistant") {
    // The answer is re-rendered as markdown at most once a frame (renderOpen), not per delta.
    el.chunks.push(m.delta);
    if (m.delta) el.classList.remove("empty");
    scheduleRender(el);
    return;
  }
  const stick = nearBottom();
  const target = m.channel === "thinking" ? el.querySelector(".thinking") : textPart(el);
  if (!target) return;
  // One text node per delta: appending stays O(1) however long the text grows
  // (textContent += would copy the whole text on every delta).
  target.appendChild(document.createTextNode(m.delta));
  if (m.channel !== "thinking" && m.delta) el.classList.remove("empty");
  scrollDown(stick);
}

function replace(m, older = false) {
  const el = log.querySelector(`[data-id="${CSS.escape(m.id)}"]`);
  if (!el) return;
  const stick = !older && nearBottom();
  const body = textPart(el);
  if (el.dataset.kind === "assistant") {
    renderAnswer(el, body, m.text);
  } else if (el.dataset.kind === "tool" && m.diff && m.state === "done") {
    renderDiff(body, m.diff);
  } else {
    body.classList.remove("diff");
    body.textContent = m.text;
  }
  if (m.thinking != null && el.querySelector(".thinking")) {
    el.querySelector(".thinking").textContent = m.thinking;
  }
  const meta = el.querySelector(el.dataset.kind === "tool" ? ".summary" : ".meta");
  let summary = m.summary || (m.state === "aborted" ? "aborted" : "");
  if (el.dataset.kind === "tool" && m.diff && m.state === "done") summary = diffSummary(m.diff);
  if (meta) meta.textContent = summary;
  setState(el, m.state);
  scrollDown(stick);
}

// -- markdown ------------------------------------------------------------------------
// markdown-it with html: false escapes every tag the model writes; links are kept only for
// http, https and mailto (validateLink, then checked again in the DOM), open in a new tab
// without an opener, and images are not loaded (shown as a link). Table alignment becomes a
// class: the Content-Security-Policy allows no inline style.

const SAFE_LINK = /^(https?:|mailto:)/i;
const md = window.markdownit({ html: false, linkify: true, typographer: false, highlight: highlightCode });
md.linkify.set({ fuzzyLink: false, fuzzyEmail: false });  // greet.py is a file, not a link
md.disable("image");
md.validateLink = (url) => SAFE_LINK.test(url.trim());
md.renderer.rules.link_open = (tokens, i, options, env, self) => {
  tokens[i].attrSet("target", "_blank");
  tokens[i].attrSet("rel", "noopener noreferrer");
  return self.renderToken(tokens, i, options);
};
md.renderer.rules.table_open = () => '<div class="table-wrap"><table>\n';
md.renderer.rules.table_close = () => "</table></div>\n";
md.core.ruler.push("align_classes", (state) => {
  for (const token of state.tokens) {
    const style = (token.type === "th_open" || token.type === "td_open") && token.attrGet("style");
    if (!style) continue;
    token.attrs = token.attrs.filter(([name]) => name !== "style");
    const align = /text-align:(left|right|center)/.exec(style);
    if (align) token.attrJoin("class", `align-${align[1]}`);
  }
});

// Highlighted blocks are cached: while an answer streams, the blocks above the open one
// come back unchanged every frame.
const highlighted = new Map();

function highlightCode(code, lang) {
  const hljs = window.hljs;
  const language = lang && hljs && hljs.getLanguage(lang) ? lang.toLowerCase() : "";
  const key = `${language}\u0000${code}`;
  let html = highlighted.get(key);
  if (html === undefined) {
    try {
      html = language
        ? hljs.highlight(code, { language, ignoreIllegals: true }).value
        : md.utils.escapeHtml(code);
    } catch {
      html = md.utils.escapeHtml(code);  // a grammar's bug must not lose the answer
    }
    if (highlighted.size > 200) highlighted.clear();
    highlighted.set(key, html);
  }
  const label = language ? ` data-lang="${md.utils.escapeHtml(language)}"` : "";
  const cls = language ? ` language-${md.utils.escapeHtml(language)}` : "";
  return `<pre class="code"${label}><code class="hljs${cls}">${html}</code></pre>`;
}

// The text is parsed whole, but only the top-level blocks whose HTML changed since the last
// render are replaced in the DOM: while an answer streams that is the last one, so the
// browser lays out one block per frame, not the whole answer. Each block is parsed in an
// inert <template> (nothing in it loads or runs) and its links checked before it is shown.
function renderMarkdown(target, text) {
  const env = {};
  const tokens = md.parse(text, env);
  const htmls = [];
  let start = 0;
  let depth = 0;
  for (let i = 0; i < tokens.length; i++) {
    depth += tokens[i].nesting;
    if (depth === 0) {
      htmls.push(md.renderer.render(tokens.slice(start, i + 1), md.options, env).trimEnd());
      start = i + 1;
    }
  }
  const old = target.blocks || [];
  if (!target.blocks) target.textContent = "";
  let same = 0;
  while (same < old.length && same < htmls.length && old[same].html === htmls[same]) same += 1;
  for (const block of old.slice(same)) for (const node of block.nodes) node.remove();
  const blocks = old.slice(0, same);
  for (const html of htmls.slice(same)) {
    const template = document.createElement("template");
    template.innerHTML = html;
    for (const a of template.content.querySelectorAll("a")) {  // defence in depth
      if (!SAFE_LINK.test(a.getAttribute("href") || "")) a.replaceWith(...a.childNodes);
    }
    // A newline between blocks keeps textContent readable; none after the last one.
    if (blocks.length) template.content.prepend(document.createTextNode("\n"));
    const nodes = [...template.content.childNodes];
    target.appendChild(template.content);
    blocks.push({ html, nodes });
  }
  target.blocks = blocks;
}

// An answer's text: kept as chunks on the element (joined when rendered), rendered now.
function renderAnswer(el, body, text) {
  el.chunks = [text];
  el.renderPending = false;
  renderMarkdown(body, text);
}

function scheduleRender(el) {
  if (el.renderPending) return;
  el.renderPending = true;
  const run = () => renderOpen(el);
  requestAnimationFrame(run);
  setTimeout(run, 100);  // a hidden tab gets no animation frames
}

function renderOpen(el) {
  if (!el.renderPending) return;
  el.renderPending = false;
  const stick = nearBottom();
  const text = el.chunks.join("");
  el.chunks = [text];
  renderMarkdown(textPart(el), text);
  scrollDown(stick);
}

// -- diffs and raw text ----------------------------------------------------------------

// An edit's unified diff, one row per line; text nodes only (the file's text is not markup).
function renderDiff(target, diff) {
  target.textContent = "";
  target.classList.add("diff");
  const lines = part(target, "span", "lines");
  for (const line of diff.split("\n")) {
    let cls = "ctx";
    if (line.startsWith("+++") || line.startsWith("---")) cls = "file";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    else if (line.startsWith("@@")) cls = "hunk";
    const row = part(lines, "span", cls);
    showVisibly(row, line || " ");
    row.appendChild(document.createTextNode("\n"));
  }
}

function diffSummary(diff) {
  let added = 0;
  let removed = 0;
  for (const line of diff.split("\n")) {
    if (line.startsWith("+") && !line.startsWith("+++")) added += 1;
    else if (line.startsWith("-") && !line.startsWith("---")) removed += 1;
  }
  return `edited · +${added} -${removed} line${added + removed === 1 ? "" : "s"}`;
}

// Characters that would not show, or would show something else: C0 and C1 controls (but tab
// and newline), DEL, bidirectional controls, zero-width and other invisible characters,
// Unicode tags. Each is shown as its escape, marked (\r for CR, \x1b for ESC, \u202e...), so a
// consent shows the call exactly as it would run. (Not the control pictures ␛ and ␍: many
// fonts lack them, Debian's default ones included, and they would show as empty boxes.)
const INVISIBLE = new RegExp(
  "[\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f\\u00ad\\u034f\\u061c\\u115f\\u1160\\u17b4\\u17b5" +
  "\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u3164\\ufe00-\\ufe0f\\ufeff\\uffa0" +
  "\\ufff0-\\ufffb\\u{e0000}-\\u{e0fff}]", "gu");

function escapeChar(ch) {
  if (ch === "\r") return "\\r";
  const code = ch.codePointAt(0);
  if (code < 0x100) return `\\x${code.toString(16).padStart(2, "0")}`;
  if (code < 0x10000) return `\\u${code.toString(16).padStart(4, "0")}`;
  return `\\u{${code.toString(16)}}`;
}

function showVisibly(target, text) {
  let last = 0;
  let marked = 0;
  for (const match of text.matchAll(INVISIBLE)) {
    if (match.index > last) target.appendChild(document.createTextNode(text.slice(last, match.index)));
    const mark = part(target, "span", "ctl");
    mark.textContent = escapeChar(match[0]);
    mark.title = `U+${match[0].codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
    last = match.index + match[0].length;
    marked += 1;
  }
  if (last < text.length) target.appendChild(document.createTextNode(text.slice(last)));
  return marked;
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
  $("cwd").title = m.cwd || "";
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

// The call exactly as it would run: every argument whole (scrolling when long), whitespace
// kept, invisible characters shown. `arguments` is the call's full arguments (an object),
// each shown under its name; `args` is accepted too. Without either, `full` (the server's
// indented JSON, its invisible characters already written as \uXXXX) is shown whole.
function showConsent(m) {
  const box = $("consent");
  box.dataset.id = m.id;
  $("consent-title").textContent = "";
  showVisibly($("consent-title"), m.title || m.tool || "");
  const shown = $("consent-args");
  shown.textContent = "";
  const args = m.arguments ?? m.args;
  if ((args === undefined || args === null) && typeof m.full === "string") {
    const marked = showVisibly(part(part(shown, "div", "arg"), "pre", m.full ? "" : "blank"), m.full);
    if (marked) part(shown, "div", "legend").textContent = `${marked} invisible characters are marked.`;
  } else if (args !== undefined && args !== null) {
    const entries = typeof args === "object" && !Array.isArray(args) ? Object.entries(args) : [[null, args]];
    let marked = 0;
    for (const [name, value] of entries) {
      const arg = part(shown, "div", "arg");
      if (name !== null) marked += showVisibly(part(arg, "div", "name"), name);
      const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
      const pre = part(arg, "pre", text ? "" : "blank");
      marked += showVisibly(pre, text);
    }
    if (marked) {
      part(shown, "div", "legend").textContent =
        `${marked} invisible or control character${marked === 1 ? " is" : "s are"} shown as ` +
        "marked escapes (\\x1b is ESC, \\r a carriage return, \\u202e reverses the text after it).";
    }
  }
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
    li.addEventListener("click", () => {
      send({ type: "open", id: item.id });
      if (narrow.matches) $("sessions").hidden = true;  // it covers the chat there
    });
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
    case "status":
      setWorking(m.working);
      if (m.working) for (const note of $("queue").querySelectorAll(".note")) note.remove();
      filling = false;
      loadEarlier();  // the snapshot did not fill the log: nothing to scroll, so ask now
      break;
    case "info": showInfo(m); break;
    case "output": output(m); break;
    case "reset":
      log.textContent = "";
      $("queue").textContent = "";
      $("consent").hidden = true;
      sessionId = m.session;
      earlier = Math.max(0, m.earlier || 0);
      pendingHistory = null;  // a reply to it would name items of the old view
      pagedBack = false;
      filling = true;
      historyMark();
      if (sessionId) {
        window.history.replaceState(null, "", `/#session=${encodeURIComponent(sessionId)}`);
      }
      break;
    case "history": showHistory(m); break;
    case "sessions": renderSessions(m.items); break;
    case "queued": {
      for (const note of $("queue").querySelectorAll(".note")) note.remove();
      const el = part($("queue"), "div", m.mode);
      el.dataset.text = m.text;
      el.textContent = (m.mode === "steer" ? "steering: " : "follow-up: ") + m.text;
      break;
    }
    case "queueCleared": {
      // Stop dropped the queued steering and follow-ups: they go with the run, not with
      // the next prompt.
      $("queue").textContent = "";
      const dropped = m.dropped || 0;
      part($("queue"), "div", "note").textContent =
        `Stop dropped ${dropped} queued message${dropped === 1 ? "" : "s"}.`;
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
  socket = new WebSocket(`${scheme}://${location.host}/ws`);  // the cookie carries the token
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
log.addEventListener("scroll", loadEarlier, { passive: true });
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
