// Calls every method of Pi's own RpcClient against one agent and prints the transcript
// (one JSON document on stdout): for each step its raw responses, the method's result
// or error, and the events that arrived meanwhile.
//
// Environment: RPC_CLI_COMMAND (see cli.mjs), RPC_CWD (the agent's working directory),
// RPC_ARGS (a JSON array of extra arguments), PI_CODING_AGENT_DIR (Pi's package; else
// found with `$PI_ORACLE --oracle-path`, default /work/shared/oracle/coding-agent/pi).
import { execFileSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
let piDir = process.env.PI_CODING_AGENT_DIR;
if (!piDir) {
	const oracle = process.env.PI_ORACLE ?? "/work/shared/oracle/coding-agent/pi";
	const root = execFileSync(oracle, ["--oracle-path"], { encoding: "utf8" }).trim();
	piDir = path.join(root, "node_modules", "@earendil-works", "pi-coding-agent");
}
const { RpcClient } = await import(pathToFileURL(path.join(piDir, "dist", "modes", "rpc", "rpc-client.js")).href);

const client = new RpcClient({
	cliPath: path.join(here, "cli.mjs"),
	cwd: process.env.RPC_CWD,
	provider: "local",
	model: "scripted",
	args: JSON.parse(process.env.RPC_ARGS ?? "[]"),
});

const steps = [];
let events = [];
let responses = [];
const timings = [];
client.onEvent((event) => events.push(event));
const send = client.send.bind(client);
client.send = async (command) => {
	const response = await send(command);
	responses.push(response);
	return response;
};

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function waitForEvent(predicate, timeout = 30000) {
	return new Promise((resolve, reject) => {
		const timer = setTimeout(() => {
			stop();
			reject(new Error("timeout waiting for an event"));
		}, timeout);
		const stop = client.onEvent((event) => {
			if (predicate(event)) {
				clearTimeout(timer);
				stop();
				resolve(event);
			}
		});
	});
}

async function step(name, fn) {
	let result;
	let error;
	const started = performance.now();
	try {
		result = await fn();
	} catch (e) {
		error = String(e?.message ?? e).split("\n")[0];
	}
	const ms = performance.now() - started;
	await sleep(30); // late events of this step (none are expected)
	steps.push({ step: name, ms, responses, result, error, events });
	events = [];
	responses = [];
	return result;
}

await client.start();
try {
	const first = await step("getState", () => client.getState());
	await step("getAvailableModels", () => client.getAvailableModels());
	await step("getAvailableThinkingLevels", () => client.getAvailableThinkingLevels());
	await step("setThinkingLevel", () => client.setThinkingLevel("high"));
	await step("cycleThinkingLevel", () => client.cycleThinkingLevel());
	await step("cycleModel", () => client.cycleModel());
	await step("setModel", () => client.setModel("local", "scripted"));
	await step("setModel unknown", () => client.setModel("local", "no-such-model"));
	await step("setSteeringMode", () => client.setSteeringMode("all"));
	await step("setFollowUpMode", () => client.setFollowUpMode("one-at-a-time"));
	await step("setSessionName", () => client.setSessionName("rpc work"));
	await step("getState", () => client.getState());
	await step("promptAndWait", async () => {
		const started = performance.now();
		const got = await client.promptAndWait("hello");
		timings.push(performance.now() - started);
		return got.length;
	});
	await step("promptAndWait tool", () => client.promptAndWait("read notes.txt").then((e) => e.length));
	await step("getLastAssistantText", () => client.getLastAssistantText());
	await step("steer and followUp", async () => {
		const idle = client.waitForIdle();
		// Steered while the tool runs (not before the run's first poll: a race, not protocol).
		const running = waitForEvent((e) => e.type === "tool_execution_start");
		await client.prompt("bash sleep 1; echo slept");
		await running;
		await client.steer("steered");
		await client.followUp("later");
		await idle;
	});
	await step("clearQueue", async () => {
		const idle = client.waitForIdle();
		const running = waitForEvent((e) => e.type === "tool_execution_start");
		await client.prompt("bash sleep 1; echo again");
		await running;
		await client.followUp("queued");
		const cleared = await client.clearQueue();
		await idle;
		return cleared;
	});
	await step("abort", async () => {
		const delta = waitForEvent((e) => e.type === "message_update" && e.assistantMessageEvent.type === "text_delta");
		await client.prompt("hang");
		await delta;
		await client.abort();
	});
	await step("getLastAssistantText", () => client.getLastAssistantText());
	await step("promptAndWait error", () => client.promptAndWait("fail").then((e) => e.length));
	await step("setAutoRetry", () => client.setAutoRetry(false));
	await step("promptAndWait no retry", () => client.promptAndWait("flaky one").then((e) => e.length));
	await step("setAutoRetry", () => client.setAutoRetry(true));
	await step("promptAndWait retry", () => client.promptAndWait("flaky two").then((e) => e.length));
	await step("abortRetry", () => client.abortRetry());
	await step("bash", () => client.bash("echo hi; echo there"));
	await step("abortBash", () => client.abortBash());
	await step("getMessages", () => client.getMessages().then((m) => m.map((x) => x.role)));
	await step("getSessionStats", () => client.getSessionStats());
	await step("getCommands", () => client.getCommands());
	await step("promptAndWait big", () => client.promptAndWait("big 90000").then((e) => e.length));
	await step("compact", () => client.compact());
	await step("compact again", () => client.compact());
	await step("getSessionStats", () => client.getSessionStats());
	const forkable = await step("getForkMessages", () => client.getForkMessages());
	await step("getEntries", () => client.getEntries());
	await step("getTree", () => client.getTree());
	await step("fork", () => client.fork(forkable?.[1]?.entryId ?? "none"));
	await step("getMessages", () => client.getMessages().then((m) => m.map((x) => x.role)));
	await step("fork unknown", () => client.fork("no-such-entry"));
	await step("clone", () => client.clone());
	await step("switchSession", () => client.switchSession(first?.sessionFile ?? "none"));
	await step("getState", () => client.getState());
	await step("newSession", () => client.newSession());
	await step("compact empty", () => client.compact());
	await step("setAutoCompaction", () => client.setAutoCompaction(false));
	await step("getState", () => client.getState());
	await step("exportHtml", () => client.exportHtml(path.join(process.env.RPC_CWD ?? ".", "session.html")));
	await step("promptAndWait", () => client.promptAndWait("hello again").then((e) => e.length));
} finally {
	await client.stop();
}
process.stdout.write(`${JSON.stringify({ steps, promptAndWaitMs: timings })}\n`);
