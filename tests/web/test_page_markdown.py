"""The page's rendering of answers, edits and consent, in headless chromium.

Answers are markdown (markdown-it, vendored) with highlighted code (highlight.js, vendored):
the tests read the rendered DOM. Markup, scripts and unsafe links in the model's text stay
text; an ``edit`` shows its diff; a consent card shows the whole call, invisible characters
marked. The model is a :class:`pitrio.testing.ScriptedModel`; the ``edit`` tool is real.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import Context, TextContent, ToolResultMessage
from pitrio.cli._offline import copy_sample_project
from pitrio.testing import ScriptedModel, ScriptedResponse
from pitrio.web._serve import ServerInfo, serve

from ._cdp import Page
from .test_web import _last_user, paced, send, wait_idle

RICH = """## Why `check_greet.py` fails

`greet()` returns **`Hello world`**, but the check expects **`Hello, world!`**:

1. the comma after the greeting is missing;
2. so is the final `!`.

| call | returns | expected |
| --- | --- | :---: |
| `greet("world")` | `Hello world` | `Hello, world!` |
| `greet("Ada")` | `Hello Ada` | `Hello, Ada!` |

### The fix

```python
def greet(name: str) -> str:
    \"\"\"A friendly greeting for ``name``.\"\"\"
    return f"Hello, {name}!"
```

I changed `greet.py` with `edit` (the diff is above) and ran the check again: *it passes*.
See [f-strings](https://docs.python.org/3/reference/lexical_analysis.html#f-strings) in the
Python reference.
"""

HOSTILE = """Some **bold** text, then markup that must stay text:

<script>document.title = "pwned"; window.pwned = 1;</script>
<img src=x onerror="window.pwned = 2">
<b>not bold</b> and <a href="https://example.com">not a link</a>

[a javascript link](javascript:window.pwned=3) [a data link](data:text/html,<b>x</b>)
<javascript:window.pwned=4> [vbscript](vbscript:msgbox) ![an image](https://example.com/x.png)
[a good link](https://example.com/ok) and <mailto:someone@example.com>

```html
<script>window.pwned = 5</script>
```

| a | b |
| --- | ---: |
| <i>x</i> | 1 |
"""

OLD_LINE = 'return "Hello " + name'
NEW_LINE = 'return f"Hello, {name}!"  # <b>not bold</b>'
STREAMED = (
    "# A streamed answer\n\n**Streaming** works: "
    + " ".join(f"word{i}" for i in range(300))
    + "\n\n- done"
)


def script(context: Context) -> ScriptedResponse:
    last = context.messages[-1]
    prompt = _last_user(context)
    if prompt.startswith("fix"):
        if isinstance(last, ToolResultMessage):
            return ScriptedResponse.text(RICH, chunk_size=40)
        args = {"path": "greet.py", "oldText": OLD_LINE, "newText": NEW_LINE}
        return ScriptedResponse.tool_calls(("c1", "edit", args))
    if isinstance(last, ToolResultMessage):
        text = "".join(b.text for b in last.content if isinstance(b, TextContent)).strip()
        return ScriptedResponse.text(f"The tool said: {text}", chunk_size=8)
    if prompt.startswith("rich"):
        return ScriptedResponse.text(RICH, chunk_size=7)
    if prompt.startswith("hostile"):
        return ScriptedResponse.text(HOSTILE, chunk_size=5)
    if prompt.startswith("stream"):
        return ScriptedResponse.text(STREAMED, chunk_size=6)
    return ScriptedResponse.text(f"You said: {prompt}", chunk_size=4)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """``pitrio serve`` on a copy of the sample project (greet.py), scripted model."""
    project = copy_sample_project(str(tmp_path / "greet"))
    env = {"PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"), "HOME": str(tmp_path)}
    async with trio.open_nursery() as nursery:

        async def start(*extra: str) -> ServerInfo:
            argv = ["--port", "0", "--cwd", project, *extra]
            info: ServerInfo = await nursery.start(
                lambda task_status: serve(
                    argv,
                    stream_fn=paced(ScriptedModel(script), 0.01),
                    env=env,
                    out=io.StringIO(),
                    task_status=task_status,
                )
            )
            return info

        yield start
        nursery.cancel_scope.cancel()


async def open_page(page: Page, info: ServerInfo) -> None:
    # Every Content-Security-Policy violation is recorded: the page needs nothing it forbids.
    await page.send(
        "Page.addScriptToEvaluateOnNewDocument",
        source="window.violations = []; document.addEventListener('securitypolicyviolation',"
        " (e) => window.violations.push(`${e.violatedDirective} ${e.blockedURI}`));",
    )
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await page.wait_for("location.hash.includes('session=')")  # the server's reset came


async def answer(page: Page, prompt: str) -> None:
    """Send a prompt and wait until the run is over."""
    await send(page, prompt)
    await page.wait_for("document.body.classList.contains('working')")
    await wait_idle(page)


LAST_BODY = "[...document.querySelectorAll('#log .item.assistant .body')].pop()"


async def last_answer(page: Page, expression: str) -> Any:
    """``expression`` over ``b``, the last answer's rendered body."""
    return await page.evaluate(f"(() => {{ const b = {LAST_BODY}; return {expression}; }})()")


async def test_an_answer_is_rendered_as_markdown_with_highlighted_code(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server()
    await open_page(page, info)
    await answer(page, "rich please")
    shown = await last_answer(
        page,
        "({h2: [...b.querySelectorAll('h2')].map(e => e.textContent),"
        " h3: [...b.querySelectorAll('h3')].map(e => e.textContent),"
        " strong: [...b.querySelectorAll('strong')].map(e => e.textContent),"
        " em: [...b.querySelectorAll('em')].map(e => e.textContent),"
        " items: [...b.querySelectorAll('ol > li')].map(e => e.textContent),"
        " head: [...b.querySelectorAll('table th')].map(e => e.textContent),"
        " cells: [...b.querySelectorAll('table tr')].map(r =>"
        "   [...r.querySelectorAll('td')].map(e => e.textContent)).filter(r => r.length),"
        " centered: [...b.querySelectorAll('td.align-center')].length,"
        " styled: b.querySelectorAll('[style]').length,"
        " tableScroll: getComputedStyle(b.querySelector('table').parentElement).overflowX,"
        " code: b.querySelector('pre.code code.hljs.language-python').textContent,"
        " lang: b.querySelector('pre.code').dataset.lang,"
        " keywords: [...b.querySelectorAll('pre.code .hljs-keyword')].map(e => e.textContent),"
        " strings: b.querySelectorAll('pre.code .hljs-string').length,"
        " inline: [...b.querySelectorAll('p code, li code')].map(e => e.textContent),"
        " links: [...b.querySelectorAll('a')].map(a =>"
        "   [a.getAttribute('href'), a.target, a.rel, a.textContent]),"
        " raw: b.innerText.includes('**') || b.innerText.includes('|---')})",
    )
    assert shown["h2"] == ["Why check_greet.py fails"]
    assert shown["h3"] == ["The fix"]
    assert shown["strong"] == ["Hello world", "Hello, world!"]
    assert shown["em"] == ["it passes"]
    assert shown["items"] == ["the comma after the greeting is missing;", "so is the final !."]
    assert shown["head"] == ["call", "returns", "expected"]
    assert shown["cells"] == [
        ['greet("world")', "Hello world", "Hello, world!"],
        ['greet("Ada")', "Hello Ada", "Hello, Ada!"],
    ]
    assert shown["centered"] == 2  # `:---:`, as a class: the CSP allows no inline style
    assert shown["styled"] == 0
    assert shown["tableScroll"] == "auto"
    assert shown["code"] == (
        'def greet(name: str) -> str:\n    """A friendly greeting for ``name``."""\n'
        '    return f"Hello, {name}!"\n'
    )
    assert shown["lang"] == "python"
    assert shown["keywords"] == ["def", "return"]
    assert shown["strings"] >= 1
    assert "greet.py" in shown["inline"]
    assert shown["links"] == [
        [
            "https://docs.python.org/3/reference/lexical_analysis.html#f-strings",
            "_blank",
            "noopener noreferrer",
            "f-strings",
        ]
    ]
    assert shown["raw"] is False
    assert await page.evaluate("window.violations") == []


async def test_markup_and_unsafe_links_in_model_text_stay_text(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server()
    await open_page(page, info)
    await answer(page, "hostile")
    shown = await last_answer(
        page,
        "({tags: [...new Set([...b.querySelectorAll('*')].map(e => e.tagName.toLowerCase()))],"
        " links: [...b.querySelectorAll('a')].map(a => a.getAttribute('href')),"
        " text: b.innerText, strong: [...b.querySelectorAll('strong')].map(e => e.textContent),"
        " pwned: window.pwned === undefined ? null : window.pwned, title: document.title,"
        " handlers: [...b.querySelectorAll('*')].filter(e =>"
        "   [...e.attributes].some(a => a.name.startsWith('on'))).length})",
    )
    assert shown["pwned"] is None
    assert shown["title"] == "pitrio"
    assert shown["handlers"] == 0
    for tag in ("script", "img", "b", "i", "iframe", "style"):
        assert tag not in shown["tags"], shown["tags"]
    assert shown["strong"] == ["bold"]
    # Only the http(s) and mailto links are links (a bare URL too, and an image is shown as a
    # link, never loaded); the others show as their text.
    assert shown["links"] == [
        "https://example.com",  # the URL in the escaped <a href="...">, linkified
        "https://example.com/x.png",
        "https://example.com/ok",
        "mailto:someone@example.com",
    ]
    text = shown["text"]
    for raw in (
        '<script>document.title = "pwned"; window.pwned = 1;</script>',
        '<img src=x onerror="window.pwned = 2">',
        '<b>not bold</b> and <a href="https://example.com">not a link</a>',
        "[a javascript link](javascript:window.pwned=3)",
        "[a data link](data:text/html,<b>x</b>)",
        "<javascript:window.pwned=4>",
        "[vbscript](vbscript:msgbox)",
        "<script>window.pwned = 5</script>",
        "<i>x</i>",
    ):
        assert raw in text, raw
    # Clicking what looks like the javascript link runs nothing.
    await page.evaluate(
        f"(() => {{ const b = {LAST_BODY}; for (const e of b.querySelectorAll('*'))"
        " e.click(); })()"
    )
    assert await page.evaluate("window.pwned === undefined") is True


async def test_the_open_answer_is_rendered_while_it_streams(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server()
    await open_page(page, info)
    await send(page, "stream it")
    # Bold shows as bold before the answer ends: the open message is re-rendered.
    partial = await page.wait_for(
        "(() => { const e = document.querySelector('#log .item.assistant.working .body');"
        " if (!e || !e.querySelector('h1 + p strong') || e.textContent.includes('- done'))"
        " return null; window.heading = e.querySelector('h1'); return e.textContent; })()"
    )
    plain = STREAMED.replace("**", "").replace("# ", "", 1).replace("\n\n", "\n", 1)
    assert plain.startswith(partial)
    await wait_idle(page)
    final = await last_answer(
        page,
        "({p: b.querySelector('p').textContent,"
        " li: [...b.querySelectorAll('li')].map(e => e.textContent),"
        " sameHeading: b.querySelector('h1') === window.heading})",
    )
    assert final["p"] == STREAMED.split("\n\n")[1].replace("**", "")
    assert final["li"] == ["done"]
    # Only changed blocks are replaced: the heading streamed first is the same element
    # after every later frame and the final render.
    assert final["sameHeading"] is True


DIFF_ROWS = """JSON.stringify([...document.querySelectorAll(
  '#log .item.tool .output.diff .lines > span')].map(e => [e.className, e.textContent]))"""


async def test_an_edit_shows_its_diff_colored_and_escaped(
    page: Page, server: Callable[..., Any], tmp_path: Path
) -> None:
    info = await server("--yes")
    await open_page(page, info)
    await answer(page, "fix greet.py")
    assert NEW_LINE in (tmp_path / "greet" / "greet.py").read_text()

    async def shown() -> tuple[list[list[str]], Any]:
        rows: list[list[str]] = json.loads(await page.evaluate(DIFF_ROWS))
        tool = await page.evaluate(
            "(() => { const t = document.querySelector('#log .item.tool');"
            " return {title: t.querySelector('.title').textContent,"
            " summary: t.querySelector('.summary').textContent,"
            " tags: [...t.querySelectorAll('.output *')].map(e => e.tagName.toLowerCase()),"
            " add: getComputedStyle(t.querySelector('.add')).backgroundColor,"
            " del: getComputedStyle(t.querySelector('.del')).backgroundColor,"
            " ctx: getComputedStyle(t.querySelector('.ctx')).backgroundColor}; })()"
        )
        return rows, tool

    rows, tool = await shown()
    # Pi's diff: the line number, then the line (greet.py's sixth line)
    assert ["del", f"-6     {OLD_LINE}\n"] in rows
    assert ["add", f"+6     {NEW_LINE}\n"] in rows
    # Pi's display diff has no file or hunk headers: context, removed and added lines
    assert {r[0] for r in rows} == {"ctx", "add", "del"}
    assert rows.index(["del", f"-6     {OLD_LINE}\n"]) + 1 == rows.index(
        ["add", f"+6     {NEW_LINE}\n"]
    )
    assert tool["title"] == "edit greet.py"
    assert tool["summary"] == "edited · +1 -1 lines"
    assert set(tool["tags"]) == {"span"}  # the <b> in the new line is text
    assert len({tool["add"], tool["del"], tool["ctx"]}) == 3  # colored apart
    # A reload shows the session's history: the same diff.
    await page.reload()
    await page.wait_for("document.querySelector('#log .item.tool .output.diff') !== null")
    assert await shown() == (rows, tool)


CONSENT = """(() => { const box = document.getElementById('consent');
  return {hidden: box.hidden, title: document.getElementById('consent-title').textContent,
  names: [...box.querySelectorAll('.arg .name')].map(e => e.textContent),
  values: [...box.querySelectorAll('.arg pre')].map(e => e.textContent),
  marks: [...box.querySelectorAll('.ctl')].map(e => e.textContent),
  legend: (box.querySelector('.legend') || {}).textContent,
  space: getComputedStyle(box.querySelector('.arg pre')).whiteSpace,
  font: getComputedStyle(box.querySelector('.arg pre')).fontFamily,
  overflow: getComputedStyle(document.getElementById('consent-args')).overflowY,
  scrolls: document.getElementById('consent-args').scrollHeight >
    document.getElementById('consent-args').clientHeight + 100}; })()"""


def visible(text: str) -> str:
    """What the consent card shows for ``text``: invisible and control characters as
    escapes (CR as ``\\r``); tab and newline as they are."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\r":
            out.append("\\r")
        elif ch in "\t\n" or not (
            code < 0x20
            or 0x7F <= code <= 0x9F
            or code in {0xAD, 0x61C, 0xFEFF}
            or 0x200B <= code <= 0x200F
            or 0x2028 <= code <= 0x202E
            or 0x2060 <= code <= 0x206F
            or 0xE0000 <= code <= 0xE0FFF
        ):
            out.append(ch)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\u{{{code:x}}}")
    return "".join(out)


async def test_consent_shows_the_whole_call_with_invisible_characters_marked(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server()
    await open_page(page, info)
    command = (
        "echo safe\x1b[2K\rrm -rf ~/work  \t# \u202eevil\u202c zero\u200bwidth \x07 \x85 "
        "tag\U000e0041\n" + "\n".join(f"echo line {i} {'x' * 150}" for i in range(80))
    )
    arguments = {"command": command, "timeout": 30}
    title = "bash echo safe\x1b[2K rm -rf ~/work # \u202eevil\u202c…"  # the server's one line
    message = {"type": "consent", "id": "c9", "tool": "bash", "title": title}
    await page.evaluate(f"handle({json.dumps({**message, 'arguments': arguments})})")
    shown = await page.evaluate(CONSENT)
    assert shown["hidden"] is False
    assert shown["title"] == visible(title)
    assert shown["names"] == ["command", "timeout"]
    assert shown["values"] == [visible(command), "30"]  # whole: 80 long lines, nothing cut
    assert shown["values"][0].startswith(
        "echo safe\\x1b[2K\\rrm -rf ~/work  \t# \\u202eevil\\u202c"
    )
    assert shown["marks"] == [
        *("\\x1b", "\\u202e", "\\u202c"),  # in the title
        "\\x1b",
        "\\r",
        "\\u202e",
        "\\u202c",
        "\\u200b",
        "\\x07",
        "\\x85",
        "\\u{e0041}",
    ]
    assert shown["legend"].startswith("8 invisible or control characters are shown as")
    assert shown["space"] == "break-spaces"  # a run of spaces takes its room, wrapping
    assert "monospace" in shown["font"]
    assert shown["overflow"] == "auto"
    assert shown["scrolls"] is True  # the card scrolls instead of growing past the screen
    # The older field name works too, and a string argument is shown as it is.
    older = {**message, "id": "c10", "args": "a\rb"}
    await page.evaluate(f"handle({json.dumps(older)})")
    shown = await page.evaluate(CONSENT)
    assert (shown["names"], shown["values"]) == ([], ["a\\rb"])
    assert shown["legend"].startswith("1 invisible or control character is shown as")
    # The answer goes back with the card's id.
    sent = await page.evaluate(
        "(() => { const seen = []; socket.send = (t) => seen.push(JSON.parse(t));"
        " document.querySelector('#consent button[data-answer=n]').click(); return seen; })()"
    )
    assert sent == [{"type": "consent", "id": "c10", "answer": "n"}]
    assert await page.evaluate("document.getElementById('consent').hidden") is True


async def test_vendored_files_are_served_with_the_token_and_csp(
    server: Callable[..., Any],
) -> None:
    from .test_web import _raw_get

    info = await server()
    static = Path(__file__).parents[2] / "pitrio" / "ui" / "_static"
    for name in ("markdown-it.min.js", "highlight.min.js", "hljs.css"):
        status, body = await _raw_get(info, f"/{name}?token={info.token}")
        assert (name, status) == (name, 200)
        assert body == (static / name).read_bytes()
        status, _ = await _raw_get(info, f"/{name}")
        assert (name, status) == (name, 403)
    for name in os.listdir(static):  # every file shipped beside the page is accounted for
        assert name in {
            "index.html",
            "app.js",
            "app.css",
            "markdown-it.min.js",
            "highlight.min.js",
            "hljs.css",
            "markdown-it.LICENSE.txt",
            "highlight.js.LICENSE.txt",
            "VENDORED.md",
        }, name
