// Runs Pi 0.85.0's own prompt-template and skill code on a generated file tree and on
// argument strings, and prints the results as JSON: tests/harness/test_resources.py
// checks pitrio against them.
//
// Regenerate the committed fixture (needs Node 20 and the packages of package.json,
// `npm ci` in this directory, or PI_NODE_MODULES pointing at a node_modules that has them):
//   node tests/harness/node/templates_pin.mjs > tests/harness/data/templates_pi.json
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const candidates = [
  process.env.PI_NODE_MODULES,
  join(here, "node_modules"),
  "/root/.cache/pitrio-oracle/node_modules",
].filter(Boolean);
const nodeModules = candidates.find((p) => existsSync(join(p, "@earendil-works/pi-agent-core")));
if (!nodeModules) throw new Error(`Pi's packages not found in ${candidates.join(", ")}`);
const harness = join(nodeModules, "@earendil-works/pi-agent-core/dist/harness");
const load = (p) => import(pathToFileURL(join(harness, p)).href);
const templates = await load("prompt-templates.js");
const skills = await load("skills.js");
const systemPrompt = await load("system-prompt.js");
const { NodeExecutionEnv } = await load("env/nodejs.js");

const argStrings = [
  "", "one", "one two  three", "\ta\tb ", "'quoted words' x", "\"double 'inner'\" y", "unterminated 'quote here",
  "a''b", "'' empty", "mixed\"quo\"ted", "$1 $@ literal", "ünïcode 🙂 args", "x $& y", "$$ $` $'",
];
const contents = [
  "Review $1 then $2.", "All: $@", "All: $ARGUMENTS", "From two: ${@:2}", "Two from one: ${@:1:2}", "Zero: ${@:0}",
  "Missing $9 and $0", "$10 vs $1 0", "Nested ${@:2:1} $@ $1", "Dollar $ alone, $$ double", "No placeholders",
  "${@:3:0} empty slice", "$ARGUMENTS$@$1",
];
const substitutions = [];
for (const argString of argStrings) {
  const args = templates.parseCommandArgs(argString);
  for (const content of contents) {
    substitutions.push({ argString, args, content, result: templates.substituteArgs(content, args) });
  }
}

// A file tree with templates and skills.
const tree = {
  "prompts/review.md": "---\ndescription: Review code\n---\nReview $1 carefully.\n",
  "prompts/fix.md": "Fix the bug described here: $@ and make it work without breaking anything else\n\nMore text.",
  "prompts/short.md": "\n\n  Short first line\nsecond",
  "prompts/Zeta.md": "zeta",
  "prompts/alpha.md": "alpha",
  "prompts/notes.txt": "not a template",
  "prompts/bad.md": "---\ndescription: [unclosed\n---\nbody",
  "prompts/crlf.md": "---\r\ndescription: Windows\r\n---\r\nline one\r\nline two\r\n",
  "prompts/nofm.md": "---\nno closing fence\n",
  "prompts/yes.md": "---\ndescription: yes\n---\nyes body",
  "prompts/sub/nested.md": "not loaded (not recursive)",
  "single.md": "---\ndescription: A single file\n---\nSingle $1",
  "skills/pdf-tools/SKILL.md": "---\nname: pdf-tools\ndescription: Work with PDF files & <forms>\n---\n# PDF\nUse scripts/extract.py",
  "skills/pdf-tools/nested/SKILL.md": "---\ndescription: never found (parent has SKILL.md)\n---\nx",
  "skills/Bad_Name/SKILL.md": "---\ndescription: Bad name skill\n---\nbody",
  "skills/mismatch/SKILL.md": "---\nname: other-name\ndescription: Name differs from dir\n---\nbody",
  "skills/nodesc/SKILL.md": "---\nname: nodesc\n---\nbody",
  "skills/hidden-skill/SKILL.md": "---\ndescription: Hidden from the model\ndisable-model-invocation: true\n---\nbody",
  "skills/group/inner-one/SKILL.md": "---\ndescription: Inner one\n---\none",
  "skills/group/inner-two/SKILL.md": "---\ndescription: Inner two\n---\ntwo",
  "skills/group/loose.md": "---\ndescription: not a root file\n---\nx",
  "skills/root-skill.md": "---\ndescription: A root markdown skill\n---\nroot",
  "skills/readme.md": "# no front matter: not a skill",
  "skills/.hidden/SKILL.md": "---\ndescription: in a hidden dir\n---\nx",
  "skills/node_modules/dep/SKILL.md": "---\ndescription: in node_modules\n---\nx",
  "skills/.gitignore": "ignored-skill/\n# comment\n/anchored-*\n*.draft.md\nsub*/**/private-*/\n\\#literal-hash\n",
  "skills/notes.draft.md": "---\ndescription: a draft, ignored by a glob\n---\nx",
  "skills/subgroup/x/private-one/SKILL.md": "---\ndescription: ignored by a ** glob\n---\nx",
  "skills/subgroup/x/public-one/SKILL.md": "---\ndescription: kept beside it\n---\nx",
  "skills/#literal-hash/SKILL.md": "---\ndescription: ignored by an escaped hash\n---\nx",
  "skills/deep/.fdignore": "/only-here\n",
  "skills/deep/only-here/SKILL.md": "---\ndescription: ignored by an anchored nested rule\n---\nx",
  "skills/only-here/SKILL.md": "---\ndescription: the nested rule does not reach here\n---\nx",
  "skills/ignored-skill/SKILL.md": "---\ndescription: ignored\n---\nx",
  "skills/anchored-one/SKILL.md": "---\ndescription: ignored by an anchored glob\n---\nx",
  "skills/deep/.ignore": "skip-me\n!keep-me\n",
  "skills/deep/skip-me/SKILL.md": "---\ndescription: ignored by a nested .ignore\n---\nx",
  "skills/deep/keep-me/SKILL.md": "---\ndescription: kept\n---\nx",
  "skills/long-desc/SKILL.md": `---\ndescription: ${"d".repeat(1030)}\n---\nx`,
  "skills/badyaml/SKILL.md": "---\ndescription: [oops\n---\nx",
  "skills/multi-line/SKILL.md": "---\ndescription: >\n  Folded\n  description\n---\nx",
  "skills/-edge--/SKILL.md": "---\ndescription: Hyphen rules\n---\nx",
};
const root = mkdtempSync(join(tmpdir(), "pi-templates-"));
for (const [path, content] of Object.entries(tree)) {
  mkdirSync(dirname(join(root, path)), { recursive: true });
  writeFileSync(join(root, path), content);
}
const env = new NodeExecutionEnv({ cwd: root });
const ctx = { abortSignal: undefined };
const norm = (value) => JSON.parse(JSON.stringify(value).split(root).join("<root>"));
const loadedTemplates = await templates.loadPromptTemplates(env, [join(root, "prompts"), join(root, "single.md"), join(root, "missing")], ctx);
const loadedSkills = await skills.loadSkills(env, [join(root, "skills"), join(root, "missing")], ctx);
const output = {
  generator: "tests/harness/node/templates_pin.mjs",
  pi: "0.85.0",
  substitutions,
  tree,
  templates: norm(loadedTemplates),
  skills: norm(loadedSkills),
  skillsPrompt: norm(systemPrompt.formatSkillsForSystemPrompt(loadedSkills.skills)),
  invocations: norm(loadedSkills.skills.slice(0, 2).map((s, i) => skills.formatSkillInvocation(s, i ? "extra words" : undefined))),
};
rmSync(root, { recursive: true, force: true });
process.stdout.write(JSON.stringify(output, null, 1) + "\n");
