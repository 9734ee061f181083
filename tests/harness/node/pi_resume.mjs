// Pi 0.85.0's own AgentHarness resumes the interrupted run of a JSONL session (a file
// pitrio's harness left when it was killed mid-tool): AgentHarness.create restores the
// lanes, lane("main").resume() drives the operation to its end. pi-ai's faux provider
// answers "finished"; the tool "slow" (replay policy REPLAY: safe or never) counts its runs.
//
//   node pi_resume.mjs FILE REPLAY
//
// Prints {open, result, ran, memo, invocationId, messages} as JSON: the open operations
// create() found, resume()'s result, the tool's runs, the memo "charged" and the
// invocation id its last run saw, and the branch's messages (role, and their text).
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
const [file, replay] = process.argv.slice(2);
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
let ran = 0;
let memo = null;
let invocationId = null;
const tool = {
	name: "slow",
	label: "slow",
	description: "slow",
	parameters: { type: "object", properties: {} },
	...(replay === "safe" ? { replay: "safe" } : {}),
	async execute(_id, _params, _onUpdate, _toolContext, invocation) {
		ran += 1;
		memo = (await invocation.getMemo("charged")) ?? null;
		invocationId = invocation.invocationId;
		return { content: [{ type: "text", text: "slow ran" }], details: {} };
	},
};
const { harness, open } = await core.AgentHarness.create({ session, models, model: faux.getModel(), tools: [tool] }, C);
const lane = await harness.lane("main", C);
const result = await lane.resume(C);
const tip = (await session.getValue(S.branchTip("main"), C))?.value ?? null;
const entries = tip === null ? [] : await session.scanBranch({ start: tip, order: "oldestFirst" }, C);
const text = (m) => (Array.isArray(m.content) ? m.content.filter((b) => b.type === "text").map((b) => b.text).join(" ") : m.content);
const messages = entries.filter((e) => e.type === "message").map((e) => [e.message.role, text(e.message)]);
process.stdout.write(
	`${JSON.stringify({ open: open.map((o) => ({ lane: o.lane, kind: o.kind })), result: result.ok ? result.value.status : String(result.error?.message), ran, memo, invocationId, messages })}\n`,
);
await session.close(C);
