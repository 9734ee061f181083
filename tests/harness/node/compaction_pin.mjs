// Runs Pi 0.85.0's own compaction code on generated session branches and prints the
// results as JSON: tests/harness/test_compaction.py checks pitrio against them.
//
// Regenerate the committed fixture (needs Node 20 and the packages of package.json,
// `npm ci` in this directory, or PI_NODE_MODULES pointing at a node_modules that has them):
//   node tests/harness/node/compaction_pin.mjs > tests/harness/data/compaction_pi.json
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const candidates = [
  process.env.PI_NODE_MODULES,
  join(here, "node_modules"),
  "/root/.cache/pitrio-oracle/node_modules",
].filter(Boolean);
const nodeModules = candidates.find((p) => existsSync(join(p, "@earendil-works/pi-agent-core")));
if (!nodeModules) throw new Error(`Pi's packages not found in ${candidates.join(", ")}`);
const harness = join(nodeModules, "@earendil-works/pi-agent-core/dist/harness");
const load = (p) => import(pathToFileURL(join(harness, p)).href);
const compaction = await load("compaction/compaction.js");
const branch = await load("compaction/branch-summarization.js");
const messages = await load("messages.js");
const sessionContext = await load("session/context.js");
const { isContextOverflow } = await import(
  pathToFileURL(join(nodeModules, "@earendil-works/pi-ai/dist/utils/overflow.js")).href
);

// A small deterministic PRNG (mulberry32) so the fixture is reproducible.
function rng(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = ["alpha", "beta", "gamma", "délta", "epsilon", "naïve", "🙂", "zeta", "eta", "theta"];
function text(r, n) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(WORDS[Math.floor(r() * WORDS.length)]);
  return out.join(" ");
}
const ZERO = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } };

function makeBranch(seed) {
  const r = rng(seed);
  const entries = [];
  let parent = null;
  let seq = 0;
  let ts = 1700000000000;
  const push = (fields) => {
    const id = `e${seq}`;
    entries.push({ id, parentId: parent, seq, timestamp: ts, ...fields });
    parent = id;
    seq++;
    ts += 1000;
  };
  const msg = (message) => push({ type: "message", message: { ...message, timestamp: ts } });
  const turns = 3 + Math.floor(r() * 6);
  let callId = 0;
  for (let t = 0; t < turns; t++) {
    const kind = r();
    if (kind < 0.1) {
      msg({ role: "bashExecution", command: `ls ${text(r, 1)}`, output: text(r, 20), exitCode: 0, cancelled: false, truncated: false });
    } else if (kind < 0.15) {
      push({ type: "branch_summary", fromId: null, summary: text(r, 30), details: { readFiles: ["old/read.txt"], modifiedFiles: ["old/mod.txt"] } });
    } else if (kind < 0.2) {
      push({ type: "custom", customType: "note", data: { n: t } });
    } else if (kind < 0.25) {
      msg({ role: "custom", customType: "note", content: text(r, 15), display: true });
    }
    msg({ role: "user", content: r() < 0.5 ? text(r, 10 + Math.floor(r() * 40)) : [{ type: "text", text: text(r, 30) }] });
    const steps = Math.floor(r() * 4);
    for (let s = 0; s < steps; s++) {
      const calls = [];
      const n = 1 + Math.floor(r() * 3);
      for (let c = 0; c < n; c++) {
        const name = ["read", "write", "edit", "bash"][Math.floor(r() * 4)];
        const args = name === "bash" ? { command: "make" } : { path: `src/f${Math.floor(r() * 6)}.py`, extra: text(r, 3) };
        calls.push({ type: "toolCall", id: `c${callId++}`, name, arguments: args });
      }
      const content = [];
      if (r() < 0.4) content.push({ type: "thinking", thinking: text(r, 20) });
      if (r() < 0.6) content.push({ type: "text", text: text(r, 15) });
      content.push(...calls);
      const input = 500 + Math.floor(r() * 5000) * (t + 1);
      msg({ role: "assistant", content, api: "x", provider: "p", model: "m", stopReason: "toolUse",
        usage: r() < 0.8 ? { ...ZERO, input, output: 100, totalTokens: input + 100 } : ZERO });
      for (const call of calls) {
        msg({ role: "toolResult", toolCallId: call.id, toolName: call.name,
          content: [{ type: "text", text: text(r, 5 + Math.floor(r() * (r() < 0.2 ? 600 : 40))) }], isError: false });
      }
    }
    const failed = r() < 0.1;
    msg({ role: "assistant", content: [{ type: "text", text: text(r, 25) }], api: "x", provider: "p", model: "m",
      stopReason: failed ? "error" : "stop", ...(failed ? { errorMessage: "prompt is too long: 213462 tokens > 200000 maximum" } : {}),
      usage: { ...ZERO, input: 2000 * (t + 1), output: 50, totalTokens: 2000 * (t + 1) + 50 } });
  }
  // Some branches carry an earlier compaction in the middle.
  if (seed % 3 === 0 && entries.length > 6) {
    const at = Math.floor(entries.length / 2);
    const tail = entries.slice(at - 2, at).filter((e) => e.type === "message").map((e) => e.message);
    const compactionEntry = { type: "compaction", id: `k${seed}`, parentId: entries[at - 1].id, seq: 1000, timestamp: ts,
      summary: "## Goal\nearlier work", retainedTail: tail, tokensBefore: 12345,
      details: { readFiles: ["prev/read.md"], modifiedFiles: ["prev/changed.md"] }, fromHook: false };
    entries.splice(at, 0, compactionEntry);
  }
  return entries;
}

// Messages are named by role and timestamp (unique in a generated branch) to keep the fixture small.
const ref = (m) => `${m.role}@${m.timestamp}`;

const MODEL = { id: "m", name: "m", api: "x", provider: "p", reasoning: true, contextWindow: 64000, maxTokens: 8000, input: ["text"], cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, baseUrl: "" };

async function runCompact(prep, customInstructions, thinkingLevel) {
  const requests = [];
  const request = async (aiContext, options) => {
    requests.push({
      systemPrompt: aiContext.systemPrompt,
      text: aiContext.messages[0].content[0].text,
      maxTokens: options.maxTokens,
      reasoning: options.reasoning ?? null,
      cacheRetention: options.cacheRetention,
    });
    return { role: "assistant", content: [{ type: "text", text: `SUMMARY ${requests.length}` }], stopReason: "stop",
      usage: { ...ZERO, input: 10 * requests.length, output: 5, totalTokens: 10 * requests.length + 5 } };
  };
  const result = await compaction.compactWithRequest(prep, { model: MODEL, customInstructions, thinkingLevel }, request, { value: () => undefined });
  if (!result.ok) throw result.error;
  return { requests, summary: result.value.summary, details: result.value.details, usage: result.value.usage, retainedTail: result.value.retainedTail.map(ref) };
}

const cases = [];
for (let seed = 1; seed <= 16; seed++) {
  const entries = makeBranch(seed);
  const keep = [50, 400, 1500, 6000][seed % 4];
  const settings = { enabled: true, reserveTokens: 4000 + 1000 * (seed % 5), keepRecentTokens: keep };
  const contextMessages = await sessionContext.buildSessionContext(entries);
  const estimate = compaction.estimateContextTokens(contextMessages);
  const cutPoints = [10, 300, 2000, 100000].map((k) => ({ keep: k, ...compaction.findCutPoint(entries, 0, entries.length, k) }));
  const prepared = compaction.prepareCompaction(entries, settings);
  if (!prepared.ok) throw prepared.error;
  const prep = prepared.value;
  let compacted = null;
  let preparation = null;
  if (prep) {
    preparation = {
      messagesToSummarize: prep.messagesToSummarize.map(ref),
      turnPrefixMessages: prep.turnPrefixMessages.map(ref),
      retainedTail: prep.retainedTail.map(ref),
      isSplitTurn: prep.isSplitTurn,
      tokensBefore: prep.tokensBefore,
      previousSummary: prep.previousSummary ?? null,
      fileOps: { read: [...prep.fileOps.read].sort(), written: [...prep.fileOps.written].sort(), edited: [...prep.fileOps.edited].sort() },
    };
    compacted = await runCompact(prep, seed % 2 ? "focus on files" : undefined, seed % 4 === 1 ? "high" : undefined);
  }
  const branchPrep = branch.prepareBranchEntries(entries, seed % 2 ? 0 : 3000);
  cases.push({
    seed, entries, settings,
    estimate,
    shouldCompact: compaction.shouldCompact(estimate.tokens, MODEL.contextWindow, settings),
    tokens: contextMessages.map((m) => compaction.estimateTokens(m)),
    serialized: compaction.serializeConversation(messages.convertToLlm(contextMessages)),
    cutPoints, preparation, compacted,
    branch: { messages: branchPrep.messages.map(ref), totalTokens: branchPrep.totalTokens,
      fileOps: { read: [...branchPrep.fileOps.read].sort(), written: [...branchPrep.fileOps.written].sort(), edited: [...branchPrep.fileOps.edited].sort() } },
  });
}

// Context-overflow detection on providers' error texts.
const overflowTexts = [
  "prompt is too long: 213462 tokens > 200000 maximum",
  '413 {"error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}',
  "Your input exceeds the context window of this model",
  "Requested token count exceeds the model's maximum context length of 131072 tokens",
  "Input length (265330) exceeds model's maximum context length (262144).",
  "The input token count (1196265) exceeds the maximum number of tokens allowed (1048575)",
  "This model's maximum prompt length is 131072 but the request contains 537812 tokens",
  "Please reduce the length of the messages or completion",
  "This endpoint's maximum context length is 8192 tokens. However, you requested about 9000 tokens",
  "Input length 9000 exceeds the maximum allowed input length of 8,192 tokens.",
  "The input (9000 tokens) is longer than the model's context length (8192 tokens).",
  "the request exceeds the available context size, try increasing it",
  "tokens to keep from the initial prompt is greater than the context length",
  "prompt token count of 9000 exceeds the limit of 8192",
  "invalid params, context window exceeds limit",
  "Your request exceeded model token limit: 9000 (requested: 10000)",
  "Prompt has 9,000 tokens, but the configured context size is 8,192 tokens",
  "400 status code (no body)",
  "413 (no body)",
  "Prompt contains 9000 tokens and 0 draft tokens, too large for model with 8192 maximum context length",
  "model_context_window_exceeded",
  "prompt too long; exceeded max context length by 100 tokens",
  "Range of input length should be [1, 30720]",
  "context_length_exceeded",
  "ThrottlingException: Too many tokens, please wait before trying again.",
  "Throttling error: Too many tokens, please wait before trying again.",
  "Rate limit reached: too many tokens per minute",
  "429 Too Many Requests: token limit exceeded",
  "Internal server error",
  "connection reset by peer",
  "500 status code (no body)",
];
const overflow = [];
for (const errorMessage of overflowTexts) {
  const m = { role: "assistant", content: [], stopReason: "error", errorMessage, usage: ZERO };
  overflow.push({ message: m, contextWindow: null, result: isContextOverflow(m) });
}
for (const [stopReason, input, cacheRead, output] of [["stop", 70000, 0, 10], ["stop", 30000, 40000, 10], ["stop", 1000, 0, 10], ["length", 63500, 0, 0], ["length", 63000, 0, 0], ["length", 63500, 0, 1]]) {
  const m = { role: "assistant", content: [], stopReason, usage: { ...ZERO, input, cacheRead, output } };
  overflow.push({ message: m, contextWindow: 64000, result: isContextOverflow(m, 64000) });
  overflow.push({ message: m, contextWindow: null, result: isContextOverflow(m) });
}

// convertToLlm on every harness role and its variants.
const convertInputs = [
  { role: "bashExecution", command: "ls -la", output: "a\nb", exitCode: 0, cancelled: false, truncated: false, timestamp: 1 },
  { role: "bashExecution", command: "make", output: "", exitCode: 2, cancelled: false, truncated: false, timestamp: 2 },
  { role: "bashExecution", command: "sleep 9", output: "partial", exitCode: undefined, cancelled: true, truncated: false, timestamp: 3 },
  { role: "bashExecution", command: "cat big", output: "head", exitCode: 1, cancelled: false, truncated: true, fullOutputPath: "/tmp/out.txt", timestamp: 4 },
  { role: "bashExecution", command: "cat big", output: "head", exitCode: 0, cancelled: false, truncated: true, timestamp: 5 },
  { role: "bashExecution", command: "secret", output: "x", exitCode: 0, cancelled: false, truncated: false, excludeFromContext: true, timestamp: 6 },
  { role: "custom", customType: "note", content: "plain text", display: true, timestamp: 7 },
  { role: "custom", customType: "note", content: [{ type: "text", text: "a" }, { type: "image", data: "AA==", mimeType: "image/png" }], display: false, details: { k: 1 }, timestamp: 8 },
  { role: "branchSummary", summary: "tried B", fromId: null, timestamp: 9 },
  { role: "compactionSummary", summary: "did A", tokensBefore: 100, timestamp: 10 },
  { role: "user", content: "hi", timestamp: 11 },
  { role: "somethingElse", x: 1, timestamp: 12 },
];
const convert = { input: convertInputs, output: messages.convertToLlm(convertInputs) };

process.stdout.write(JSON.stringify({ generator: "tests/harness/node/compaction_pin.mjs", pi: "0.85.0", cases, overflow, convert }) + "\n");
