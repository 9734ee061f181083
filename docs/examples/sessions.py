import tempfile

import trio

from pitrio import Context, Model, TextContent, ToolResultMessage, UserMessage
from pitrio.harness import Harness, JsonlSessionStore
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="scripted-1", provider="scripted")


def text_of(message: UserMessage | ToolResultMessage) -> str:
    """The text of a message (its content may also hold images)."""
    if isinstance(message.content, str):
        return message.content
    return "".join(block.text for block in message.content if isinstance(block, TextContent))


def model(context: Context) -> ScriptedResponse:
    """Remembers what it was told: the proof that the context came back."""
    told = [text_of(m) for m in context.messages if isinstance(m, UserMessage)]
    return ScriptedResponse.text(f"You have told me {len(told)} thing(s): {' / '.join(told)}")


async def first_process(store: JsonlSessionStore) -> str:
    session = await store.create(cwd="/srv/project")
    harness = Harness(model=MODEL, stream_fn=ScriptedModel(model), session=session)
    harness.subscribe(lambda event: print(" ", event.type) if event.type in (
        "save_point", "settled") else None)
    await harness.prompt("my name is Ada")
    await harness.prompt("I like Trio")
    print(harness.messages[-1].text)
    await session.close()  # flushed at every save_point already; close releases the lock
    return session.id


async def second_process(store: JsonlSessionStore, session_id: str) -> None:
    # A new process: list the sessions, open one, and the harness starts from its context.
    for info in await store.list(cwd="/srv/project"):
        print("found session", info.id == session_id)
    session = await store.open(session_id)
    harness = Harness(model=MODEL, stream_fn=ScriptedModel(model), session=session)
    await harness.prompt("what do you know?")
    print(harness.messages[-1].text)

    # Branch: go back to the first answer and continue from there in a new session.
    first_answer = [e for e in session.entries if e.type == "message"][1]
    fork = await session.fork(first_answer.id)
    print("fork:", [m.role for m in fork.build_context().messages])
    await fork.close()
    await session.close()


async def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        store = JsonlSessionStore(root)  # default: a directory under the user's data dir
        session_id = await first_process(store)
        await second_process(store, session_id)


if __name__ == "__main__":
    trio.run(main)
