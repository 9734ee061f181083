#!/usr/bin/env node
// SigV4 as the AWS SDK for JavaScript signs Bedrock requests (@smithy/signature-v4, the
// signer under @aws-sdk/client-bedrock-runtime 3.1048.0: service "bedrock", path escaped
// as the SDK does, the payload hashed), for tests/providers/test_bedrock_auth.py.
//
// Usage: PITRIO_PI_NODE_MODULES=<node_modules of the oracle> node bedrock_sign.mjs CASES.json
// CASES.json: [{"url", "headers", "body", "region", "date" (ISO), "credentials"}]; prints
// the same list with "signed" (every header the signer sets) added to each case.

import { createHash, createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.PITRIO_PI_NODE_MODULES, "noop.js"));
const { SignatureV4 } = require("@smithy/signature-v4");

class Sha256 {
	constructor(secret) {
		this.hash = secret ? createHmac("sha256", secret) : createHash("sha256");
	}
	update(data) {
		this.hash.update(typeof data === "string" ? Buffer.from(data, "utf8") : data);
	}
	async digest() {
		return new Uint8Array(this.hash.digest());
	}
}

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = [];
for (const c of cases) {
	const url = new URL(c.url);
	const signer = new SignatureV4({
		credentials: c.credentials,
		region: c.region,
		service: "bedrock",
		sha256: Sha256,
		uriEscapePath: true,
		applyChecksum: true,
	});
	const request = {
		method: "POST",
		protocol: url.protocol,
		hostname: url.hostname,
		port: url.port ? Number(url.port) : undefined,
		path: url.pathname, // as the SDK serializes it: the model id already URI-encoded
		headers: { ...c.headers, host: url.host },
		body: c.body,
		query: {},
	};
	const signed = await signer.sign(request, { signingDate: new Date(c.date) });
	out.push({ ...c, signed: signed.headers });
}
process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
