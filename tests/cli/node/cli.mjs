// The `cliPath` of Pi's RpcClient: RpcClient runs `node cli.mjs --mode rpc ARGS...`;
// this runs the command in RPC_CLI_COMMAND (a JSON array, e.g. [python, "-m", "pitrio"]
// or the `pi` wrapper) with the same arguments, on the same stdin / stdout / stderr.
import { spawn } from "node:child_process";

const command = JSON.parse(process.env.RPC_CLI_COMMAND ?? "[]");
if (command.length === 0) {
	console.error("cli.mjs: set RPC_CLI_COMMAND to a JSON array, e.g. [\"python\", \"-m\", \"pitrio\"]");
	process.exit(2);
}
const child = spawn(command[0], [...command.slice(1), ...process.argv.slice(2)], { stdio: "inherit" });
for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"]) {
	process.on(signal, () => child.kill(signal));
}
child.on("exit", (code, signal) => {
	process.exit(code ?? (signal === "SIGTERM" ? 143 : 1));
});
child.on("error", (error) => {
	console.error(`cli.mjs: cannot run ${command[0]}: ${error.message}`);
	process.exit(127);
});
