// Pi 0.85.0's own AgentHarness runs a scripted scenario on a JSONL session, and restores a
// session cut short (a prefix of a session's transactions: what a process killed there
// left), recording the events of the restore (tests/harness/test_recovery_traces.py).
//
//   node pi_recovery_trace.mjs record SCENARIO ROOT      -> {"lines", "cuts", "records"}
//   node pi_recovery_trace.mjs restore SCENARIO FILE...  -> {"cuts", "records"}
//
// a cut: {"open", "result", "ran", "events", "messages", "writes"}; "writes" are the
// transactions the restore appended, as indexes into "records" (see appended).
//
// SCENARIO: "tool" (a prompt; the model says "let me look" and calls the unsafe tool
// "look", then answers "finished"), "retry" (the first answer is a retryable error, then
// "finished"), "queue" (steer, follow-up and next-run messages queued on an idle lane,
// the follow-up cancelled, then the prompt "go" takes the rest: "finished") or "steer"
// (as "tool", but the tool steers "s2" while it runs; the model answers it "finished").
// The model (pi-ai's faux provider) answers by the context, so that a restore asks it
// what the cut run would have: after a tool result or "s2" "finished", after a user
// message a tool call (tool, steer) or, the first time, an error (retry).
//
// record: runs the scenario uninterrupted on a new session under ROOT, then restores each
// prefix of its transactions (the session as a kill after the K-th write left it, K = 1..)
// in a copy; prints the session's lines (header first) and each cut's restore.
// restore: AgentHarness.create on each file (its open operations), then lane("main")
// .resume() when an operation is open; for "queue", the prompt "go" when no run has
// ended yet. Prints the events the harness emitted (ids renamed in order of
// appearance; times, usage numbers and the faux api's name left out), the tool's runs
// and the branch's messages, and the transactions it appended to the session.
//
// The environment variable PITRIO_PI_NODE_MODULES names the node_modules directory that
// holds @earendil-works/pi-agent-core and pi-ai.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const NM = process.env.PITRIO_PI_NODE_MODULES;
if (!NM) {
	console.error("set PITRIO_PI_NODE_MODULES to a node_modules holding @earendil-works/pi-agent-core");
	process.exit(2);
}
const load = (p) => import(pathToFileURL(path.join(NM, "@earendil-works", p)).href);
const [command, scenario, where] = process.argv.slice(2);
const core = await load("pi-agent-core/dist/index.js");
const S = await load("pi-agent-core/dist/harness/session/index.js");
const { NodeExecutionEnv } = await load("pi-agent-core/dist/harness/env/nodejs.js");
const { createModels } = await load("pi-ai/dist/index.js");
const { fauxProvider, fauxAssistantMessage, fauxToolCall, fauxText } = await load("pi-ai/dist/providers/faux.js");
const C = core.BACKGROUND_CONTEXT;

const text = (m) =>
	Array.isArray(m.content) ? m.content.filter((b) => b.type === "text").map((b) => b.text).join(" ") : m.content;

// The retryable error is served once: by the run, or by the restore of a cut before it.
let errorServed = false;

function answer(context) {
	const messages = context.messages;
	const last = messages[messages.length - 1];
	if (last?.role === "toolResult") return fauxAssistantMessage("finished");
	if (scenario === "steer" && text(last) === "s2") return fauxAssistantMessage("finished");
	if (scenario === "tool" || scenario === "steer")
		return fauxAssistantMessage([fauxText("let me look"), fauxToolCall("look", { path: "a.txt" }, { id: "call_1" })], {
			stopReason: "toolUse",
		});
	if (scenario === "retry" && !errorServed) {
		errorServed = true;
		return fauxAssistantMessage([], { stopReason: "error", errorMessage: "overloaded_error" });
	}
	return fauxAssistantMessage("finished");
}

let ran = 0;
let currentLane;
const tool = {
	name: "look",
	label: "look",
	description: "look at a file",
	parameters: { type: "object", properties: { path: { type: "string" } } },
	async execute(_id, params) {
		ran += 1;
		if (scenario === "steer" && currentLane !== undefined) await currentLane.steer("s2", undefined, C);
		return { content: [{ type: "text", text: `seen ${params.path}` }], details: {} };
	},
};
function options(session) {
	const faux = fauxProvider({ provider: "local", models: [{ id: "scripted" }], tokenSize: { min: 4, max: 4 } });
	faux.setResponses(Array.from({ length: 8 }, () => (context) => answer(context)));
	const models = createModels();
	models.setProvider(faux.provider);
	return {
	session,
	models,
	model: faux.getModel(),
	tools: [tool],
	retry: { enabled: true, maxRetries: 3, baseDelayMs: 1 },
	};
}

async function run(root, id) {
	mkdirSync(root, { recursive: true });
	const repo = new S.JsonlSessionRepo({ fileSystem: new NodeExecutionEnv({ cwd: root }), sessionsRoot: root });
	const session = await repo.create({ cwd: "/work/project", id }, C);
	const { harness } = await core.AgentHarness.create(options(session), C);
	const lane = await harness.lane("main", { createAt: null }, C);
	currentLane = lane;
	if (scenario === "queue") {
		await lane.steer("s1", undefined, C);
		const follow = await lane.followUp("f1", undefined, C);
		await lane.nextRun("n1", undefined, C);
		await lane.cancelQueued(follow.value.entryId, C);
		await lane.prompt("go", undefined, C);
	} else {
		await lane.prompt("look at a.txt", undefined, C);
	}
	const file = session.metadata.path;
	await session.close(C);
	return file;
}

// Ids are renamed in order of appearance: the same id, the same name, in both traces.
const names = new Map();
const ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const DROP = new Set(["timestamp", "startedAt", "endedAt", "notBefore", "at", "api", "usage", "totals", "row", "seq"]);
function normalise(value) {
	if (typeof value === "string" && ID.test(value)) {
		if (!names.has(value)) names.set(value, `id${names.size + 1}`);
		return names.get(value);
	}
	if (Array.isArray(value)) return value.map(normalise);
	if (value !== null && typeof value === "object") {
		const out = {};
		for (const [key, item] of Object.entries(value)) if (!DROP.has(key)) out[key] = normalise(item);
		return out;
	}
	return value;
}

// The transactions a restore appended to a session (its lines after the cut), each a list
// of records. Ids (also inside keys such as "op:entry") are renamed in order of first
// appearance in the whole file, the cut included, so that a write naming an id the cut
// holds names the same id in both traces; times are TIME, usage numbers USAGE, the faux
// api's name API: what a run cannot repeat. The records are stored once in the scenario's
// table ("records", JSON texts): a transaction is a list of indexes into it.
const UUIDS = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;
const TIMES = new Set(["timestamp", "createdAt", "startedAt", "endedAt", "notBefore", "updatedAt"]);
function normaliseWrite(value, ids, key) {
	if (typeof value === "string") {
		if (key === "api") return "API";
		return value.replace(UUIDS, (id) => {
			if (!ids.has(id)) ids.set(id, `id${ids.size + 1}`);
			return ids.get(id);
		});
	}
	if (typeof value === "number" && TIMES.has(key)) return "TIME";
	if (key === "usage" && value !== null && typeof value === "object") return "USAGE";
	if (Array.isArray(value)) return value.map((item) => normaliseWrite(item, ids));
	if (value !== null && typeof value === "object") {
		const out = {};
		for (const [k, item] of Object.entries(value)) if (k !== "seq") out[k] = normaliseWrite(item, ids, k);
		return out;
	}
	return value;
}

function appended(lines, cutLength) {
	const ids = new Map();
	const transactions = lines.slice(1).map((line) => {
		const parsed = JSON.parse(line);
		return (Array.isArray(parsed) ? parsed : [parsed]).map((record) => normaliseWrite(record, ids));
	});
	return transactions.slice(cutLength - 1);
}

let records = [];
const recordIndex = new Map();
function indexed(transactions) {
	return transactions.map((records_) =>
		records_.map((record) => {
			const text = JSON.stringify(record);
			if (!recordIndex.has(text)) {
				recordIndex.set(text, records.length);
				records.push(text);
			}
			return recordIndex.get(text);
		}),
	);
}

async function branchMessages(session) {
	const tip = (await session.getValue(S.branchTip("main"), C))?.value ?? null;
	const entries = tip === null ? [] : await session.scanBranch({ start: tip, order: "oldestFirst" }, C);
	return entries
		.filter((e) => e.type === "message")
		.map((e) => [e.message.role, e.message.stopReason ?? null, text(e.message), e.message.errorMessage ?? null]);
}

async function restore(file) {
	names.clear();
	ran = 0;
	const root = path.dirname(path.dirname(file));
	const repo = new S.JsonlSessionRepo({ fileSystem: new NodeExecutionEnv({ cwd: root }), sessionsRoot: root });
	const metadata = (await repo.list({}, C)).find((m) => m.path === file);
	if (metadata === undefined) throw new Error(`Pi does not list ${file}`);
	const cutLength = readFileSync(file, "utf8").trimEnd().split("\n").length;
	const session = await repo.open(metadata, C);
	const before = await branchMessages(session);
	errorServed = before.some((m) => m[3] === "overloaded_error");
	const events = [];
	const { harness, open } = await core.AgentHarness.create(options(session), C);
	const emitBatch = harness.events.emitBatch.bind(harness.events);
	harness.events.emitBatch = (batch, context) => {
		for (const event of batch) if (event.type !== "message_update") events.push(normalise(event));
		return emitBatch(batch, context);
	};
	const lane = await harness.lane("main", C);
	currentLane = lane;
	let result = null;
	if (open.length !== 0) {
		const resumed = await lane.resume(C);
		result = resumed.ok ? resumed.value.status : `error: ${resumed.error?.message}`;
	}
	const state = (await session.getValue(S.laneState("main"), C))?.value;
	if (scenario === "queue" && state?.lastOperationId == null) {
		const prompted = await lane.prompt("go", undefined, C);
		result = prompted.ok ? prompted.value.status : `error: ${prompted.error?.message}`;
	}
	const messages = await branchMessages(session);
	await session.close(C);
	const writes = indexed(appended(readFileSync(file, "utf8").trimEnd().split("\n"), cutLength));
	return { open: open.map((o) => ({ lane: o.lane, kind: o.kind })), result, ran, events, messages, writes };
}

async function record(root) {
	const file = await run(path.join(root, "run"), scenario);
	const lines = readFileSync(file, "utf8").trimEnd().split("\n");
	const cuts = [];
	for (let k = 1; k < lines.length; k++) {
		const dir = path.join(root, `cut${k}`, "sessions");
		mkdirSync(dir, { recursive: true });
		const cut = path.join(dir, path.basename(file));
		writeFileSync(cut, `${lines.slice(0, k + 1).join("\n")}\n`);
		cuts.push(await restore(cut));
	}
	return { lines, cuts, records };
}

const files = process.argv.slice(4);
const out = command === "record" ? await record(where) : await Promise.all([]).then(async () => {
	const all = [];
	for (const file of files) all.push(await restore(file));
	return { cuts: all, records };
});
process.stdout.write(`${JSON.stringify(out)}\n`);
