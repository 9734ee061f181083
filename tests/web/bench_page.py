"""The web page's cost per streamed delta, in headless chromium.

While an answer streams, the page keeps its text as chunks and re-renders the open message
as markdown (markdown-it, highlight.js) at most once an animation frame. This measures, in
the page served by ``pitrio serve`` (scripted model; the page's own ``handle`` is fed the
protocol's messages directly, so no model or socket time is counted):

========== ================================================================= ===========
workload   what                                                              reported
========== ================================================================= ===========
delta      one ``appendDelta`` handled (queued for the next frame)           µs per delta
every      a 10k-character answer in D deltas, rendered after every delta    ms per delta
           (no throttling: the worst case, as if each delta had a frame)
frame      a render at 1k, 5k and 10k characters: of the whole answer (a    ms per render
           fresh bubble, or a reload) and of the next frame (a few more
           characters: only the changed last block is replaced)
throttled  the same deltas pushed at 8 per animation frame (a fast model     ms per delta
           through the page's requestAnimationFrame throttle): handling
           plus the renders' time, divided by the deltas
========== ================================================================= ===========

A render is the page's own ``renderOpen`` (markdown-it, highlighting, the changed blocks put
into the DOM) plus the layout it causes (``offsetHeight`` read right after).

The answer is realistic markdown: headings, bold, lists, a table and Python code blocks,
repeated to 10,000 characters, cut into 4-character deltas (about a token each).

Usage::

    python -m tests.web.bench_page [--chars 10000] [--delta 4] [--json]

Timings are the page's ``performance.now()`` (wall clock in chromium); nothing here belongs
in a test assertion.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from typing import Any

import trio

from pitrio.testing import ScriptedModel, ScriptedResponse
from pitrio.web._serve import ServerInfo, serve

from ._cdp import ensure_chromium, open_browser

SECTION = """## Step {n}: what `greet()` returns

`greet()` returns **`Hello world`**, but the check expects **`Hello, world!`**:

1. the comma after the greeting is missing;
2. so is the final `!`, and *nothing else* differs.

| call | returns | expected |
| --- | --- | :---: |
| `greet("world")` | `Hello world` | `Hello, world!` |

```python
def greet(name: str) -> str:
    \"\"\"A friendly greeting for ``name``.\"\"\"
    return f"Hello, {{name}}!"
```

"""

SETUP = """(({text, delta}) => {
  window.bench = {pieces: [], text};
  for (let i = 0; i < text.length; i += delta) bench.pieces.push(text.slice(i, i + delta));
  bench.fresh = (id) => {
    log.textContent = "";
    handle({type: 'append', id, kind: 'assistant', working: true});
    return document.querySelector(`[data-id="${id}"]`);
  };
  bench.frame = () => new Promise((r) => requestAnimationFrame(() => r()));
  bench.busy = 0;
  const render = renderOpen;  // the page's own, timed (its callers look it up by name)
  renderOpen = (el) => {
    const t = performance.now();
    render(el);
    void el.offsetHeight;  // layout included
    bench.busy += performance.now() - t;
  };
  const warm = bench.fresh('w');  // JIT and highlight.js's grammars warm
  for (let i = 0; i < 3; i++) { warm.chunks = [text]; warm.renderPending = true; renderOpen(warm); }
  highlighted.clear();
  return bench.pieces.length;
})"""

WORKLOADS = {
    # handling alone: the render is left to the next frame
    "delta": """(() => { const el = bench.fresh('b1'); const t = performance.now();
  for (const d of bench.pieces) handle({type: 'appendDelta', id: 'b1', delta: d});
  return (performance.now() - t) * 1000 / bench.pieces.length; })()""",
    # the worst case: a render after every delta
    "every": """(() => { const el = bench.fresh('b2'); highlighted.clear();
  const t = performance.now();
  for (const d of bench.pieces) {
    handle({type: 'appendDelta', id: 'b2', delta: d}); renderOpen(el);
  }
  return (performance.now() - t) / bench.pieces.length; })()""",
    # one render of the whole text so far, at a few sizes
    "frame": """(() => { const out = {};
  for (const size of [1000, 5000, 10000]) {
    const el = bench.fresh(`f${size}`); const body = el.querySelector('.body');
    const at = (n) => {
      el.chunks = [bench.text.slice(0, n)]; el.renderPending = true; renderOpen(el);
    };
    bench.busy = 0;
    for (let i = 0; i < 20; i++) { body.blocks = undefined; at(size); }  // from nothing
    const whole = bench.busy / 20;
    bench.busy = 0;
    for (let i = 0; i < 20; i++) at(size - 20 + i);  // one more delta's worth each time
    out[size] = {whole, next: bench.busy / 20};
  }
  return out; })()""",
    # the page's own throttle: 8 deltas arrive per animation frame
    "throttled": """(async () => { const el = bench.fresh('b3'); highlighted.clear();
  bench.busy = 0; let handling = 0; let frames = 0;
  for (let i = 0; i < bench.pieces.length; i += 8) {
    const t = performance.now();
    for (const d of bench.pieces.slice(i, i + 8)) handle({type: 'appendDelta', id: 'b3', delta: d});
    handling += performance.now() - t;
    await bench.frame(); frames += 1;
  }
  await bench.frame();
  return {msPerDelta: (bench.busy + handling) / bench.pieces.length, frames,
          tables: el.querySelectorAll('table').length}; })()""",
}


async def measure(chars: int, delta: int) -> dict[str, Any]:
    text = ""
    n = 1
    while len(text) < chars:
        text += SECTION.format(n=n)
        n += 1
    text = text[:chars]
    with tempfile.TemporaryDirectory(prefix="pitrio-bench-web-") as temp:
        async with open_browser() as page, trio.open_nursery() as nursery:
            info: ServerInfo = await nursery.start(
                lambda task_status: serve(
                    ["--port", "0", "--cwd", temp],
                    stream_fn=ScriptedModel(lambda _: ScriptedResponse.text("ok")),
                    env={"PITRIO_SESSIONS_DIR": temp, "HOME": temp},
                    out=io.StringIO(),
                    task_status=task_status,
                )
            )
            await page.send(
                "Emulation.setDeviceMetricsOverride",
                width=1280,
                height=900,
                deviceScaleFactor=1,
                mobile=False,
            )
            await page.goto(info.url)
            await page.wait_for("location.hash.includes('session=')")
            args = json.dumps({"text": text, "delta": delta})
            result: dict[str, Any] = {"chars": len(text)}
            result["deltas"] = await page.evaluate(f"({SETUP})({args})")
            for name, expression in WORKLOADS.items():
                result[name] = await page.evaluate(expression)
            nursery.cancel_scope.cancel()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", type=int, default=10_000)
    parser.add_argument("--delta", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    problem = ensure_chromium()
    if problem is not None:
        sys.exit(problem)
    result = trio.run(measure, options.chars, options.delta)
    if options.json:
        print(json.dumps(result))
        return
    frames = ", ".join(
        f"{k} chars {v['whole']:.2f} ms whole / {v['next']:.2f} ms next"
        for k, v in result["frame"].items()
    )
    throttled = result["throttled"]
    print(
        f"{result['chars']} chars in {result['deltas']} deltas of {options.delta}:\n"
        f"  delta:     {result['delta']:.2f} µs per appendDelta handled (render deferred)\n"
        f"  every:     {result['every']:.3f} ms per delta, rendered after every delta\n"
        f"  frame:     {frames} (render + layout)\n"
        f"  throttled: {throttled['msPerDelta']:.3f} ms per delta (handling + renders) at 8 "
        f"deltas a frame, {throttled['frames']} frames"
    )


if __name__ == "__main__":
    main()
