// Drives Pi's own session code (pi-agent-core 0.85.0, harness/session/jsonl) for the
// interop tests in tests/harness/test_session_interop.py.
//
//   node pi_session.mjs write ROOT CWD      Pi writes a session under ROOT; prints what Pi sees
//   node pi_session.mjs read FILE [TEXT]    Pi opens FILE (optionally appends a user message
//                                           TEXT, then closes it); prints what Pi sees
//   node pi_session.mjs lanes FILE          Pi's harness restores FILE's lanes (restoreSession);
//                                           prints each lane's tip, interrupted operation and
//                                           inbox size, or the error restoring raised
//   node pi_session.mjs operation FILE      Pi restores lane main of FILE (restoreLane); prints
//                                           its operation's meta and state as stored (JSON)
//   node pi_session.mjs lanes-many FILE...  "lanes" for each FILE: {files: [...]}, in order
//
// The environment variable PITRIO_PI_NODE_MODULES names the node_modules directory that
// holds @earendil-works/pi-agent-core. Output: one JSON object on stdout.
import path from "node:path";
import { pathToFileURL } from "node:url";

const NM = process.env.PITRIO_PI_NODE_MODULES;
if (!NM) {
	console.error("set PITRIO_PI_NODE_MODULES to a node_modules holding @earendil-works/pi-agent-core");
	process.exit(2);
}
const core = (p) => import(pathToFileURL(path.join(NM, "@earendil-works/pi-agent-core/dist", p)).href);
const S = await core("harness/session/index.js");
const { NodeExecutionEnv } = await core("harness/env/nodejs.js");
const { buildSessionContext } = await core("harness/session/context.js");
const { BACKGROUND_CONTEXT: ctx } = await core("harness/context.js");
const { restoreLane, restoreSession } = await core("harness/runtime/restore.js");

const usage = (input, output) => ({
	input,
	output,
	cacheRead: 0,
	cacheWrite: 0,
	totalTokens: input + output,
	cost: { input: input / 1e6, output: output / 1e6, cacheRead: 0, cacheWrite: 0, total: (input + output) / 1e6 },
});
const assistant = (content, stopReason, timestamp) => ({
	role: "assistant",
	content,
	api: "anthropic-messages",
	provider: "anthropic",
	model: "claude-sonnet-4-5",
	usage: usage(100, 20),
	stopReason,
	timestamp,
});

async function dump(session) {
	const tip = (await session.getValue(S.branchTip("main"), ctx))?.value ?? null;
	const pathEntries = tip === null ? [] : await session.scanBranch({ start: tip, order: "oldestFirst" }, ctx);
	const labels = await session.scanValues(S.entryLabel(""), ctx);
	return {
		id: session.metadata.id,
		cwd: session.metadata.cwd,
		parentSessionId: session.metadata.parentSessionId ?? null,
		tip,
		name: (await session.getName(ctx)) ?? null,
		config: (await session.getValue(S.laneConfig("main"), ctx))?.value ?? null,
		labels: Object.fromEntries(labels.map((v) => [v.address.key, v.value])),
		entries: (await session.findEntries({ order: "asc" }, ctx)).map((e) => ({
			id: e.id,
			parentId: e.parentId,
			type: e.type,
			seq: e.seq,
		})),
		branch: pathEntries.map((e) => e.id),
		messages: await buildSessionContext(pathEntries, {}, ctx),
		stats: await session.getStats(ctx),
	};
}

async function write(root, cwd) {
	let clock = 1767225600000; // 2026-01-01T00:00:00Z, one second per write: stable files
	const now = () => (clock += 1000);
	const repo = new S.JsonlSessionRepo({ fileSystem: new NodeExecutionEnv({ cwd }), sessionsRoot: root, now });
	const session = await repo.create({ cwd }, ctx);
	const main = await session.createBranch("main", null, ctx);
	await session.setValue(
		S.laneConfig("main"),
		{ model: { provider: "anthropic", modelId: "claude-sonnet-4-5" }, thinkingLevel: "medium", activeToolNames: ["read", "bash"] },
		ctx,
	);
	await session.setValue(S.laneState("main"), { currentOperationId: null, lastOperationId: null, inbox: [] }, ctx);
	const first = await main.appendMessage({ role: "user", content: "List the files", timestamp: 1767225600001 }, ctx);
	await main.appendMessage(
		assistant(
			[
				{ type: "thinking", thinking: "Use ls." },
				{ type: "toolCall", id: "call_1", name: "bash", arguments: { command: "ls" } },
			],
			"toolUse",
			1767225600002,
		),
		ctx,
	);
	await main.appendMessage(
		{
			role: "toolResult",
			toolCallId: "call_1",
			toolName: "bash",
			content: [{ type: "text", text: "a.txt\nb.txt" }],
			isError: false,
			timestamp: 1767225600003,
		},
		ctx,
	);
	const answer = assistant([{ type: "text", text: "Two files: a.txt and b.txt." }], "stop", 1767225600004);
	await main.appendMessage(answer, ctx);
	await main.appendCustomEntry("note", { pinned: true }, ctx);
	await session.setLabel(first, "start", ctx);
	await session.setName("Pi demo", ctx);
	const compactionId = session.idGenerator.next();
	await session.mutate(async (m) => {
		const tip = (await m.getValue(S.branchTip("main"), ctx)).value;
		await m.commit(
			[
				S.insertEntry({
					id: compactionId,
					parentId: tip,
					type: "compaction",
					summary: "The user asked for the files; there are two.",
					retainedTail: [answer],
					tokensBefore: 1234,
					details: { readFiles: ["a.txt"], modifiedFiles: [] },
					usage: usage(50, 10),
					fromHook: false,
				}),
				S.setValue(S.branchTip("main"), compactionId),
			],
			ctx,
		);
	}, ctx);
	await main.appendMessage({ role: "user", content: [{ type: "text", text: "Run ls again" }], timestamp: 1767225600005 }, ctx);
	await main.appendMessage(
		{ role: "bashExecution", command: "ls", output: "a.txt\nb.txt", exitCode: 0, cancelled: false, truncated: false, timestamp: 1767225600006 },
		ctx,
	);
	const aborted = await main.appendMessage(
		{ ...assistant([{ type: "text", text: "Runn" }], "aborted", 1767225600007), errorMessage: "Request was aborted" },
		ctx,
	);
	const abandoned = await main.appendMessage({ role: "user", content: "Never mind", timestamp: 1767225600010 }, ctx);
	// Go back to the aborted reply and branch off with a summary of the abandoned branch.
	const summaryId = session.idGenerator.next();
	await session.mutate(async (m) => {
		await m.commit(
			[
				S.setValue(S.branchTip("main"), aborted),
				S.insertEntry({ id: summaryId, parentId: aborted, type: "branch_summary", fromId: abandoned, summary: "Said never mind.", fromHook: false }),
				S.setValue(S.branchTip("main"), summaryId),
			],
			ctx,
		);
	}, ctx);
	await main.appendMessage(
		{ role: "custom", customType: "reminder", content: "Be brief.", display: true, details: { level: 1 }, timestamp: 1767225600008 },
		ctx,
	);
	await main.appendMessage({ role: "user", content: "Which is newer? ünïcödé ✓", timestamp: 1767225600009 }, ctx);
	const out = { path: session.metadata.path, ...(await dump(session)) };
	await session.close(ctx);
	return out;
}

async function read(file, appendText) {
	const root = path.dirname(path.dirname(file));
	const repo = new S.JsonlSessionRepo({ fileSystem: new NodeExecutionEnv({ cwd: root }), sessionsRoot: root });
	const metadata = (await repo.list({}, ctx)).find((m) => m.path === file);
	if (metadata === undefined) throw new Error(`Pi does not list ${file}`);
	const session = await repo.open(metadata, ctx);
	if (appendText !== undefined) {
		const main = await session.branch("main", ctx);
		await main.appendMessage({ role: "user", content: appendText, timestamp: 1767225699999 }, ctx);
	}
	const out = { path: file, ...(await dump(session)) };
	await session.close(ctx);
	return out;
}

async function openFile(file) {
	const root = path.dirname(path.dirname(file));
	const repo = new S.JsonlSessionRepo({ fileSystem: new NodeExecutionEnv({ cwd: root }), sessionsRoot: root });
	const metadata = (await repo.list({}, ctx)).find((m) => m.path === file);
	if (metadata === undefined) throw new Error(`Pi does not list ${file}`);
	return repo.open(metadata, ctx);
}

async function lanes(file) {
	const session = await openFile(file);
	try {
		const restored = await restoreSession(session, ctx);
		const out = {};
		for (const [name, lane] of restored) {
			out[name] = {
				tipId: lane.tipId,
				operation: lane.operation ? { intent: lane.operation.meta.intent?.kind, at: lane.operation.state.at } : null,
				inbox: (lane.inbox ?? []).length,
			};
		}
		return { lanes: out };
	} catch (error) {
		return { error: `${error.constructor.name}: ${error.message}` };
	} finally {
		await session.close(ctx);
	}
}

async function operation(file) {
	const session = await openFile(file);
	try {
		const lane = await restoreLane(session, "main", ctx);
		return { operation: lane.operation, lastOperationId: lane.lastOperationId };
	} catch (error) {
		return { error: `${error.constructor.name}: ${error.message}` };
	} finally {
		await session.close(ctx);
	}
}

const [command, ...args] = process.argv.slice(2);
let result;
if (command === "write") result = await write(args[0], args[1]);
else if (command === "read") result = await read(args[0], args[1]);
else if (command === "lanes") result = await lanes(args[0]);
else if (command === "operation") result = await operation(args[0]);
else if (command === "lanes-many") {
	result = { files: [] };
	for (const file of args) result.files.push(await lanes(file));
}
else {
	console.error("usage: pi_session.mjs write ROOT CWD | read FILE [TEXT] | lanes FILE | operation FILE");
	process.exit(2);
}
process.stdout.write(`${JSON.stringify(result)}\n`);
