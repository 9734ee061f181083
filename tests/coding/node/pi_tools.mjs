// Runs Pi's own coding tools (pi-coding-agent 0.85.0, dist/core/tools) on the cases of
// tests/coding/data/pi_tools_cases.json and prints what they return, for
// tests/coding/test_pi_tools.py (which compares pitrio's tools with it).
//
//   node pi_tools.mjs CASES.json > pi_tools.json
//
// PITRIO_PI_NODE_MODULES names the node_modules directory that holds
// @earendil-works/pi-coding-agent (the oracle's: `/work/shared/oracle/coding-agent/pi
// --oracle-path`/node_modules). Pi's grep and find run ripgrep (rg) and fd (fd or fdfind)
// from PATH. Each case runs in a fresh temporary directory holding a `.git` directory (a
// git repository, so Pi runs fd without --no-require-git, which older fd lacks) that is
// also the process's working directory, as when Pi's CLI runs there; paths
// under it print as $CWD and bash's full-output file as $TMPFILE.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

const NM = process.env.PITRIO_PI_NODE_MODULES;
if (!NM) {
	console.error("set PITRIO_PI_NODE_MODULES to a node_modules holding @earendil-works/pi-coding-agent");
	process.exit(2);
}
process.env.PI_OFFLINE = "1"; // never download rg or fd
const tools = await import(
	pathToFileURL(path.join(NM, "@earendil-works/pi-coding-agent/dist/core/tools/index.js")).href
);

function content(spec) {
	if (spec.text !== undefined) return Buffer.from(spec.text, "utf-8");
	if (spec.base64 !== undefined) return Buffer.from(spec.base64, "base64");
	if (spec.repeat) return Buffer.from(spec.repeat[0].repeat(spec.repeat[1]), "utf-8");
	if (spec.parts) return Buffer.from(spec.parts.map(([s, n]) => s.repeat(n)).join(""), "utf-8");
	if (spec.numbered) {
		const [prefix, n, end] = spec.numbered;
		const lines = [];
		for (let i = 1; i <= n; i++) lines.push(`${prefix}${i}`);
		return Buffer.from(lines.join("\n") + end, "utf-8");
	}
	throw new Error(`unknown file spec ${JSON.stringify(spec)}`);
}

function normalize(value, cwd, tmpfile) {
	let text = JSON.stringify(value ?? null);
	if (tmpfile) text = text.split(tmpfile).join("$TMPFILE");
	text = text.split(cwd).join("$CWD");
	return JSON.parse(text);
}

async function run(c) {
	const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "pi-tools-"));
	const cwd = path.join(tmp, "work");
	fs.mkdirSync(path.join(cwd, ".git"), { recursive: true });
	for (const [name, spec] of Object.entries(c.files)) {
		const full = path.join(cwd, name);
		if (spec.dir) {
			fs.mkdirSync(full, { recursive: true });
			continue;
		}
		fs.mkdirSync(path.dirname(full), { recursive: true });
		fs.writeFileSync(full, content(spec));
	}
	// Pi's CLI runs in its working directory; rg reads relative globs against it.
	process.chdir(cwd);
	const tool = tools.createTool(c.tool, cwd);
	const args = tool.prepareArguments ? tool.prepareArguments(structuredClone(c.args)) : c.args;
	const out = { name: c.name };
	let tmpfile;
	try {
		const result = await tool.execute("call_1", args, undefined, () => {});
		tmpfile = result.details?.fullOutputPath;
		out.result = { content: result.content, details: result.details ?? null };
	} catch (err) {
		out.error = err instanceof Error ? err.message : String(err);
		const m = /Full output: (\S+?)\]/.exec(out.error);
		if (m) tmpfile = m[1];
	}
	if (c.checkFiles) {
		out.files = {};
		for (const name of c.checkFiles) out.files[name] = fs.readFileSync(path.join(cwd, name), "utf-8");
	}
	if (tmpfile) out.fullOutput = fs.statSync(tmpfile).size;
	process.chdir(os.tmpdir());
	fs.rmSync(tmp, { recursive: true, force: true });
	return normalize(out, cwd, tmpfile);
}

const { cases } = JSON.parse(fs.readFileSync(process.argv[2], "utf-8"));
const definitions = {};
for (const name of ["read", "bash", "edit", "write", "grep", "find", "ls"]) {
	const tool = tools.createTool(name, os.tmpdir());
	definitions[name] = { label: tool.label, description: tool.description, parameters: tool.parameters };
}
const results = [];
for (const c of cases) results.push(await run(c));
process.stdout.write(JSON.stringify({ version: "0.85.0", tools: definitions, results }, null, 1) + "\n");
