// Pi's coding agent's own SessionManager (0.85.0) on a session file, for
// tests/harness/test_pi_sessions.py:
//   node pi_coding_session.mjs ORACLE read FILE     -> what pi sees in FILE (JSON)
//   node pi_coding_session.mjs ORACLE append FILE   -> pi appends a turn, prints its ids
//   node pi_coding_session.mjs ORACLE contexts FILE -> the context pi builds at every entry
//   node pi_coding_session.mjs ORACLE make DIR CWD  -> pi writes a session with every
//                                                     entry type under DIR, prints its path
// ORACLE is the folder whose node_modules hold @earendil-works/pi-coding-agent.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [oracle, command, file, cwd] = process.argv.slice(2);
const sm = await import(
  pathToFileURL(
    join(oracle, "node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js"),
  ).href
);
const usage = (n) => ({
  input: n, output: 2 * n, cacheRead: 0, cacheWrite: 0, totalTokens: 3 * n,
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 },
});
const reply = (content, stopReason, t) => ({
  role: "assistant", content, api: "openai-completions", provider: "local", model: "scripted",
  usage: usage(t), stopReason, timestamp: 1767225600000 + t,
});

if (command === "make") {
  // Every entry type pi 0.85.0 writes, on two branches, a compaction on the live one.
  const m = sm.SessionManager.create(cwd, file);
  const t0 = 1767225600000;
  m.appendThinkingLevelChange("medium");
  m.appendModelChange("local", "scripted");
  const u1 = m.appendMessage({ role: "user", content: "list files", timestamp: t0 + 1 });
  m.appendMessage(reply([{ type: "toolCall", id: "c1", name: "bash", arguments: { command: "ls" } }], "toolUse", 2));
  m.appendMessage({ role: "toolResult", toolCallId: "c1", toolName: "bash",
    content: [{ type: "text", text: "a.py\nb.py\n" }], isError: false, timestamp: t0 + 3 });
  const a1 = m.appendMessage(reply([{ type: "text", text: "Two files." }], "stop", 4));
  m.appendMessage({ role: "user", content: "explain a.py", timestamp: t0 + 5 });
  m.appendMessage(reply([{ type: "text", text: "It" }], "aborted", 6));
  m.appendLabelChange(u1, "start");
  m.appendCustomEntry("ext-state", { count: 1 });
  m.appendCustomMessageEntry("ext-note", "remember the tests", true, { k: 1 });
  const u3 = m.appendMessage({ role: "user", content: "and b.py?", timestamp: t0 + 7 });
  m.appendMessage(reply([{ type: "text", text: "b.py greets." }], "stop", 8));
  m.appendCompaction("The user listed files.", u3, 1234, { readFiles: [], modifiedFiles: [] });
  m.appendMessage({ role: "user", content: "thanks", timestamp: t0 + 9 });
  m.appendMessage(reply([{ type: "text", text: "You're welcome." }], "stop", 10));
  m.appendSessionInfo("files tour");
  m.branchWithSummary(a1, "Explored a.py and b.py.", { readFiles: ["a.py"], modifiedFiles: [] });
  m.appendMessage({ role: "user", content: "other branch", timestamp: t0 + 11 });
  m.appendMessage(reply([{ type: "text", text: "On it." }], "stop", 12));
  console.log(m.getSessionFile());
  process.exit(0);
}
const manager = sm.SessionManager.open(file);

const summarize = (m) => ({
  role: m.role,
  text:
    typeof m.content === "string"
      ? m.content
      : Array.isArray(m.content)
        ? m.content.filter((b) => b.type === "text").map((b) => b.text).join("")
        : (m.summary ?? ""),
  ...(m.stopReason ? { stopReason: m.stopReason } : {}),
});

function view() {
  const context = manager.buildSessionContext();
  return {
    id: manager.getSessionId(),
    cwd: manager.getCwd(),
    leafId: manager.getLeafId(),
    name: manager.getSessionName() ?? null,
    thinkingLevel: context.thinkingLevel,
    model: context.model,
    messages: context.messages.map(summarize),
    labels: Object.fromEntries(
      manager
        .getEntries()
        .map((e) => [e.id, manager.getLabel(e.id)])
        .filter(([, l]) => l !== undefined),
    ),
  };
}

if (command === "read") {
  console.log(JSON.stringify(view()));
} else if (command === "contexts") {
  const out = {};
  for (const entry of manager.getEntries()) {
    manager.branch(entry.id);
    out[entry.id] = manager.buildSessionContext().messages.map(summarize);
  }
  console.log(JSON.stringify(out));
} else if (command === "append") {
  const now = Date.now();
  manager.appendModelChange("pi-side", "pi-model");
  const user = manager.appendMessage({ role: "user", content: "from pi", timestamp: now });
  const assistant = manager.appendMessage({
    role: "assistant",
    content: [{ type: "text", text: "pi answers" }],
    api: "openai-completions", provider: "pi-side", model: "pi-model",
    usage: usage(1), stopReason: "stop", timestamp: now + 1,
  });
  console.log(JSON.stringify({ user, assistant, view: view() }));
} else {
  console.error(`unknown command ${command}`);
  process.exit(2);
}
