// pi-ai 0.85.0's OAuth flows (auth/oauth/*.js) on scripted answers: `fetch` is replaced
// by one that records each request and answers with the scenario's next response, so
// the flows' real endpoints are never reached. For tests/providers/test_auth_conformance.py:
//   node auth_requests.mjs NODE_MODULES SCENARIOS.json   prints {name: {requests, events,
//   result | error}} as JSON
import { readFileSync } from "node:fs";

const [nodeModules, scenariosPath] = process.argv.slice(2);
const oauth = `${nodeModules}/@earendil-works/pi-ai/dist/auth/oauth`;
const flows = {
  anthropic: (await import(`${oauth}/anthropic.js`)).anthropicOAuth,
  "openai-codex": (await import(`${oauth}/openai-codex.js`)).openaiCodexOAuth,
  "github-copilot": (await import(`${oauth}/github-copilot.js`)).githubCopilotOAuth,
  xai: (await import(`${oauth}/xai.js`)).xaiOAuth,
  "kimi-coding": (await import(`${oauth}/kimi-coding.js`)).kimiCodingOAuth,
  radius: (await import(`${oauth}/radius.js`)).createRadiusOAuth({
    name: "Radius",
    gateway: "https://radius.pi.dev",
  }),
};
// Radius's catalog (providers/radius-config.js): "op": "config" fetches /v1/config with
// the scenario's key and gives the models as the provider registers them
const radiusConfig = await import(
  `${nodeModules}/@earendil-works/pi-ai/dist/providers/radius-config.js`
);
const REASONS = { 200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found" };
const KEPT = /^(content-type|accept|authorization|user-agent|editor-version|editor-plugin-version|copilot-integration-id|x-github-api-version|openai-intent|x-interaction-type)$/;

let queue = [];
let requests = [];
globalThis.fetch = async (input, init = {}) => {
  const url = typeof input === "string" ? input : input.href ?? String(input);
  const headers = {};
  for (const [name, value] of Object.entries(init.headers ?? {})) {
    if (KEPT.test(name.toLowerCase())) headers[name.toLowerCase()] = value;
  }
  let body = init.body === undefined ? null : String(init.body);
  const type = headers["content-type"] ?? "";
  if (body !== null && type.includes("json")) body = JSON.parse(body);
  else if (body !== null && type.includes("x-www-form-urlencoded"))
    body = Object.fromEntries(new URLSearchParams(body));
  if (body && typeof body === "object")
    for (const key of RANDOM) if (key in body) body[key] = "<random>";
  requests.push({ method: init.method ?? "GET", url, headers, body });
  const next = queue.shift();
  if (!next) throw new Error(`unexpected request ${url}`);
  return new Response(JSON.stringify(next.body), {
    status: next.status,
    statusText: REASONS[next.status] ?? "",
    headers: { "content-type": "application/json" },
  });
};

// `expires` is absolute (Copilot's comes from the answer's expires_at) or relative to
// now (the others'): both are given, and compared as fits.
// PKCE values are random: shown as "<random>" in URLs and bodies.
const RANDOM = ["state", "code_challenge", "code_verifier"];
function normalizeUrl(text) {
  const url = new URL(text);
  for (const key of RANDOM) if (url.searchParams.has(key)) url.searchParams.set(key, "<random>");
  return url.toString();
}

function summary(credential) {
  return { ...credential, expiresInSeconds: Math.round((credential.expires - Date.now()) / 1000) };
}

const out = {};
for (const scenario of JSON.parse(readFileSync(scenariosPath, "utf-8"))) {
  queue = [...scenario.responses];
  requests = [];
  const events = [];
  const answers = [...(scenario.answers ?? [])];
  const flow = flows[scenario.provider];
  const signal = AbortSignal.timeout(20_000);
  const record = { requests, events };
  try {
    if (scenario.op === "config") {
      const config = await radiusConfig.loadRadiusGatewayConfig(
        radiusConfig.DEFAULT_RADIUS_GATEWAY,
        scenario.key,
        signal,
      );
      record.result = radiusConfig.getRadiusModelsFromConfig("radius", config);
      out[scenario.name] = record;
      continue;
    }
    const credential =
      scenario.op === "refresh"
        ? await flow.refresh(scenario.credential, signal)
        : await flow.login({
            signal,
            // "PASTE-URL": the redirect URL a browser would show, with the login's state
            prompt: async (prompt) => {
              const answer = answers.shift();
              if (answer !== "PASTE-URL") return answer;
              const shown = events.findLast((event) => event.type === "auth_url");
              const state = new URL(shown.url).searchParams.get("state");
              return `${prompt.placeholder}?code=the-code&state=${state}`;
            },
            notify: (event) => events.push({ ...event }),
          });
    record.result = summary(credential);
  } catch (error) {
    // pi-ai's Anthropic texts end with the JavaScript stack (paths of this machine)
    record.error = (error instanceof Error ? error.message : String(error)).split("; stack=")[0];
  }
  for (const event of events) if (event.type === "auth_url") event.url = normalizeUrl(event.url);
  out[scenario.name] = record;
}
console.log(JSON.stringify(out, null, 1));
