import json
from collections.abc import Callable
from typing import Any

import httpx
import trio

from pitrio import AbortSignal, Agent, Tool, ToolResult, text_result
from pitrio.providers import Models, openai_compatible

# A Model says where and how to talk to a model; it holds no connection.
# llama.cpp: llama-server -m model.gguf --port 8080 --jinja   (vLLM: :8000, Ollama: :11434)
llama = openai_compatible("http://127.0.0.1:8080/v1", "qwen2.5-7b-instruct", provider="llama-cpp")


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    return f"data: {json.dumps({'choices': [choice]})}\n\n"


def fake_llama_server(request: httpx.Request) -> httpx.Response:
    """What llama-server would answer, so this file runs offline. Delete it (and the
    `transport=` below) to talk to a real server."""
    body = json.loads(request.content)
    if body["model"] != "qwen2.5-7b-instruct":
        return httpx.Response(404, json={"error": {"message": f"model {body['model']} not found"}})
    print("POST", request.url.path, "tools:", [t["function"]["name"] for t in body["tools"]])
    if body["messages"][-1]["role"] == "tool":
        events = [chunk({"content": "It is "}), chunk({"content": "14:05."}), chunk({}, "stop")]
    else:
        call = {"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "clock", "arguments": "{}"}}
        events = [chunk({"tool_calls": [call]}), chunk({}, "tool_calls")]
    sse = "".join(events) + "data: [DONE]\n\n"
    return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})


async def clock(
    call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
) -> ToolResult:
    return text_result("14:05")


async def main() -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(fake_llama_server))
    # Models owns the HTTP client for every model; a local server needs no real key.
    async with client, Models(client=client, get_api_key=lambda provider: "local") as models:
        agent = Agent(
            model=llama,
            stream_fn=models.stream_fn,
            tools=[Tool(name="clock", description="The time now", execute=clock)],
        )
        await agent.prompt("What time is it?")
        answer = agent.state.messages[-1]
        print(answer.stop_reason, answer.text)

        # Errors are data: a model the server does not have ends the run with an error
        # message in the transcript; prompt() does not raise.
        missing = openai_compatible("http://127.0.0.1:8080/v1", "llama3.1", provider="llama-cpp")
        agent = Agent(model=missing, stream_fn=models.stream_fn)
        await agent.prompt("hello?")
        failed = agent.state.messages[-1]
        print(failed.stop_reason, failed.error_message)


if __name__ == "__main__":
    trio.run(main)
