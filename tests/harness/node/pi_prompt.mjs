// Pi 0.85.0's own AgentHarness prompts on a JSONL session pitrio wrote (its lane's durable
// queue may hold messages pitrio's harness queued): AgentHarness.create restores the
// lane, lane("main").prompt(TEXT) runs (pi-ai's faux provider answers "finished"). Then,
// with QUEUE, Pi queues QUEUE as nextRun for pitrio to take.
//
//   node pi_prompt.mjs FILE TEXT [QUEUE]
//
// Prints {before, result, messages, after} as JSON: the lane's queue (kind, text) before the
// prompt, the prompt's result, the branch's messages (role, text) and the queue after.
// The environment variable PITRIO_PI_NODE_MODULES names the node_modules directory that
// holds @earendil-works/pi-agent-core and pi-ai.
import path from "node:path";
import { pathToFileURL } from "node:url";

const NM = process.env.PITRIO_PI_NODE_MODULES;
if (!NM) {
	console.error("set PITRIO_PI_NODE_MODULES to a node_modules holding @earendil-works/pi-agent-core");
	process.exit(2);
}
const load = (p) => import(pathToFileURL(path.join(NM, "@earendil-works", p)).href);
const [file, prompt, queue] = process.argv.slice(2);
const core = await load("pi-agent-core/dist/index.js");
const S = await load("pi-agent-core/dist/harness/session/index.js");
const { NodeExecutionEnv } = await load("pi-agent-core/dist/harness/env/nodejs.js");
const { createModels } = await load("pi-ai/dist/index.js");
const { fauxProvider, fauxAssistantMessage } = await load("pi-ai/dist/providers/faux.js");
const C = core.BACKGROUND_CONTEXT;
const faux = fauxProvider({ provider: "local", models: [{ id: "scripted" }] });
faux.setResponses([fauxAssistantMessage("finished")]);
const models = createModels();
models.setProvider(faux.provider);
const root = path.dirname(path.dirname(file));
const repo = new S.JsonlSessionRepo({ fileSystem: new NodeExecutionEnv({ cwd: root }), sessionsRoot: root });
const metadata = (await repo.list({}, C)).find((m) => m.path === file);
if (metadata === undefined) throw new Error(`Pi does not list ${file}`);
const session = await repo.open(metadata, C);
const { harness } = await core.AgentHarness.create({ session, models, model: faux.getModel(), tools: [] }, C);
const lane = await harness.lane("main", C);
const text = (m) => (Array.isArray(m.content) ? m.content.filter((b) => b.type === "text").map((b) => b.text).join(" ") : m.content);
const inbox = async () => {
	const state = (await session.getValue(S.laneState("main"), C))?.value;
	const out = [];
	for (const item of state?.inbox ?? []) {
		const stored = (await session.getValue(S.pendingEntry(item.entryId), C))?.value;
		out.push([item.kind, stored?.type === "message" ? text(stored.payload) : null]);
	}
	return out;
};
const before = await inbox();
const result = await lane.prompt(prompt, undefined, C);
if (queue) {
	const queued = await lane.nextRun(queue, undefined, C);
	if (!queued.ok) throw new Error(String(queued.error?.message));
}
const tip = (await session.getValue(S.branchTip("main"), C))?.value ?? null;
const entries = tip === null ? [] : await session.scanBranch({ start: tip, order: "oldestFirst" }, C);
const messages = entries.filter((e) => e.type === "message").map((e) => [e.message.role, text(e.message)]);
const after = await inbox();
process.stdout.write(
	`${JSON.stringify({ before, result: result.ok ? result.value.status : String(result.error?.message), messages, after })}\n`,
);
await session.close(C);
