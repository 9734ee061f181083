"""Prompt templates, skills and context files, checked against Pi's own loaders.

``data/templates_pi.json`` holds what Pi 0.85.0's code (``node/templates_pin.mjs``)
computed for argument strings and for a file tree that the tests recreate here.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import attrs
import pytest

from pitrio.harness._resources import (
    ContextFile,
    PromptTemplate,
    Skill,
    expand_prompt_template,
    expand_skill_command,
    format_context_files,
    format_skill_invocation,
    format_skills_for_prompt,
    load_context_files,
    load_prompt_templates,
    load_skills,
    parse_command_args,
    parse_front_matter,
    substitute_args,
)

PINNED = Path(__file__).parent / "data" / "templates_pi.json"


@cache
def _pinned() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PINNED.read_text(encoding="utf-8"))
    return data


def _tree(root: Path) -> Path:
    for relative, content in _pinned()["tree"].items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode("utf-8"))
    return root


def _norm(value: Any, root: Path) -> Any:
    return json.loads(json.dumps(value).replace(str(root), "<root>"))


def test_argument_parsing_and_substitution_match_pi() -> None:
    cases = _pinned()["substitutions"]
    assert len(cases) > 150
    for case in cases:
        args = parse_command_args(case["argString"])
        assert args == case["args"], case["argString"]
        assert substitute_args(case["content"], args) == case["result"], case


async def test_templates_load_as_pi_loads_them(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    result = await load_prompt_templates([root / "prompts", root / "single.md", root / "missing"])
    expected = _pinned()["templates"]
    got = [
        {"name": t.name, "description": t.description, "content": t.content}
        for t in result.templates
    ]
    assert got == expected["promptTemplates"]
    assert [t.file_path for t in result.templates][-1] == str(root / "single.md")
    # Pi's YAML parser words its errors differently; the code and the file are the same.
    assert [(d.code, d.path) for d in _norm_diags(result.diagnostics, root)] == [
        (d["code"], d["path"]) for d in expected["diagnostics"]
    ]


def _diags(diagnostics: Any) -> list[Any]:
    return [attrs.asdict(d) for d in diagnostics]


class _D:
    def __init__(self, data: dict[str, Any]) -> None:
        self.code = data["code"]
        self.path = data["path"]
        self.message = data["message"]


def _norm_diags(diagnostics: Any, root: Path) -> list[_D]:
    return [_D(d) for d in _norm(_diags(diagnostics), root)]


async def test_skills_load_as_pi_loads_them(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    result = await load_skills([root / "skills", root / "missing"])
    expected = _pinned()["skills"]
    got = [
        {
            "name": s.name,
            "description": s.description,
            "content": s.content,
            "filePath": s.file_path,
            "disableModelInvocation": s.disable_model_invocation,
        }
        for s in result.skills
    ]
    assert _norm(got, root) == expected["skills"]
    diagnostics = _norm_diags(result.diagnostics, root)
    assert [(d.code, d.path) for d in diagnostics] == [
        (d["code"], d["path"]) for d in expected["diagnostics"]
    ]
    # Validation messages are Pi's exactly (parse errors come from a different parser).
    assert [d.message for d in diagnostics if d.code == "invalid_metadata"] == [
        d["message"] for d in expected["diagnostics"] if d["code"] == "invalid_metadata"
    ]
    prompt = format_skills_for_prompt(result.skills)
    assert _norm(prompt, root) == _pinned()["skillsPrompt"]
    invocations = [
        format_skill_invocation(s, "extra words" if i else None)
        for i, s in enumerate(result.skills[:2])
    ]
    assert _norm(invocations, root) == _pinned()["invocations"]


def test_front_matter_is_split_as_pi_splits_it() -> None:
    assert parse_front_matter("---\nname: x\nflag: yes\nwhen: 2024-01-01\n---\n\n body \n") == (
        {"name": "x", "flag": "yes", "when": "2024-01-01"},  # YAML 1.2, as Pi's parser
        "body",
    )
    assert parse_front_matter("no front matter\n") == ({}, "no front matter\n")
    assert parse_front_matter("---\n- a list\n---\nbody") == ({}, "body")
    assert parse_front_matter("---\nok: true\n---\nbody")[0] == {"ok": True}


def test_slash_commands_expand_templates() -> None:
    templates = [
        PromptTemplate(name="review", description="", content="Review $1 ($@), then ${@:2}."),
        PromptTemplate(name="plain", description="", content="No arguments."),
    ]
    assert (
        expand_prompt_template('/review src/app.py "the parser" fast', templates)
        == "Review src/app.py (src/app.py the parser fast), then the parser fast."
    )
    assert expand_prompt_template("/plain", templates) == "No arguments."
    assert expand_prompt_template("/unknown x", templates) == "/unknown x"
    assert expand_prompt_template("review x", templates) == "review x"
    # A `$&` in an argument is JavaScript replacement syntax in Pi: it stays Pi's result.
    assert substitute_args("[$@]", ["$&"]) == "[$@]"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


async def test_context_files_from_the_root_down_to_cwd(tmp_path: Path) -> None:
    project = tmp_path / "repo" / "pkg" / "sub"
    project.mkdir(parents=True)
    _write(tmp_path / "AGENTS.md", "top")
    _write(tmp_path / "repo" / "CLAUDE.md", "repo claude")
    _write(tmp_path / "repo" / "pkg" / "AGENTS.md", "pkg agents")
    _write(tmp_path / "repo" / "pkg" / "CLAUDE.md", "pkg claude (shadowed by AGENTS.md)")
    (project / "AGENTS.md").mkdir()  # a directory named like a context file is not one
    agent_dir = tmp_path / "home" / ".pi" / "agent"
    _write(agent_dir / "AGENTS.md", "global")

    files = await load_context_files(project, agent_dir=agent_dir)
    assert (files[0].path, files[0].content) == (str(agent_dir / "AGENTS.md"), "global")
    # (Directories above tmp_path are searched too; only the files made here are checked.)
    ours = [
        (Path(f.path).relative_to(tmp_path).as_posix(), f.content)
        for f in files[1:]
        if Path(f.path).is_relative_to(tmp_path)
    ]
    assert ours == [
        ("AGENTS.md", "top"),
        ("repo/CLAUDE.md", "repo claude"),
        ("repo/pkg/AGENTS.md", "pkg agents"),
    ]
    # The global file is not listed twice when cwd is the agent dir itself.
    again = await load_context_files(agent_dir, agent_dir=agent_dir)
    assert [f.path for f in again].count(str(agent_dir / "AGENTS.md")) == 1

    block = format_context_files([ContextFile("/p/AGENTS.md", "Use tabs.")])
    assert block == (
        "<project_context>\n\nProject-specific instructions and guidelines:\n\n"
        '<project_instructions path="/p/AGENTS.md">\nUse tabs.\n</project_instructions>\n\n'
        "</project_context>\n"
    )
    assert format_context_files([]) == ""


def test_skills_hidden_from_the_model_are_not_listed() -> None:
    hidden = Skill(
        name="x",
        description="d",
        content="",
        file_path="/s/x/SKILL.md",
        disable_model_invocation=True,
    )
    assert format_skills_for_prompt([hidden]) == ""
    assert format_skill_invocation(hidden) == (
        '<skill name="x" location="/s/x/SKILL.md">\nReferences are relative to /s/x.\n\n\n</skill>'
    )


async def test_unreadable_files_become_diagnostics(tmp_path: Path) -> None:
    _write(tmp_path / "prompts" / "ok.md", "fine")
    (tmp_path / "prompts" / "broken.md").write_bytes(b"\xff\xfe not utf-8")
    result = await load_prompt_templates(tmp_path / "prompts")
    assert [t.name for t in result.templates] == ["ok"]
    (diagnostic,) = result.diagnostics
    assert diagnostic.code == "read_failed"
    assert diagnostic.path == str(tmp_path / "prompts" / "broken.md")
    assert (await load_skills(tmp_path / "nothing-here")).skills == []


@pytest.mark.parametrize("name", ["ok", "a-b-c", "x1"])
async def test_valid_skill_names_give_no_warnings(tmp_path: Path, name: str) -> None:
    _write(tmp_path / name / "SKILL.md", f"---\nname: {name}\ndescription: d\n---\nbody")
    result = await load_skills(tmp_path)
    assert [s.name for s in result.skills] == [name]
    assert result.diagnostics == []


def test_the_pinned_fixture_is_what_pi_computes_now(pi_node_modules: Path) -> None:
    """Rerun Pi's code (installed in tests/harness/node from its lock) and compare."""
    import os
    import subprocess

    from _node import node_executable

    script = Path(__file__).parent / "node" / "templates_pin.mjs"
    output = subprocess.run(
        [node_executable(), str(script)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PI_NODE_MODULES": str(pi_node_modules)},
    ).stdout
    assert json.loads(output) == _pinned()


async def test_a_symbolic_link_loop_is_not_followed(tmp_path: Path) -> None:
    """A link back up the tree is skipped; other links are followed, as in Pi."""
    _write(tmp_path / "skills" / "a" / "one" / "SKILL.md", "---\ndescription: d\n---\nx")
    (tmp_path / "skills" / "a" / "loop").symlink_to(tmp_path / "skills")
    (tmp_path / "skills" / "linked").symlink_to(tmp_path / "skills" / "a" / "one")
    result = await load_skills(tmp_path / "skills")
    assert [Path(s.file_path).relative_to(tmp_path).as_posix() for s in result.skills] == [
        "skills/a/one/SKILL.md",
        "skills/linked/SKILL.md",
    ]


def test_skill_commands_expand_to_the_skill() -> None:
    skill = Skill(
        name="pdf", description="d", content="Use extract.py.", file_path="/s/pdf/SKILL.md"
    )
    block = '<skill name="pdf" location="/s/pdf/SKILL.md">\nReferences are relative to /s/pdf.'
    block += "\n\nUse extract.py.\n</skill>"
    assert expand_skill_command("/skill:pdf", [skill]) == block
    assert expand_skill_command("/skill:pdf   fill the form  ", [skill]) == (
        block + "\n\nfill the form"
    )
    assert expand_skill_command("/skill:other x", [skill]) == "/skill:other x"
    assert expand_skill_command("/pdf", [skill]) == "/pdf"
