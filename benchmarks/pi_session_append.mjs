// Pi's SessionManager (coding agent 0.85.0) appending N messages to a new session file:
// the Node side of benchmarks/bench_pi_sessions.py. Prints one JSON line.
//   node benchmarks/pi_session_append.mjs SESSION_MANAGER_JS DIR N
import { pathToFileURL } from "node:url";

const [modulePath, dir, count] = process.argv.slice(2);
const { SessionManager } = await import(pathToFileURL(modulePath).href);
const n = Number(count);

// The shapes of benchmarks/bench_sessions.py's turn_messages(): a coding turn of 4 messages.
function turnMessages(i) {
  const usage = (input, output) => ({
    input, output, cacheRead: 0, cacheWrite: 0, totalTokens: input + output,
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 },
  });
  const meta = { api: "anthropic-messages", provider: "anthropic", model: "claude-sonnet-4-5" };
  return [
    { role: "user", content: `Please look at file_${i}.py and fix the failing test. `.repeat(3), timestamp: i },
    {
      role: "assistant", ...meta, stopReason: "toolUse", timestamp: i, usage: usage(1200 + i, 80),
      content: [
        { type: "text", text: "I'll read the file first to see what the test expects. ".repeat(2) },
        { type: "toolCall", id: `call_${i}`, name: "read", arguments: { path: `src/file_${i}.py`, limit: 200 } },
      ],
    },
    {
      role: "toolResult", toolCallId: `call_${i}`, toolName: "read", isError: false, timestamp: i,
      content: [{ type: "text", text: "def f(x):\n    return x + 1\n".repeat(36) }],
    },
    {
      role: "assistant", ...meta, stopReason: "stop", timestamp: i, usage: usage(2300 + i, 150),
      content: [{ type: "text", text: "The function is off by one; here is the fix. ".repeat(4) }],
    },
  ];
}

const messages = [];
for (let turn = 0; messages.length < n; turn++) messages.push(...turnMessages(turn));
messages.length = n;

const cpu0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
const session = SessionManager.create("/bench/project", dir);
for (const message of messages) session.appendMessage(message);
const wall = Number(process.hrtime.bigint() - t0) / 1e9;
const cpu = process.cpuUsage(cpu0);
const written = session.getEntries().length;
console.log(JSON.stringify({
  subject: "pi_node", entries: written, wall_s: wall,
  cpu_s: (cpu.user + cpu.system) / 1e6, entries_per_s: written / wall,
}));
