// Pi's coding agent's own auth.json store (AuthStorage over proper-lockfile), driven from
// the command line for tests/providers/test_auth_pi.py:
//   node auth_store.mjs NODE_MODULES read PATH PROVIDER   print the stored credential
//   node auth_store.mjs NODE_MODULES hold PATH PROVIDER   modify(): print "holding", wait
//       for a line on stdin, store {"type": "api_key", "key": "from-pi"}, print "done"
import readline from "node:readline";

const [nodeModules, mode, path, provider] = process.argv.slice(2);
const { AuthStorage } = await import(
  `${nodeModules}/@earendil-works/pi-coding-agent/dist/core/auth-storage.js`
);
const storage = AuthStorage.create(path);
if (mode === "read") {
  console.log(JSON.stringify((await storage.read(provider)) ?? null));
} else if (mode === "hold") {
  const lines = readline.createInterface({ input: process.stdin });
  const next = new Promise((resolve) => lines.once("line", resolve));
  await storage.modify(provider, async () => {
    console.log("holding");
    await next;
    return { type: "api_key", key: "from-pi" };
  });
  lines.close();
  console.log("done");
} else {
  throw new Error(`unknown mode ${mode}`);
}
