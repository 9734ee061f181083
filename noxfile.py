"""Developer sessions: ``nox`` runs lint, typecheck and tests; ``nox -s bench`` measures;
``nox -s docs`` builds the documentation site."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.default_venv_backend = "venv"
PYTHON = "3.11"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The test suite (the same command CI runs)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(python=PYTHON)
def realserver(session: nox.Session) -> None:
    """Only the real-server suite: llama.cpp's server with Gemma 3 270M on 127.0.0.1."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "tests/realserver", "-v", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff: lint rules from pyproject.toml (the test suite runs the same, tests/test_lint.py)."""
    session.install("ruff==0.17.6")
    session.run(
        "ruff", "check", "pitrio", "tests", "benchmarks", "docs/examples", "tools", "noxfile.py"
    )


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package, the tests, the benchmarks, docs/examples and this
    file (``files`` in pyproject.toml; the test suite runs the same, tests/test_lint.py)."""
    session.install("-e", ".[test]")
    session.run("mypy", "--strict")


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """The documentation site, warnings as errors (HTML in docs/_build/html)."""
    session.install("-e", ".[docs]")
    session.run(
        "python", "-m", "sphinx", "-W", "--keep-going", "-b", "html",
        "docs", "docs/_build/html", *session.posargs,
    )


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Every benchmark workload (``python -m benchmarks``; pass its flags after ``--``,
    e.g. ``nox -s bench -- --peers --instructions``)."""
    session.install("-e", ".[bench]")
    session.run("python", "-m", "benchmarks", *session.posargs)
