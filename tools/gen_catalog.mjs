// Prints pi-ai's built-in model catalog and environment-key map as one JSON document.
//
//     node tools/gen_catalog.mjs PI_AI_DIR > catalog.json
//
// PI_AI_DIR is the folder of the installed @earendil-works/pi-ai package (or set
// $PITRIO_PI_AI). tools/gen_catalog.py runs this and writes pitrio's catalog module; the
// catalog tests run it to compare the committed module with pi-ai.
import { pathToFileURL } from "node:url";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const dir = process.argv[2] ?? process.env.PITRIO_PI_AI;
if (!dir) {
	console.error("usage: node tools/gen_catalog.mjs PI_AI_DIR (the installed @earendil-works/pi-ai)");
	process.exit(2);
}
const load = (path) => import(pathToFileURL(join(dir, "dist", path)).href);
const { version } = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
const { MODELS } = await load("models.generated.js");
const { builtinProviders } = await load("providers/all.js");
const { findEnvKeys, getEnvApiKey } = await load("env-api-keys.js");

// The names an env-key function reads, in order: an env object that records each lookup
// (truthy: every candidate counts as set; undefined: every special case is walked).
function reads(fn, provider, value) {
	const names = [];
	const env = new Proxy({}, { get: (_, name) => (names.push(String(name)), value) });
	fn(provider, env);
	return names;
}

const providers = {};
const envKeys = {};
const specialEnv = {};
for (const provider of builtinProviders()) {
	const keys = reads(findEnvKeys, provider.id, "set");
	if (keys.length > 0) envKeys[provider.id] = keys;
	const walked = reads(getEnvApiKey, provider.id, undefined).filter((name) => !keys.includes(name));
	if (walked.length > 0) specialEnv[provider.id] = [...new Set(walked)];
	if (!(provider.id in MODELS)) continue;
	providers[provider.id] = { name: provider.name, baseUrl: provider.baseUrl ?? null, headers: provider.headers ?? null };
}
const models = {};
for (const [provider, entries] of Object.entries(MODELS)) models[provider] = Object.values(entries);
process.stdout.write(JSON.stringify({ piAiVersion: version, providers, envKeys, specialEnv, models }));
