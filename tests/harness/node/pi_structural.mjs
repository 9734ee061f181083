// Pi 0.85.0's own AgentHarness compacts and navigates a JSONL session (pi-ai's faux provider
// scripts the model), for tests/harness/test_compaction_ops.py and test_navigation.py.
//
//   node pi_structural.mjs run ROOT SESSION_ID MODE [STARTED_FILE]
//       Two prompts ("first" -> "one", "second" -> "two"), then MODE:
//         compact            lane.compact() (keepRecentTokens 1: the first turn is summarised)
//         navigate           lane.navigateTree(first answer, {summarize: true, label: "back"})
//         navigate-plain     lane.navigateTree(first answer) (no summary)
//         hang-compact       as compact, but the summary request writes STARTED_FILE and never
//         hang-navigate      as navigate, but the summary request ... never answers
//         compact-queued     lane.followUp("later") while idle, then as compact: the lane
//                            starts a run for the queued message once the compaction has
//                            ended (continueAfterStructural), answered "answer to later"
//         threshold          no call after the prompts: the model's window is the reserve plus
//                            60 tokens and "second" is answered "two" and 400 x's, so the second
//                            run compacts at its checkpoint after that answer (inside the run)
//         hang-threshold     as threshold, but the summary request ... never answers
//         first-threshold    the window as threshold; the second prompt is "second" and 400 x's,
//                            so its run compacts at its first checkpoint, before its request
//         threshold-fail     as threshold, but every summary request fails ("invalid request",
//                            not retryable): the run fails
//         overflow           "second" is first answered with a context overflow ("prompt is too
//                            long ..."): the run compacts and asks again ("two")
//         overflow-decline   as overflow, with a before_compaction hook that declines
//         hang-overflow      as overflow, but the summary request ... never answers
//       (the modes from first-threshold on answer by what is asked: a summary request
//       "SUMMARY", "first" "one", the rest "two"; they print the run's pi.result too)
//       (a hang-* process is SIGKILLed by its caller once STARTED_FILE exists).
//         hook-decline-compact / hook-compact / hook-decline-navigate / hook-navigate
//                            as compact / navigate, with a before_compaction or
//                            before_navigation hook that declines, or gives the summary
//                            ("HOOK SUMMARY", with HOOK_USAGE); what the hook was given
//                            is printed as "hook".
//       Prints {events, result, file} as JSON.
//   node pi_structural.mjs resume FILE
//       AgentHarness.create restores FILE; lane("main").resume() drives its operation to its
//       end (the summary answered "SUMMARY AGAIN"). Prints {open, result, events, branch,
//       lane} as JSON: the open operations create() found, resume()'s result, the events,
//       the branch's entries (type, and role / summary) and the lane's state.
//
// Events are printed by type with their reason, status, recovery flag and attempt (no ids or
// times), so two runs compare equal.
// The environment variable PITRIO_PI_NODE_MODULES names the node_modules directory that
// holds @earendil-works/pi-agent-core and pi-ai.
import { writeFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const NM = process.env.PITRIO_PI_NODE_MODULES;
if (!NM) {
	console.error("set PITRIO_PI_NODE_MODULES to a node_modules holding @earendil-works/pi-agent-core");
	process.exit(2);
}
const load = (p) => import(pathToFileURL(path.join(NM, "@earendil-works", p)).href);
const core = await load("pi-agent-core/dist/index.js");
const S = await load("pi-agent-core/dist/harness/session/index.js");
const { NodeExecutionEnv } = await load("pi-agent-core/dist/harness/env/nodejs.js");
const { createModels } = await load("pi-ai/dist/index.js");
const { fauxProvider, fauxAssistantMessage } = await load("pi-ai/dist/providers/faux.js");
const C = core.BACKGROUND_CONTEXT;
const COMPACTION = { enabled: true, reserveTokens: 16384, keepRecentTokens: 1 };

const HOOK_USAGE = {
	input: 7, output: 3, cacheRead: 0, cacheWrite: 0, totalTokens: 10,
	cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 },
};
let hookEvent = null;
function hook(harness, mode) {
	const decline = mode.startsWith("hook-decline");
	harness.hooks.on("before_compaction", (event) => {
		const p = event.preparation;
		hookEvent = { reason: event.reason, summarize: p.messagesToSummarize.length, tail: p.retainedTail.length,
			prefix: p.turnPrefixMessages.length, split: p.isSplitTurn, instructions: event.customInstructions ?? null };
		if (decline) return { decline: true };
		return { compaction: { summary: "HOOK SUMMARY", tokensBefore: p.tokensBefore, retainedTail: p.retainedTail,
			details: { readFiles: [], modifiedFiles: [] }, usage: HOOK_USAGE } };
	});
	harness.hooks.on("before_navigation", (event) => {
		hookEvent = { target: event.targetId, messages: event.preparation.messages.length,
			instructions: event.customInstructions ?? null };
		if (decline) return { decline: true };
		return { summary: { summary: "HOOK SUMMARY", readFiles: [], modifiedFiles: [], usage: HOOK_USAGE } };
	});
}

const [command, ...args] = process.argv.slice(2);
const THRESHOLD = (args[2] ?? "").includes("threshold");
const SCRIPTED = ["first-threshold", "threshold-fail", "overflow", "overflow-decline", "hang-overflow"];
// A window the second answer passes: the reserve (16384) plus 60 tokens.
const WINDOW = THRESHOLD ? { contextWindow: 16384 + 60 } : {};
const LONG = `two ${"x".repeat(400)}`;
const faux = fauxProvider({ provider: "local", models: [{ id: "scripted", ...WINDOW }] });
const models = createModels();
models.setProvider(faux.provider);

const events = [];
const TYPES = ["run_start", "run_end", "compaction_start", "compaction_end", "navigation_start", "navigation_end",
	"entry_added", "message_start", "message_end", "retry_scheduled", "retry_start", "retry_end", "usage",
	"operation_abort", "value_update", "fault"];
function listen(harness) {
	for (const type of TYPES) harness.events.on(type, record);
}
function record(event) {
	const { type } = event;
	const out = { type };
	for (const key of ["reason", "status", "recovery", "attempt"]) {
		if (event[key] !== undefined) out[key] = event[key];
	}
	if (event.step !== undefined) out.step = "task"; // the summary task's id
	if (event.entry !== undefined) out.entry = event.entry.type;
	if (event.message !== undefined) out.role = event.message.role;
	if (event.error !== undefined) out.error = event.error.code ?? String(event.error);
	events.push(out);
}

async function branch(session) {
	const tip = (await session.getValue(S.branchTip("main"), C))?.value ?? null;
	const entries = tip === null ? [] : await session.scanBranch({ start: tip, order: "oldestFirst" }, C);
	const text = (m) =>
		Array.isArray(m.content) ? m.content.filter((b) => b.type === "text").map((b) => b.text).join(" ") : m.content;
	return entries.map((e) =>
		e.type === "message" ? [e.type, e.message.role, text(e.message)] : [e.type, e.summary.split("\n")[0]],
	);
}

// A new session under ROOT with Pi's harness on it, its lane's first prompt ("first") run.
async function afterFirst(root, sid) {
	const repo = new S.JsonlSessionRepo({ fileSystem: new NodeExecutionEnv({ cwd: root }), sessionsRoot: root });
	const session = await repo.create({ cwd: root, id: sid }, C);
	const { harness } = await core.AgentHarness.create(
		{ session, models, model: faux.getModel(), tools: [], compaction: COMPACTION },
		C,
	);
	listen(harness);
	const lane = await harness.lane("main", { createAt: null }, C);
	await lane.prompt("first", undefined, C);
	return { repo, session, harness, lane };
}

async function lastResult(session) {
	const laneState = (await session.getValue(S.laneState("main"), C))?.value ?? null;
	const last = laneState?.lastOperationId;
	const stored = last ? ((await session.getValue(S.operationResult(last), C))?.value ?? null) : null;
	return stored === null ? null : { kind: stored.kind, status: stored.status, error: stored.error ?? null };
}

if (command === "run" && SCRIPTED.includes(args[2])) {
	// The scripted modes: the model answers by what it is asked.
	const [root, sid, mode, started] = args;
	const textOf = (m) =>
		typeof m.content === "string" ? m.content : m.content.filter((b) => b.type === "text").map((b) => b.text).join(" ");
	let overflowed = false;
	const respond = async (context) => {
		if ((context.systemPrompt ?? "").startsWith("You are a context summarization")) {
			if (mode === "hang-overflow") {
				writeFileSync(started, "started");
				setInterval(() => {}, 1000);
				await new Promise(() => {});
			}
			if (mode === "threshold-fail") return fauxAssistantMessage("", { stopReason: "error", errorMessage: "invalid request" });
			return fauxAssistantMessage("SUMMARY");
		}
		const users = context.messages.filter((m) => m.role === "user");
		if (textOf(users.at(-1)) === "first") return fauxAssistantMessage("one");
		if (mode.includes("overflow") && !overflowed) {
			overflowed = true;
			return fauxAssistantMessage("", { stopReason: "error", errorMessage: "prompt is too long: 213462 tokens > 200000 maximum" });
		}
		return fauxAssistantMessage(mode === "threshold-fail" ? LONG : "two");
	};
	faux.setResponses(Array.from({ length: 16 }, () => respond));
	const { repo, session, harness, lane } = await afterFirst(root, sid);
	events.length = 0;
	if (mode === "overflow-decline") harness.hooks.on("before_compaction", () => ({ decline: true }));
	const result = await lane.prompt(mode === "first-threshold" ? `second ${"x".repeat(400)}` : "second", undefined, C);
	const metadata = (await repo.list({}, C))[0];
	process.stdout.write(
		`${JSON.stringify({ events, result: result.ok ? (result.value?.status ?? "ok") : result.error._tag, run: await lastResult(session), branch: await branch(session), file: metadata.path })}\n`,
	);
	await session.close(C);
} else if (command === "run") {
	const [root, sid, mode, started] = args;
	const hang = async () => {
		writeFileSync(started, "started");
		setInterval(() => {}, 1000); // the process waits for its SIGKILL
		await new Promise(() => {});
	};
	const summary = mode.startsWith("hang") ? hang : fauxAssistantMessage(mode.includes("navigate") ? "BRANCH SUMMARY" : "SUMMARY");
	const second = fauxAssistantMessage(THRESHOLD ? LONG : "two");
	faux.setResponses([
		fauxAssistantMessage("one"),
		second,
		summary,
		summary,
		fauxAssistantMessage("answer to later"),
	]);
	const { repo, session, harness, lane } = await afterFirst(root, sid);
	if (THRESHOLD) events.length = 0;
	const run = await lane.prompt("second", undefined, C);
	const entries = await session.scanBranch({ start: (await session.getValue(S.branchTip("main"), C)).value, order: "oldestFirst" }, C);
	const firstAnswer = entries[1].id;
	if (!THRESHOLD) events.length = 0;
	if (mode.startsWith("hook")) hook(harness, mode);
	if (mode === "compact-queued") await lane.followUp("later", undefined, C);
	let result;
	if (THRESHOLD) result = run;
	else if (mode.endsWith("compact") || mode === "compact-queued") result = await lane.compact({}, C);
	else if (mode === "navigate-plain") result = await lane.navigateTree(firstAnswer, {}, C);
	else result = await lane.navigateTree(firstAnswer, { summarize: true, label: "back" }, C);
	const metadata = (await repo.list({}, C))[0];
	process.stdout.write(
		`${JSON.stringify({ events, result: result.ok ? "ok" : result.error._tag, branch: await branch(session), file: metadata.path, target: firstAnswer, ...(hookEvent === null ? {} : { hook: hookEvent }) })}\n`,
	);
	await session.close(C);
} else if (command === "resume") {
	const [file] = args;
	faux.setResponses([fauxAssistantMessage("SUMMARY AGAIN"), fauxAssistantMessage("SUMMARY AGAIN")]);
	const root = path.dirname(path.dirname(file));
	const repo = new S.JsonlSessionRepo({ fileSystem: new NodeExecutionEnv({ cwd: root }), sessionsRoot: root });
	const metadata = (await repo.list({}, C)).find((m) => m.path === file);
	if (metadata === undefined) throw new Error(`Pi does not list ${file}`);
	const session = await repo.open(metadata, C);
	const { harness, open } = await core.AgentHarness.create(
		{ session, models, model: faux.getModel(), tools: [], compaction: COMPACTION, retry: { enabled: true, maxRetries: 3, baseDelayMs: 1 } },
		C,
	);
	listen(harness);
	const lane = await harness.lane("main", C);
	const result = await lane.resume(C);
	const laneState = (await session.getValue(S.laneState("main"), C))?.value ?? null;
	const last = laneState?.lastOperationId;
	const stored = last ? ((await session.getValue(S.operationResult(last), C))?.value ?? null) : null;
	process.stdout.write(
		`${JSON.stringify({
			open: open.map((o) => ({ lane: o.lane, kind: o.kind })),
			result: result.ok ? result.value.status : result.error._tag,
			events,
			branch: await branch(session),
			lane: { current: laneState?.currentOperationId ?? null, result: stored === null ? null : { kind: stored.kind, status: stored.status } },
		})}\n`,
	);
	await session.close(C);
} else {
	console.error(`unknown command ${command}`);
	process.exit(2);
}
