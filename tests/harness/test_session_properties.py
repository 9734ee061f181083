"""Properties of sessions under random edits: what is reopened equals what was written.

Random sequences of appends (every entry kind), branch moves, labels, compactions,
model and thinking changes, flushes and close/reopen cycles run against each store;
after every reopen the session must equal the one that was closed (entries, leaf,
labels, name, model, the rebuilt context). A second property hands the files pitrio
writes to Pi's own session code and checks Pi rebuilds the same context.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from pitrio import AssistantMessage, TextContent, UserMessage
from pitrio.harness import InMemorySessionStore, JsonlSessionStore, Session, SqliteSessionStore

from .test_session_interop import comparable, pitrio_view, run_pi

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("user"), TEXT),
        st.tuples(
            st.just("assistant"), TEXT, st.sampled_from(["stop", "error", "aborted", "toolUse"])
        ),
        st.tuples(
            st.just("custom"), st.dictionaries(TEXT, st.integers() | TEXT | st.none(), max_size=3)
        ),
        st.tuples(st.just("label"), st.integers(0, 50), st.none() | TEXT),
        st.tuples(st.just("leaf"), st.none() | st.integers(0, 50)),
        st.tuples(st.just("compact"), st.integers(0, 50), TEXT),
        st.tuples(st.just("branch_summary"), TEXT),
        st.tuples(st.just("model"), st.sampled_from(["anthropic", "openai"]), TEXT.filter(bool)),
        st.tuples(st.just("thinking"), st.sampled_from(["off", "low", "high", "xhigh"])),
        st.tuples(st.just("name"), st.none() | TEXT),
        st.tuples(st.just("flush")),
        st.tuples(st.just("reopen")),
    ),
    max_size=30,
)


async def apply(session: Session, op: tuple[Any, ...], step: int) -> None:
    entries = session.entries
    match op:
        case ("user", text):
            await session.append_message(UserMessage(content=text, timestamp=step))
        case ("assistant", text, stop):
            await session.append_message(
                AssistantMessage(
                    content=(TextContent(text=text),),
                    api="a",
                    provider="p",
                    model="m",
                    stop_reason=stop,
                    timestamp=step,
                )
            )
        case ("custom", data):
            await session.append_custom("app", data)
        case ("label", index, label) if entries:
            await session.append_label(entries[index % len(entries)].id, label)
        case ("leaf", index):
            await session.set_leaf(
                None if index is None or not entries else entries[index % len(entries)].id
            )
        case ("compact", index, summary):
            branch = session.get_branch()
            kept = branch[index % len(branch)].id if branch else None
            await session.append_compaction(summary, tokens_before=step, first_kept_entry_id=kept)
        case ("branch_summary", summary):
            await session.append_branch_summary(summary, from_id=session.leaf_id)
        case ("model", provider, model_id):
            await session.append_model_change(provider, model_id)
        case ("thinking", level):
            await session.append_thinking_level_change(level)
        case ("name", name):
            await session.set_name(name)
        case ("flush",):
            await session.flush()
        case _:
            pass


def snapshot(session: Session) -> dict[str, Any]:
    return {
        "entries": session.entries,
        "leaf": session.leaf_id,
        "labels": session.labels,
        "name": session.name,
        "context": session.build_context(),
    }


def make_store(kind: str, where: Path) -> Any:
    if kind == "memory":
        return InMemorySessionStore()
    if kind == "jsonl":
        return JsonlSessionStore(where / "sessions")
    return SqliteSessionStore(where / "sessions.db")


@pytest.mark.parametrize("kind", ["memory", "jsonl", "sqlite"])
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_a_reopened_session_equals_the_one_closed(
    kind: str, tmp_path_factory: pytest.TempPathFactory, ops: Any
) -> None:
    where = tmp_path_factory.mktemp(kind)

    async def main() -> None:
        store = make_store(kind, where)
        session = await store.create(cwd="/p")
        for step, op in enumerate(ops):
            if op == ("reopen",):
                before = snapshot(session)
                await session.close()
                session = await store.open(session.id)
                assert snapshot(session) == before
            else:
                await apply(session, op, step)
        before = snapshot(session)
        await session.close()
        # A new store object on the same backing (the in-memory store is its own backing).
        fresh = store if kind == "memory" else make_store(kind, where)
        session = await fresh.open(session.id)
        assert snapshot(session) == before
        await session.close()

    trio.run(main)


@settings(
    max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
@given(ops=OPS)
def test_pi_rebuilds_what_pitrio_wrote(
    pi_node_modules: Path, tmp_path_factory: pytest.TempPathFactory, ops: Any
) -> None:
    where = tmp_path_factory.mktemp("pi")

    async def main() -> None:
        store = JsonlSessionStore(where)
        session = await store.create(cwd="/p")
        for step, op in enumerate(ops):
            if op != ("reopen",):
                await apply(session, op, step)
        await session.close()
        (info,) = await store.list()
        assert info.path is not None
        pi = await run_pi(pi_node_modules, "read", info.path)
        mine = pitrio_view(session)
        assert comparable(pi) == json.loads(json.dumps(comparable(mine)))

    trio.run(main)
