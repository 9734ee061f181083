"""A Trio HTTP service serving many agents: one Agent per conversation, each request a task.

POST /c/<id>        body: the prompt      -> 200 with the answer (409 while that agent is busy)
POST /c/<id>/abort                        -> 202; the running prompt ends as "aborted"

Serve it with ``trio.serve_tcp(service.handle, 8000, host="127.0.0.1")``. main() below drives
it over in-memory streams instead, so the file runs (and is tested) without a network.
"""

from collections.abc import Callable

import h11
import trio
import trio.testing

from pitrio import Agent, AgentBusyError, AssistantMessage, Context, TextContent, UserMessage
from pitrio.testing import ScriptedModel, ScriptedResponse


class AgentService:
    def __init__(self, make_agent: Callable[[], Agent]) -> None:
        self.make_agent = make_agent
        self.agents: dict[str, Agent] = {}  # conversation id -> Agent (a few KB each when idle)

    async def handle(self, stream: trio.abc.Stream) -> None:
        """One connection, one request (``serve_tcp`` runs each in its own task)."""
        conn = h11.Connection(h11.SERVER)
        target, body = b"", b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(bytes(await stream.receive_some(65536)))
            elif isinstance(event, h11.Request):
                target = event.target
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
        status, text = await self.route(target.decode(), body.decode())
        data = text.encode()
        headers = [("content-type", "text/plain"), ("content-length", str(len(data)))]
        await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
        await stream.send_all(conn.send(h11.Data(data=data)) + conn.send(h11.EndOfMessage()))
        await stream.aclose()

    async def route(self, path: str, body: str) -> tuple[int, str]:
        parts = path.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "c" and parts[2] == "abort":
            agent = self.agents.get(parts[1])
            if agent is not None:
                agent.abort()  # sync; the prompt's own request task sees the run settle
            return 202, "aborting"
        if len(parts) == 2 and parts[0] == "c":
            agent = self.agents.get(parts[1])
            if agent is None:
                agent = self.agents[parts[1]] = self.make_agent()
            try:
                # The run lives in this request's task. If the client goes away and the
                # server cancels the task, the run settles as aborted: nothing leaks.
                await agent.prompt(body)
            except AgentBusyError as exc:
                return 409, str(exc)
            last = agent.state.messages[-1]
            assert isinstance(last, AssistantMessage)  # a run ends with the model's answer
            if last.stop_reason in ("error", "aborted"):
                return 200, f"[{last.stop_reason}] {last.error_message or ''}".strip()
            return 200, last.text
        return 404, "no such route"


def reply(context: Context) -> ScriptedResponse:
    last = context.messages[-1]
    assert isinstance(last, UserMessage)
    said = "".join(block.text for block in last.content if isinstance(block, TextContent))
    if said == "think hard":
        return ScriptedResponse.text("Hmm... " * 100, chunk_size=7, delay=60.0)
    return ScriptedResponse.text(f"echo: {said} ({len(context.messages)} messages so far)")


service = AgentService(lambda: Agent(stream_fn=ScriptedModel(reply)))


async def request(path: str, body: str = "") -> tuple[int, str]:
    """A tiny HTTP client over an in-memory connection to the service."""
    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.handle, server)
        conn = h11.Connection(h11.CLIENT)
        headers = [("host", "agents"), ("content-length", str(len(body.encode())))]
        await client.send_all(conn.send(h11.Request(method="POST", target=path, headers=headers))
                              + conn.send(h11.Data(data=body.encode()))
                              + conn.send(h11.EndOfMessage()))
        status, text = 0, b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(bytes(await client.receive_some(65536)))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                text += event.data
            elif isinstance(event, h11.EndOfMessage):
                return status, text.decode()


async def main() -> None:
    async def show(path: str, body: str = "") -> None:
        status, text = await request(path, body)
        print(path, status, text)

    async with trio.open_nursery() as nursery:
        # Two conversations at once; each has its own agent and transcript.
        nursery.start_soon(show, "/c/alice", "hello")
        nursery.start_soon(show, "/c/bob", "hi")
    await show("/c/alice", "again")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(show, "/c/bob", "think hard")
        await trio.sleep(1)
        await show("/c/bob", "are you there?")  # bob's agent is busy: 409
        await show("/c/bob/abort")
    print(len(service.agents), "agents")


if __name__ == "__main__":
    trio.run(main)
