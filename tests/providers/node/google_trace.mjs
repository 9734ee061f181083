#!/usr/bin/env node
// Provider oracle for pi-ai 0.85.0's google-generative-ai API (@earendil-works/pi-ai with
// @google/genai 1.52.0), for tests/providers/test_google_generative_ai_conformance.py; also
// runs mistral-conversations and pi-messages (test_mistral_conversations_conformance.py,
// test_pi_messages_conformance.py), bedrock-converse-stream (@aws-sdk/client-bedrock-runtime
// 3.1048.0, test_bedrock_converse_stream_conformance.py) and openai-codex-responses
// (test_openai_codex_responses_conformance.py: over SSE, and over its WebSocket with
// `NODE_OPTIONS=--experimental-websocket` on Node 20).
//
// Usage: PITRIO_PI_NODE_MODULES=<node_modules holding @earendil-works/pi-ai> node google_trace.mjs FIXTURE.json
//
// The oracle's providers/trace.mjs (/work/shared/oracle/providers/PROVIDERS.md: fixture
// format, trace format, exit codes), with the google-generative-ai API added: a tiny HTTP
// server on 127.0.0.1 answers with the fixture's scripted response(s), pi-ai's real
// provider code (the lazy API wrapper, as pi-ai's registry calls it) runs
// `streamSimple(model, context, options)` against it, and the normalized trace is printed
// as a JSON array, one record per line. pi-ai is loaded from $PITRIO_PI_NODE_MODULES (the
// oracle's install: `/work/shared/oracle/coding-agent/pi --oracle-path`/node_modules).
//
// Exit codes: 0 ok; 2 bad fixture; 3 the fixture ran but misbehaved (trace so far printed).
//
// Two additions to the oracle's fixture format, for Bedrock (documented in
// tests/providers/data/bedrock/README.md): `options.env` (pi-ai's scoped environment:
// AWS_REGION, AWS_ACCESS_KEY_ID, ...), and body parts `{"awsEvent": TYPE, "data": JSON}` /
// `{"awsException": TYPE, "data": JSON}` that the server writes as one binary AWS
// event-stream message (`:message-type` event or exception, JSON payload, CRC32s).
// Also azure-openai-responses and google-vertex (for
// tests/providers/test_azure_openai_responses_conformance.py and
// tests/providers/test_google_vertex_conformance.py), with three additions to the fixture
// format: `options.env` (pi-ai's scoped environment: AZURE_OPENAI_BASE_URL,
// GOOGLE_CLOUD_PROJECT, ...), `files` ({name: JSON} written to a temporary folder, e.g. an
// ADC credentials file), and the placeholders `{baseUrl}` (the scripted server) and
// `{files}` (that folder) in env values and file contents. Google's OAuth token endpoint
// (https://oauth2.googleapis.com/token, which google-auth-library fixes for both
// authorized_user and service_account credentials) is answered by the scripted server too.

import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import zlib from "node:zlib";

const NM = process.env.PITRIO_PI_NODE_MODULES;
if (!NM) {
	process.stderr.write("set PITRIO_PI_NODE_MODULES to a node_modules holding @earendil-works/pi-ai\n");
	process.exit(2);
}
const piAi = (rel) => import(pathToFileURL(path.join(NM, "@earendil-works/pi-ai/dist", rel)).href);
const { EventStream } = await piAi("index.js");
const { anthropicMessagesApi } = await piAi("api/anthropic-messages.lazy.js");
const { openAICompletionsApi } = await piAi("api/openai-completions.lazy.js");
const { openAIResponsesApi } = await piAi("api/openai-responses.lazy.js");
const { googleGenerativeAIApi } = await piAi("api/google-generative-ai.lazy.js");
const { mistralConversationsApi } = await piAi("api/mistral-conversations.lazy.js");
const { piMessagesApi } = await piAi("api/pi-messages.lazy.js");
const { bedrockConverseStreamApi } = await piAi("api/bedrock-converse-stream.lazy.js");
const { openAICodexResponsesApi } = await piAi("api/openai-codex-responses.lazy.js");
const { azureOpenAIResponsesApi } = await piAi("api/azure-openai-responses.lazy.js");
const { googleVertexApi } = await piAi("api/google-vertex.lazy.js");
// The gaxios that google-auth-library requires (one CommonJS instance per file).
const { Gaxios } = createRequire(path.join(NM, "index.js"))("gaxios");
const GOOGLE_OAUTH = "https://oauth2.googleapis.com/";

// ---------------------------------------------------------------------------
// Errors and small helpers

class FixtureError extends Error {} // bad fixture -> exit 2
class RunProblem extends Error {} // fixture misbehaved -> exit 3

function bad(path, msg) {
	throw new FixtureError(`${path}: ${msg}`);
}

const isObj = (v) => typeof v === "object" && v !== null && !Array.isArray(v);
const clone = (v) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Every scripted delay is multiplied by PITRIO_ORACLE_TIME_SCALE (default 1); traces do not depend on it. */
const TIME_SCALE = (() => {
	const raw = process.env.PITRIO_ORACLE_TIME_SCALE;
	if (raw === undefined || raw === "") return 1;
	const n = Number(raw);
	if (!Number.isFinite(n) || n <= 0) {
		process.stderr.write(`provider-oracle: ignoring invalid PITRIO_ORACLE_TIME_SCALE=${raw}\n`);
		return 1;
	}
	return n;
})();
const scaled = (ms) => Math.round(ms * TIME_SCALE);

/** Canonical form: keys sorted ("type", "role" first, for reading); undefined-valued keys dropped. */
const LEADING_KEYS = ["type", "role"];
function keyOrder(a, b) {
	const ia = LEADING_KEYS.indexOf(a);
	const ib = LEADING_KEYS.indexOf(b);
	if (ia !== -1 || ib !== -1) return (ia === -1 ? 99 : ia) - (ib === -1 ? 99 : ib);
	return a < b ? -1 : a > b ? 1 : 0;
}
function canon(v) {
	if (Array.isArray(v)) return v.map((x) => (x === undefined ? null : canon(x)));
	if (!isObj(v)) return v;
	const out = {};
	for (const k of Object.keys(v)
		.filter((k) => v[k] !== undefined)
		.sort(keyOrder)) {
		out[k] = canon(v[k]);
	}
	return out;
}

// ---------------------------------------------------------------------------
// Fixture validation

const APIS = {
	"openai-completions": { impl: openAICompletionsApi, baseUrlPath: "/v1" },
	"anthropic-messages": { impl: anthropicMessagesApi, baseUrlPath: "" },
	"openai-responses": { impl: openAIResponsesApi, baseUrlPath: "/v1" },
	"google-generative-ai": { impl: googleGenerativeAIApi, baseUrlPath: "/v1beta" },
	"mistral-conversations": { impl: mistralConversationsApi, baseUrlPath: "" },
	"pi-messages": { impl: piMessagesApi, baseUrlPath: "/v1" },
	"bedrock-converse-stream": { impl: bedrockConverseStreamApi, baseUrlPath: "" },
	"openai-codex-responses": { impl: openAICodexResponsesApi, baseUrlPath: "/backend-api" },
	"azure-openai-responses": { impl: azureOpenAIResponsesApi, baseUrlPath: "/openai/v1" },
	"google-vertex": { impl: googleVertexApi, baseUrlPath: "/v1" },
};
const THINKING_LEVELS = ["off", "minimal", "low", "medium", "high", "xhigh", "max"];
const EVENT_TYPES = [
	"start",
	"text_start",
	"text_delta",
	"text_end",
	"thinking_start",
	"thinking_delta",
	"thinking_end",
	"toolcall_start",
	"toolcall_delta",
	"toolcall_end",
	"done",
	"error",
];

function checkKeys(obj, allowed, path) {
	if (!isObj(obj)) bad(path, "must be an object");
	for (const k of Object.keys(obj)) {
		if (!allowed.includes(k)) bad(`${path}.${k}`, `unknown key (allowed: ${allowed.join(", ")})`);
	}
}
function checkType(v, type, path) {
	const ok =
		type === "array"
			? Array.isArray(v)
			: type === "object"
				? isObj(v)
				: type === "integer"
					? Number.isInteger(v)
					: type === "nonneg-integer"
						? Number.isInteger(v) && v >= 0
						: type === "positive-integer"
							? Number.isInteger(v) && v > 0
							: typeof v === type;
	if (!ok) bad(path, `must be ${type === "integer" || type.endsWith("-integer") ? `a ${type}` : `of type ${type}`}`);
}
function optional(obj, key, type, path) {
	if (obj[key] !== undefined) checkType(obj[key], type, `${path}.${key}`);
}

function validateBlock(b, path, role) {
	if (!isObj(b)) bad(path, "must be an object");
	const types = role === "assistant" ? ["text", "thinking", "toolCall"] : role === "user" ? ["text", "image"] : ["text", "image"];
	if (!types.includes(b.type)) bad(`${path}.type`, `must be one of ${types.join(" | ")}`);
	if (b.type === "text") {
		checkKeys(b, ["type", "text", "textSignature"], path);
		checkType(b.text, "string", `${path}.text`);
		optional(b, "textSignature", "string", path);
	} else if (b.type === "image") {
		checkKeys(b, ["type", "data", "mimeType"], path);
		checkType(b.data, "string", `${path}.data`);
		checkType(b.mimeType, "string", `${path}.mimeType`);
	} else if (b.type === "thinking") {
		checkKeys(b, ["type", "thinking", "thinkingSignature", "redacted"], path);
		checkType(b.thinking, "string", `${path}.thinking`);
		optional(b, "thinkingSignature", "string", path);
		optional(b, "redacted", "boolean", path);
	} else {
		checkKeys(b, ["type", "id", "name", "arguments", "thoughtSignature"], path);
		checkType(b.id, "string", `${path}.id`);
		checkType(b.name, "string", `${path}.name`);
		checkType(b.arguments, "object", `${path}.arguments`);
		optional(b, "thoughtSignature", "string", path);
	}
}

function validateMessage(m, path) {
	if (!isObj(m)) bad(path, "must be an object");
	if (m.role === "user") {
		checkKeys(m, ["role", "text", "content", "timestamp"], path);
		if ((m.text === undefined) === (m.content === undefined)) bad(path, "needs exactly one of text, content");
		optional(m, "text", "string", path);
		if (m.content !== undefined && typeof m.content !== "string") {
			checkType(m.content, "array", `${path}.content`);
			m.content.forEach((b, i) => validateBlock(b, `${path}.content[${i}]`, "user"));
		}
	} else if (m.role === "assistant") {
		checkKeys(
			m,
			["role", "text", "content", "stopReason", "errorMessage", "usage", "api", "provider", "model", "timestamp"],
			path,
		);
		if ((m.text === undefined) === (m.content === undefined)) bad(path, "needs exactly one of text, content");
		optional(m, "text", "string", path);
		if (m.content !== undefined) {
			checkType(m.content, "array", `${path}.content`);
			m.content.forEach((b, i) => validateBlock(b, `${path}.content[${i}]`, "assistant"));
		}
		if (m.stopReason !== undefined && !["stop", "length", "toolUse", "error", "aborted"].includes(m.stopReason)) {
			bad(`${path}.stopReason`, "must be one of stop | length | toolUse | error | aborted");
		}
		for (const k of ["errorMessage", "api", "provider", "model"]) optional(m, k, "string", path);
		optional(m, "usage", "object", path);
	} else if (m.role === "toolResult") {
		checkKeys(m, ["role", "toolCallId", "toolName", "text", "content", "isError", "addedToolNames", "timestamp"], path);
		checkType(m.toolCallId, "string", `${path}.toolCallId`);
		checkType(m.toolName, "string", `${path}.toolName`);
		if ((m.text === undefined) === (m.content === undefined)) bad(path, "needs exactly one of text, content");
		optional(m, "text", "string", path);
		if (m.content !== undefined) {
			checkType(m.content, "array", `${path}.content`);
			m.content.forEach((b, i) => validateBlock(b, `${path}.content[${i}]`, "toolResult"));
		}
		optional(m, "isError", "boolean", path);
		optional(m, "addedToolNames", "array", path);
	} else {
		bad(`${path}.role`, "must be one of user | assistant | toolResult");
	}
	optional(m, "timestamp", "nonneg-integer", path);
}

function validatePart(p, path) {
	if (typeof p === "string") return;
	if (!isObj(p)) bad(path, "must be a string or an object");
	checkKeys(p, ["text", "hex", "data", "event", "awsEvent", "awsException", "delayMs", "split", "note"], path);
	const aws = ["awsEvent", "awsException"].filter((k) => p[k] !== undefined);
	if (aws.length > 1 || (aws.length === 1 && (p.data === undefined || p.event !== undefined))) {
		bad(path, "awsEvent and awsException are exclusive, need data and exclude event");
	}
	for (const k of aws) checkType(p[k], "string", `${path}.${k}`);
	const forms = ["text", "hex", "data"].filter((k) => p[k] !== undefined);
	if (forms.length !== 1) bad(path, "needs exactly one of text, hex, data");
	optional(p, "text", "string", path);
	if (p.hex !== undefined) {
		checkType(p.hex, "string", `${path}.hex`);
		const h = p.hex.replace(/\s+/g, "");
		if (!/^([0-9a-fA-F]{2})*$/.test(h)) bad(`${path}.hex`, "must be pairs of hex digits (whitespace allowed)");
	}
	if (p.event !== undefined) {
		if (p.data === undefined) bad(`${path}.event`, "only allowed together with data");
		checkType(p.event, "string", `${path}.event`);
	}
	optional(p, "delayMs", "nonneg-integer", path);
	optional(p, "split", "positive-integer", path);
	optional(p, "note", "string", path);
}

function validateResponse(r, path) {
	checkKeys(r, ["status", "headers", "headersDelayMs", "body", "json", "hangAfter", "end", "note"], path);
	optional(r, "status", "integer", path);
	if (r.status !== undefined && (r.status < 100 || r.status > 599)) bad(`${path}.status`, "must be 100..599");
	if (r.headers !== undefined) {
		checkType(r.headers, "object", `${path}.headers`);
		for (const [k, v] of Object.entries(r.headers)) checkType(v, "string", `${path}.headers.${k}`);
	}
	optional(r, "headersDelayMs", "nonneg-integer", path);
	if (r.body !== undefined && r.json !== undefined) bad(path, "body and json are exclusive");
	if (r.body !== undefined) {
		checkType(r.body, "array", `${path}.body`);
		r.body.forEach((p, i) => validatePart(p, `${path}.body[${i}]`));
	}
	const nParts = r.body ? r.body.length : r.json !== undefined ? 1 : 0;
	if (r.hangAfter !== undefined) {
		checkType(r.hangAfter, "nonneg-integer", `${path}.hangAfter`);
		if (r.hangAfter > nParts) bad(`${path}.hangAfter`, `must be <= the number of body parts (${nParts})`);
	}
	if (r.end !== undefined && !["close", "reset"].includes(r.end)) bad(`${path}.end`, "must be one of close | reset");
	if (r.end !== undefined && r.hangAfter !== undefined) bad(path, "end and hangAfter are exclusive");
	optional(r, "note", "string", path);
}

function validateFixture(f) {
	checkKeys(
		f,
		[
			"name",
			"description",
			"api",
			"model",
			"apiKey",
			"context",
			"options",
			"responses",
			"abort",
			"timeoutMs",
			"errorMessagePattern",
			"files",
		],
		"fixture",
	);
	optional(f, "files", "object", "fixture");
	for (const name of Object.keys(f.files ?? {})) {
		if (!/^[A-Za-z0-9_.-]+$/.test(name) || name.startsWith(".")) bad(`fixture.files.${name}`, "must be a plain file name");
	}
	optional(f, "name", "string", "fixture");
	optional(f, "description", "string", "fixture");
	if (!Object.hasOwn(APIS, f.api)) bad("fixture.api", `must be one of ${Object.keys(APIS).join(" | ")}`);

	const m = f.model ?? {};
	checkKeys(
		m,
		[
			"id",
			"name",
			"provider",
			"baseUrlPath",
			"reasoning",
			"input",
			"cost",
			"contextWindow",
			"maxTokens",
			"headers",
			"compat",
			"thinkingLevelMap",
		],
		"fixture.model",
	);
	optional(m, "id", "string", "fixture.model");
	optional(m, "name", "string", "fixture.model");
	optional(m, "provider", "string", "fixture.model");
	optional(m, "baseUrlPath", "string", "fixture.model");
	optional(m, "reasoning", "boolean", "fixture.model");
	if (m.input !== undefined) {
		checkType(m.input, "array", "fixture.model.input");
		for (const x of m.input) if (x !== "text" && x !== "image") bad("fixture.model.input", 'entries must be "text" or "image"');
	}
	if (m.cost !== undefined) {
		checkKeys(m.cost, ["input", "output", "cacheRead", "cacheWrite", "tiers"], "fixture.model.cost");
		for (const k of ["input", "output", "cacheRead", "cacheWrite"]) optional(m.cost, k, "number", "fixture.model.cost");
		optional(m.cost, "tiers", "array", "fixture.model.cost");
	}
	optional(m, "contextWindow", "nonneg-integer", "fixture.model");
	optional(m, "maxTokens", "positive-integer", "fixture.model");
	optional(m, "headers", "object", "fixture.model");
	optional(m, "compat", "object", "fixture.model");
	optional(m, "thinkingLevelMap", "object", "fixture.model");

	if (f.apiKey !== undefined && f.apiKey !== null && typeof f.apiKey !== "string") {
		bad("fixture.apiKey", "must be a string or null");
	}

	const c = f.context ?? {};
	checkKeys(c, ["systemPrompt", "messages", "tools"], "fixture.context");
	optional(c, "systemPrompt", "string", "fixture.context");
	if (c.messages !== undefined) {
		checkType(c.messages, "array", "fixture.context.messages");
		c.messages.forEach((msg, i) => validateMessage(msg, `fixture.context.messages[${i}]`));
	}
	if (c.tools !== undefined) {
		checkType(c.tools, "array", "fixture.context.tools");
		c.tools.forEach((t, i) => {
			const p = `fixture.context.tools[${i}]`;
			checkKeys(t, ["name", "description", "parameters", "constrainedSampling"], p);
			checkType(t.name, "string", `${p}.name`);
			checkType(t.description, "string", `${p}.description`);
			checkType(t.parameters, "object", `${p}.parameters`);
			optional(t, "constrainedSampling", "object", p);
		});
	}

	const o = f.options ?? {};
	checkKeys(
		o,
		[
			"reasoning",
			"maxTokens",
			"temperature",
			"toolChoice",
			"sessionId",
			"cacheRetention",
			"headers",
			"maxRetries",
			"maxRetryDelayMs",
			"timeoutMs",
			"metadata",
			"thinkingBudgets",
			"env",
			"transport",
		],
		"fixture.options",
	);
	if (o.reasoning !== undefined && !THINKING_LEVELS.includes(o.reasoning)) {
		bad("fixture.options.reasoning", `must be one of ${THINKING_LEVELS.join(" | ")}`);
	}
	optional(o, "maxTokens", "positive-integer", "fixture.options");
	optional(o, "temperature", "number", "fixture.options");
	if (o.toolChoice !== undefined && typeof o.toolChoice !== "string" && !isObj(o.toolChoice)) {
		bad("fixture.options.toolChoice", "must be a string or an object");
	}
	optional(o, "sessionId", "string", "fixture.options");
	if (o.cacheRetention !== undefined && !["none", "short", "long"].includes(o.cacheRetention)) {
		bad("fixture.options.cacheRetention", "must be one of none | short | long");
	}
	optional(o, "headers", "object", "fixture.options");
	optional(o, "maxRetries", "nonneg-integer", "fixture.options");
	optional(o, "maxRetryDelayMs", "nonneg-integer", "fixture.options");
	optional(o, "timeoutMs", "positive-integer", "fixture.options");
	optional(o, "metadata", "object", "fixture.options");
	optional(o, "thinkingBudgets", "object", "fixture.options");
	if (o.env !== undefined) {
		checkType(o.env, "object", "fixture.options.env");
		for (const [k, v] of Object.entries(o.env)) checkType(v, "string", `fixture.options.env.${k}`);
	}
	optional(o, "transport", "string", "fixture.options");

	if (f.responses === undefined) bad("fixture.responses", "required (use [] when no request is expected)");
	checkType(f.responses, "array", "fixture.responses");
	f.responses.forEach((r, i) => validateResponse(r, `fixture.responses[${i}]`));

	if (f.abort !== undefined) {
		const a = f.abort;
		checkKeys(a, ["event", "nth", "request", "delayMs"], "fixture.abort");
		if ((a.request === undefined) === (a.event === undefined && a.nth === undefined)) {
			bad("fixture.abort", "needs either request, or event/nth");
		}
		if (a.request !== undefined) checkType(a.request, "positive-integer", "fixture.abort.request");
		if (a.event !== undefined && a.event !== "any" && !EVENT_TYPES.includes(a.event)) {
			bad("fixture.abort.event", `must be "any" or one of ${EVENT_TYPES.join(" | ")}`);
		}
		optional(a, "nth", "positive-integer", "fixture.abort");
		optional(a, "delayMs", "nonneg-integer", "fixture.abort");
	}
	optional(f, "timeoutMs", "positive-integer", "fixture");
	if (f.errorMessagePattern !== undefined) {
		checkType(f.errorMessagePattern, "string", "fixture.errorMessagePattern");
		try {
			new RegExp(f.errorMessagePattern);
		} catch (e) {
			bad("fixture.errorMessagePattern", `not a valid regular expression: ${e.message}`);
		}
	}
}

// ---------------------------------------------------------------------------
// Building the runtime objects

const ZERO_USAGE = {
	input: 0,
	output: 0,
	cacheRead: 0,
	cacheWrite: 0,
	totalTokens: 0,
	cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 },
};

function buildModel(f, port) {
	const m = f.model ?? {};
	const api = f.api;
	const id = m.id ?? "test-model";
	const model = {
		id,
		name: m.name ?? id,
		api,
		provider: m.provider ?? "test",
		baseUrl: `http://127.0.0.1:${port}${m.baseUrlPath ?? APIS[api].baseUrlPath}`,
		reasoning: m.reasoning ?? false,
		input: m.input ?? ["text"],
		cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, ...(m.cost ?? {}) },
		contextWindow: m.contextWindow ?? 128000,
		maxTokens: m.maxTokens ?? 4096,
	};
	if (m.headers !== undefined) model.headers = clone(m.headers);
	if (m.compat !== undefined) model.compat = clone(m.compat);
	if (m.thinkingLevelMap !== undefined) model.thinkingLevelMap = clone(m.thinkingLevelMap);
	return model;
}

function buildMessage(spec, model) {
	const timestamp = spec.timestamp ?? 0;
	if (spec.role === "user") {
		return { role: "user", content: spec.text !== undefined ? spec.text : clone(spec.content), timestamp };
	}
	if (spec.role === "assistant") {
		const content = spec.text !== undefined ? [{ type: "text", text: spec.text }] : clone(spec.content);
		const msg = {
			role: "assistant",
			content,
			api: spec.api ?? model.api,
			provider: spec.provider ?? model.provider,
			model: spec.model ?? model.id,
			usage: {
				...clone(ZERO_USAGE),
				...clone(spec.usage ?? {}),
				cost: { ...ZERO_USAGE.cost, ...(spec.usage?.cost ?? {}) },
			},
			stopReason: spec.stopReason ?? (content.some((b) => b.type === "toolCall") ? "toolUse" : "stop"),
			timestamp,
		};
		if (spec.errorMessage !== undefined) msg.errorMessage = spec.errorMessage;
		return msg;
	}
	const msg = {
		role: "toolResult",
		toolCallId: spec.toolCallId,
		toolName: spec.toolName,
		content: spec.text !== undefined ? [{ type: "text", text: spec.text }] : clone(spec.content),
		isError: spec.isError ?? false,
		timestamp,
	};
	if (spec.addedToolNames !== undefined) msg.addedToolNames = clone(spec.addedToolNames);
	return msg;
}

function buildContext(f, model) {
	const c = f.context ?? {};
	const ctx = { messages: (c.messages ?? []).map((m) => buildMessage(m, model)) };
	if (c.systemPrompt !== undefined) ctx.systemPrompt = c.systemPrompt;
	if (c.tools !== undefined) ctx.tools = clone(c.tools);
	return ctx;
}

/** One binary AWS event-stream message: prelude (lengths, CRC32), string headers, payload, CRC32. */
function eventStreamMessage(headers, payload) {
	const encoded = Object.entries(headers).map(([name, value]) => {
		const n = Buffer.from(name, "utf8");
		const v = Buffer.from(value, "utf8");
		const h = Buffer.alloc(4 + n.length + v.length);
		h.writeUInt8(n.length, 0);
		n.copy(h, 1);
		h.writeUInt8(7, 1 + n.length); // value type 7: string
		h.writeUInt16BE(v.length, 2 + n.length);
		v.copy(h, 4 + n.length);
		return h;
	});
	const head = Buffer.concat(encoded);
	const prelude = Buffer.alloc(12);
	prelude.writeUInt32BE(16 + head.length + payload.length, 0);
	prelude.writeUInt32BE(head.length, 4);
	prelude.writeUInt32BE(zlib.crc32(prelude.subarray(0, 8)), 8);
	const message = Buffer.concat([prelude, head, payload, Buffer.alloc(4)]);
	message.writeUInt32BE(zlib.crc32(message.subarray(0, message.length - 4)), message.length - 4);
	return message;
}

function partBytes(p) {
	if (typeof p === "string") return Buffer.from(p, "utf8");
	if (p.awsEvent !== undefined || p.awsException !== undefined) {
		const kind = p.awsEvent !== undefined ? "event" : "exception";
		const headers = {
			[`:${kind}-type`]: p.awsEvent ?? p.awsException,
			":content-type": "application/json",
			":message-type": kind,
		};
		return eventStreamMessage(headers, Buffer.from(JSON.stringify(p.data), "utf8"));
	}
	if (p.text !== undefined) return Buffer.from(p.text, "utf8");
	if (p.hex !== undefined) return Buffer.from(p.hex.replace(/\s+/g, ""), "hex");
	const ev = p.event !== undefined ? `event: ${p.event}\n` : "";
	return Buffer.from(`${ev}data: ${JSON.stringify(p.data)}\n\n`, "utf8");
}

function responseParts(r) {
	if (r.json !== undefined) return [JSON.stringify(r.json)];
	return r.body ?? [];
}

function responseHeaders(r) {
	const status = r.status ?? 200;
	const headers = {};
	const given = r.headers ?? {};
	const hasContentType = Object.keys(given).some((k) => k.toLowerCase() === "content-type");
	if (!hasContentType) {
		const eventStream = (r.body ?? []).some((p) => isObj(p) && (p.awsEvent !== undefined || p.awsException !== undefined));
		headers["content-type"] =
			r.json !== undefined || status >= 300
				? "application/json"
				: eventStream
					? "application/vnd.amazon.eventstream"
					: "text/event-stream";
	}
	return { status, headers: { ...headers, ...given } };
}

// ---------------------------------------------------------------------------
// Normalization into trace form

const BLOCK_SCRATCH_KEYS = ["partialArgs", "partialJson", "streamIndex", "customInput", "index"];
const MESSAGE_DROPPED_KEYS = ["timestamp", "responseId"];

function normBlock(b) {
	const out = clone(b);
	if (!isObj(out)) return out;
	for (const k of BLOCK_SCRATCH_KEYS) delete out[k];
	return out;
}

function normMessage(m) {
	if (!isObj(m)) return clone(m);
	const out = clone(m);
	for (const k of MESSAGE_DROPPED_KEYS) delete out[k];
	if (Array.isArray(out.content)) out.content = out.content.map(normBlock);
	if (Array.isArray(out.diagnostics)) {
		for (const d of out.diagnostics) if (isObj(d)) delete d.timestamp;
	}
	return out;
}

function normEvent(ev) {
	const out = {};
	for (const [k, v] of Object.entries(ev)) {
		if (v === undefined) continue;
		if (k === "partial" || k === "message" || k === "error") out[k] = normMessage(v);
		else if (k === "toolCall") out[k] = normBlock(v);
		else out[k] = clone(v);
	}
	return out;
}

// The SDKs log some failures with console.error (e.g. the OpenAI SDK's "Could not parse message
// into JSON"). Keep that out of stderr unless the run misbehaves (it is printed then).
const consoleLines = [];
for (const level of ["log", "info", "warn", "error", "debug"]) {
	console[level] = (...args) => {
		consoleLines.push(`console.${level}: ${args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" ")}`);
	};
}

// Snapshot every AssistantMessageEvent at the moment the provider pushes it (the partial
// message is one mutable object that the provider keeps changing; a consumer that lags behind
// would otherwise see later states). The lazy wrapper re-pushes the same event objects into
// its outer stream; the first snapshot (the provider's own push) wins.
const snapshots = new WeakMap();
const originalPush = EventStream.prototype.push;
EventStream.prototype.push = function (event) {
	if (!this.done && isObj(event) && !snapshots.has(event)) snapshots.set(event, normEvent(event));
	return originalPush.call(this, event);
};

const HEADER_DENYLIST = new Set([
	"host",
	"connection",
	"content-length",
	"accept-encoding",
	"accept-language",
	"sec-fetch-mode",
	"transfer-encoding",
	"keep-alive",
]);

function normHeaders(rawHeaders) {
	const out = {};
	for (const [name, value] of Object.entries(rawHeaders)) {
		const k = name.toLowerCase();
		if (HEADER_DENYLIST.has(k) || k.startsWith("x-stainless-")) continue;
		let v = Array.isArray(value) ? value.join(", ") : String(value);
		if (k === "user-agent" && /^pi \(.*\)$/.test(v)) v = "pi (<platform>)";
		out[k] = v;
	}
	return out;
}

// ---------------------------------------------------------------------------
// The run

async function runFixture(f, trace, problems) {
	const responses = f.responses;
	const controller = new AbortController();
	const abortSpec = f.abort;
	let abortFired = false;
	let requestCount = 0;
	const openResponses = new Set();

	const fireAbort = () => {
		if (abortFired) return;
		abortFired = true;
		const doIt = () => {
			trace.push({ type: "abort", trigger: clone(abortSpec) });
			controller.abort();
		};
		if (abortSpec.delayMs) setTimeout(doIt, scaled(abortSpec.delayMs));
		else doIt();
	};

	const serve = async (req, res, bodyBuf) => {
		const n = ++requestCount;
		const text = bodyBuf.toString("utf8");
		let body;
		let bodyText;
		try {
			body = text.length ? JSON.parse(text) : undefined;
		} catch {
			bodyText = text;
		}
		trace.push({ type: "request", n, method: req.method, path: req.url, headers: normHeaders(req.headers), body, bodyText });
		if (abortSpec?.request === n) fireAbort();

		let closed = false;
		res.on("close", () => {
			closed = true;
			openResponses.delete(res);
		});
		openResponses.add(res);
		const spec = responses[n - 1];
		if (!spec) {
			problems.push(new RunProblem(`request ${n} arrived but only ${responses.length} response(s) are scripted`));
			res.writeHead(500, { "content-type": "application/json" });
			res.end(JSON.stringify({ error: { message: "provider-oracle: unscripted request" } }));
			return;
		}
		if (spec.headersDelayMs) await sleep(scaled(spec.headersDelayMs));
		if (closed) return;
		const { status, headers } = responseHeaders(spec);
		res.writeHead(status, headers);
		res.flushHeaders();
		const parts = responseParts(spec);
		for (let i = 0; i < parts.length; i++) {
			if (spec.hangAfter === i) return; // keep the connection open, send nothing more
			const p = parts[i];
			if (isObj(p) && p.delayMs) await sleep(scaled(p.delayMs));
			if (closed) return;
			const bytes = partBytes(p);
			const split = isObj(p) && p.split ? p.split : bytes.length || 1;
			for (let off = 0; off < bytes.length; off += split) {
				if (off > 0) await sleep(scaled(2));
				if (closed) return;
				res.write(bytes.subarray(off, off + split));
			}
		}
		if (spec.hangAfter === parts.length) return;
		if (spec.end === "reset") {
			await sleep(scaled(5));
			res.socket?.destroy();
			return;
		}
		res.end();
	};

	// google-auth-library sends its token requests to Google's fixed token URL (through
	// gaxios): they go to the scripted server instead.
	const realAdapter = Gaxios.prototype._defaultAdapter;
	Gaxios.prototype._defaultAdapter = function (config) {
		const url = String(config.url);
		if (url.startsWith(GOOGLE_OAUTH)) {
			config = { ...config, url: new URL(`http://127.0.0.1:${server.address().port}/${url.slice(GOOGLE_OAUTH.length)}`) };
		}
		return realAdapter.call(this, config);
	};
	const server = http.createServer((req, res) => {
		const chunks = [];
		req.on("data", (c) => chunks.push(c));
		req.on("end", () => {
			serve(req, res, Buffer.concat(chunks)).catch((e) => problems.push(new RunProblem(`server: ${e?.stack ?? e}`)));
		});
	});
	server.on("clientError", () => {});
	// A WebSocket upgrade (openai-codex-responses; Node 20 needs --experimental-websocket)
	// is request n too, recorded as {type: "websocket", path, headers, message}: a scripted
	// status other than 101 refuses the handshake; otherwise, once the client's first
	// message arrived, each body part is one text message (a data part as its JSON).
	const sockets = new Set();
	server.on("upgrade", (req, socket) => {
		sockets.add(socket);
		socket.on("close", () => sockets.delete(socket));
		socket.on("error", () => {});
		serveWebSocket(req, socket).catch((e) => problems.push(new RunProblem(`websocket: ${e?.stack ?? e}`)));
	});
	const serveWebSocket = async (req, socket) => {
		const n = ++requestCount;
		const record = { type: "websocket", n, path: req.url, headers: normHeaders(req.headers) };
		trace.push(record);
		if (abortSpec?.request === n) fireAbort();
		const spec = responses[n - 1];
		if (!spec) {
			problems.push(new RunProblem(`request ${n} arrived but only ${responses.length} response(s) are scripted`));
			socket.destroy();
			return;
		}
		if (spec.headersDelayMs) await sleep(scaled(spec.headersDelayMs));
		const status = spec.status ?? 101;
		if (status !== 101) {
			socket.end(`HTTP/1.1 ${status} Refused\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`);
			return;
		}
		const accept = createHash("sha1")
			.update(`${req.headers["sec-websocket-key"]}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
			.digest("base64");
		socket.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: ${accept}\r\n\r\n`);
		const frame = (opcode, payload) => {
			const len = payload.length;
			const head = len < 126 ? Buffer.from([0x80 | opcode, len]) : len < 65536 ? Buffer.from([0x80 | opcode, 126, len >> 8, len & 255]) : Buffer.concat([Buffer.from([0x80 | opcode, 127]), (() => { const b = Buffer.alloc(8); b.writeBigUInt64BE(BigInt(len)); return b; })()]);
			if (!socket.destroyed) socket.write(Buffer.concat([head, payload]));
		};
		await new Promise((resolve) => {
			let buffer = Buffer.alloc(0);
			socket.on("data", (chunk) => {
				buffer = Buffer.concat([buffer, chunk]);
				while (buffer.length >= 2) {
					const opcode = buffer[0] & 15;
					let len = buffer[1] & 127;
					let off = 2;
					if (len === 126) {
						if (buffer.length < 4) return;
						len = buffer.readUInt16BE(2);
						off = 4;
					} else if (len === 127) {
						if (buffer.length < 10) return;
						len = Number(buffer.readBigUInt64BE(2));
						off = 10;
					}
					const masked = (buffer[1] & 128) !== 0;
					const total = off + (masked ? 4 : 0) + len;
					if (buffer.length < total) return;
					const mask = masked ? buffer.subarray(off, off + 4) : null;
					const payload = Buffer.from(buffer.subarray(total - len, total));
					if (mask) for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i % 4];
					buffer = buffer.subarray(total);
					if (opcode === 1 && record.message === undefined) {
						const text = payload.toString("utf8");
						try {
							record.message = JSON.parse(text);
						} catch {
							record.messageText = text;
						}
						resolve();
					} else if (opcode === 8) {
						frame(8, payload.subarray(0, 2));
						socket.end();
						resolve();
					}
				}
			});
		});
		const parts = responseParts(spec);
		for (let i = 0; i < parts.length; i++) {
			if (spec.hangAfter === i) return;
			const p = parts[i];
			if (isObj(p) && p.delayMs) await sleep(scaled(p.delayMs));
			if (socket.destroyed) return;
			const text = typeof p === "string" ? p : p.text ?? (p.hex !== undefined ? Buffer.from(p.hex, "hex").toString("utf8") : JSON.stringify(p.data));
			frame(1, Buffer.from(text, "utf8"));
		}
		if (spec.hangAfter === parts.length) return;
		if (spec.end === "reset") {
			await sleep(scaled(5));
			socket.destroy();
		}
	};
	await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
	const port = server.address().port;

	const filesDir = mkdtempSync(path.join(os.tmpdir(), "pi-fixture-"));
	const fill = (v) =>
		typeof v === "string"
			? v.replaceAll("{baseUrl}", `http://127.0.0.1:${port}`).replaceAll("{files}", filesDir)
			: Array.isArray(v)
				? v.map(fill)
				: isObj(v)
					? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fill(x)]))
					: v;
	for (const [name, content] of Object.entries(f.files ?? {})) {
		writeFileSync(path.join(filesDir, name), JSON.stringify(fill(content)));
	}
	try {
		const model = buildModel(f, port);
		const context = buildContext(f, model);
		const options = { ...clone(f.options ?? {}), signal: controller.signal };
		if (options.env !== undefined) options.env = fill(options.env);
		const apiKey = f.apiKey === undefined ? "sk-test" : f.apiKey;
		if (apiKey !== null) options.apiKey = apiKey;

		const api = APIS[f.api].impl();
		const stream = api.streamSimple(model, context, options);

		let total = 0;
		const perType = new Map();
		let terminal;
		for await (const ev of stream) {
			const rec = snapshots.get(ev) ?? normEvent(ev);
			trace.push(rec);
			if (terminal) problems.push(new RunProblem(`event "${ev.type}" after the terminal event`));
			if (ev.type === "done" || ev.type === "error") terminal = ev;
			total++;
			perType.set(ev.type, (perType.get(ev.type) ?? 0) + 1);
			if (abortSpec && abortSpec.request === undefined && !abortFired) {
				const want = abortSpec.event ?? "any";
				const count = want === "any" ? total : ev.type === want ? perType.get(ev.type) : 0;
				if (count === (abortSpec.nth ?? 1) && (want === "any" || ev.type === want)) fireAbort();
			}
		}
		if (!terminal) problems.push(new RunProblem("the event stream ended without a done/error event"));
		const result = await stream.result();
		const terminalMessage = terminal ? (terminal.type === "done" ? terminal.message : terminal.error) : undefined;
		if (terminal && result !== terminalMessage) {
			problems.push(new RunProblem("stream.result() is not the terminal event's message"));
		}
		trace.push({ type: "result", message: normMessage(result) });
		if (f.errorMessagePattern !== undefined) {
			// Self-check: the pattern a player's errorMessage is compared with must match pi-ai's own text.
			const re = new RegExp(f.errorMessagePattern);
			if (typeof result?.errorMessage !== "string" || !re.test(result.errorMessage)) {
				problems.push(
					new RunProblem(`errorMessagePattern ${f.errorMessagePattern} does not match errorMessage ${JSON.stringify(result?.errorMessage)}`),
				);
			}
		}
	} finally {
		Gaxios.prototype._defaultAdapter = realAdapter;
		rmSync(filesDir, { recursive: true, force: true });
		for (const res of openResponses) res.socket?.destroy();
		for (const socket of sockets) socket.destroy();
		server.closeAllConnections?.();
		server.close();
	}

	if (requestCount < responses.length) {
		problems.push(
			new RunProblem(`${responses.length - requestCount} scripted response(s) never requested (${requestCount} request(s) made)`),
		);
	}
	if (abortSpec && !abortFired) problems.push(new RunProblem(`abort trigger never fired: ${JSON.stringify(abortSpec)}`));
}

// ---------------------------------------------------------------------------
// main

function printTrace(trace) {
	const lines = trace.map((r) => JSON.stringify(canon(r)));
	process.stdout.write(lines.length ? `[\n${lines.join(",\n")}\n]\n` : "[]\n");
}

async function main() {
	const file = process.argv[2];
	if (!file || process.argv.length > 3) {
		process.stderr.write("usage: run FIXTURE.json\n");
		process.exit(2);
	}
	let fixture;
	try {
		fixture = JSON.parse(readFileSync(file, "utf8"));
	} catch (e) {
		process.stderr.write(`provider-oracle: cannot read fixture ${file}: ${e.message}\n`);
		process.exit(2);
	}
	try {
		validateFixture(fixture);
	} catch (e) {
		if (e instanceof FixtureError) {
			process.stderr.write(`provider-oracle: bad fixture ${file}: ${e.message}\n`);
			process.exit(2);
		}
		throw e;
	}
	const limit = scaled(fixture.timeoutMs ?? 10000);
	const trace = [];
	const problems = [];
	process.on("unhandledRejection", (e) => {
		problems.push(new RunProblem(`unhandled rejection: ${e?.stack ?? e}`));
	});
	let timer;
	const timeout = new Promise((resolve) => {
		timer = setTimeout(() => {
			problems.push(new RunProblem(`fixture did not finish within ${limit} ms (trace so far printed)`));
			resolve();
		}, limit);
	});
	try {
		await Promise.race([runFixture(fixture, trace, problems), timeout]);
	} catch (e) {
		problems.push(e instanceof RunProblem ? e : new RunProblem(`oracle crashed: ${e?.stack ?? e}`));
	} finally {
		clearTimeout(timer);
	}
	printTrace(trace);
	if (problems.length > 0) {
		for (const p of problems) process.stderr.write(`provider-oracle: ${file}: ${p.message}\n`);
		for (const line of consoleLines) process.stderr.write(`provider-oracle: (runtime) ${line}\n`);
		process.stdout.write("", () => process.exit(3));
		return;
	}
	process.stdout.write("", () => process.exit(0));
}

main();
