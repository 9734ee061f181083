"""Write pitrio's built-in model catalog (``pitrio/providers/_catalog.json``) from pi-ai.

    python tools/gen_catalog.py [PI_AI_DIR]          # rewrite the catalog
    python tools/gen_catalog.py --check [PI_AI_DIR]  # exit 1 if it differs from pi-ai

``PI_AI_DIR`` is an installed ``@earendil-works/pi-ai`` package; without it the script
uses ``$PITRIO_PI_AI``, else the one the oracle installs
(``../shared/oracle/coding-agent/pi --oracle-path`` beside the repository). Needs Node 20
or later: ``tools/gen_catalog.mjs`` imports pi-ai's own catalog modules and prints them
as JSON; :func:`render` turns that into the committed file, one line per model.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "gen_catalog.mjs"
TARGET = REPO / "pitrio" / "providers" / "_catalog.json"
ORACLE = REPO.parent / "shared" / "oracle" / "coding-agent" / "pi"

FIELDS = (
    "id",
    "name",
    "api",
    "baseUrl",
    "reasoning",
    "input",
    "cost",
    "contextWindow",
    "maxTokens",
    "thinkingLevelMap",
    "compat",
    "headers",
)
"""The columns of a model row (after the provider); absent optional fields are null."""
_OPTIONAL = ("thinkingLevelMap", "compat", "headers")


def default_pi_ai_dir() -> Path | None:
    """``$PITRIO_PI_AI``, or the pi-ai the oracle installs, or None."""
    given = os.environ.get("PITRIO_PI_AI")
    if given:
        return Path(given)
    if not ORACLE.exists():
        return None
    done = subprocess.run(
        [str(ORACLE), "--oracle-path"], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return Path(done.stdout.strip()) / "node_modules" / "@earendil-works" / "pi-ai"


def dump(pi_ai_dir: Path, node: str = "node") -> dict[str, Any]:
    """pi-ai's catalog as ``tools/gen_catalog.mjs`` prints it (parsed)."""
    done = subprocess.run(
        [node, str(SCRIPT), str(pi_ai_dir)], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        msg = f"{SCRIPT.name} failed ({done.returncode}): {done.stderr.strip()}"
        raise RuntimeError(msg)
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def render(data: dict[str, Any]) -> str:
    """The committed catalog file for ``data`` (the output of :func:`dump`)."""
    version = data["piAiVersion"]
    rows = []
    for provider, models in data["models"].items():
        for model in models:
            extra = set(model) - set(FIELDS) - {"provider"}
            if extra or model["provider"] != provider:
                msg = f"{provider}/{model['id']}: unexpected fields {sorted(extra)}"
                raise ValueError(msg)
            rows.append(_line([provider, *(model.get(name) for name in FIELDS)]))
    head = {
        "generated": (
            f"from @earendil-works/pi-ai {version} by tools/gen_catalog.py; do not edit, "
            "regenerate: python tools/gen_catalog.py [PI_AI_DIR]"
        ),
        "piAiVersion": version,
        "fields": ["provider", *FIELDS],
        "envKeys": data["envKeys"],
        "specialEnv": data["specialEnv"],
        "providers": data["providers"],
    }
    lines = [f"{_line(name)}:{_line(value)}," for name, value in head.items()]
    return "{" + "\n".join(lines) + '\n"models":[\n' + ",\n".join(rows) + "\n]}\n"


def undo(text: str) -> dict[str, Any]:
    """The committed file read back into :func:`dump`'s shape (the inverse of
    :func:`render`)."""
    catalog = json.loads(text)
    fields = catalog["fields"][1:]
    models: dict[str, list[dict[str, Any]]] = {}
    for provider, *values in catalog["models"]:
        model = dict(zip(fields, values, strict=True))
        for name in _OPTIONAL:
            if model[name] is None:
                del model[name]
        model["provider"] = provider
        models.setdefault(provider, []).append(model)
    return {
        "piAiVersion": catalog["piAiVersion"],
        "providers": catalog["providers"],
        "envKeys": catalog["envKeys"],
        "specialEnv": catalog["specialEnv"],
        "models": models,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pi_ai_dir", nargs="?", type=Path, help="installed @earendil-works/pi-ai")
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    node = shutil.which("node")
    if node is None:
        parser.error("node is not on PATH: the generator runs pi-ai's catalog (Node 20 or later)")
    pi_ai_dir = args.pi_ai_dir or default_pi_ai_dir()
    if pi_ai_dir is None:
        parser.error(f"no pi-ai found ({ORACLE} is not there): give PI_AI_DIR or set $PITRIO_PI_AI")
    if not (pi_ai_dir / "package.json").is_file():
        parser.error(f"no pi-ai package at {pi_ai_dir}: give PI_AI_DIR or set $PITRIO_PI_AI")
    data = dump(pi_ai_dir, node)
    text = render(data)
    if args.check:
        same = TARGET.read_text(encoding="utf-8") == text
        print(f"{TARGET.relative_to(REPO)}: {'up to date' if same else 'differs from pi-ai'}")
        return 0 if same else 1
    TARGET.write_text(text, encoding="utf-8")
    count = sum(len(models) for models in data["models"].values())
    print(f"wrote {TARGET.relative_to(REPO)}: {count} models of {len(data['models'])} providers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
