// Pi 0.85.0's own AgentHarness runs a prompt on a JSONL session (pi-ai's faux provider
// scripts the model: one tool call, then text); its one tool writes STARTED_FILE and never
// returns, so the caller can SIGKILL the process mid-tool (tests/harness/test_operations.py).
// From /work/shared/oracle/harness/run_and_hang.mjs.
//
//   node pi_run_and_hang.mjs ROOT SESSION_ID STARTED_FILE [REPLAY] [MEMO]
//
// REPLAY "safe" gives the tool Pi's replay policy "safe" (default: none, Pi's "never").
// MEMO "memo": before it hangs, the tool sets the memo "charged" to "pi-receipt" and
// checkpoints its progress ("pi half done", details {step: 1}).
//
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
const [root, sid, started, replay, memo] = process.argv.slice(2);
const core = await load("pi-agent-core/dist/index.js");
const { NodeExecutionEnv } = await load("pi-agent-core/dist/harness/env/nodejs.js");
const { createModels } = await load("pi-ai/dist/index.js");
const { fauxProvider, fauxAssistantMessage, fauxToolCall } = await load("pi-ai/dist/providers/faux.js");
const C = core.BACKGROUND_CONTEXT;
const faux = fauxProvider({ provider: "local", models: [{ id: "scripted" }] });
faux.setResponses([
	fauxAssistantMessage([fauxToolCall("slow", {}, { id: "call_1" })], { stopReason: "toolUse" }),
	fauxAssistantMessage("finished"),
]);
const models = createModels();
models.setProvider(faux.provider);
const repo = new core.JsonlSessionRepo({ fileSystem: new NodeExecutionEnv({ cwd: root }), sessionsRoot: root });
const session = await repo.create({ cwd: root, id: sid }, C);
const tool = {
	name: "slow",
	label: "slow",
	description: "slow",
	parameters: { type: "object", properties: {} },
	...(replay === "safe" ? { replay: "safe" } : {}),
	async execute(_id, _params, onUpdate, _toolContext, invocation) {
		if (memo === "memo") {
			onUpdate({ content: [{ type: "text", text: "pi half done" }], details: { step: 1 } }, { checkpoint: true });
			// The lane runs its commands in order: once the memo is in, so is the checkpoint.
			await invocation.setMemo("charged", "pi-receipt");
		}
		writeFileSync(started, "started");
		await new Promise(() => {});
	},
};
const { harness } = await core.AgentHarness.create({ session, models, model: faux.getModel(), tools: [tool] }, C);
const lane = await harness.lane("main", { createAt: null }, C);
await lane.prompt("run the slow tool", undefined, C);
