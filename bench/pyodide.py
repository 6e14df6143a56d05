"""Pyodide's cost to a visitor: the first Run of a Python block, and the next one.

    .venv/bin/python bench/pyodide.py [--rounds 3]

Serves ``static/`` on loopback (Python's http.server, no Django: what is timed is the browser)
and, in headless Chromium (/usr/bin/chromium through Playwright), a page that starts the
battle page's Python worker (``static/js/pyworker.js``, Pyodide from ``static/vendor/pyodide``)
and posts it the same code twice, timing from the post to the first line of output:

- *first run*: a fresh browser context (empty cache), so Pyodide's ~13 MB are fetched over
  loopback and its WebAssembly compiled before the code runs;
- *second run*: the same worker, Pyodide loaded.

The anchor is the same computation in a plain JavaScript worker without Pyodide (what a
browser pays for a worker at all), started the same way. Each round is a new context; the
figures are the rounds' medians, and the ratios are to the anchor's median.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import statistics
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]

PYTHON = "print(sum(i * i for i in range(100_000)))"
JS_WORKER = """
self.onmessage = () => {
  let total = 0;
  for (let i = 0; i < 100000; i++) total += i * i;
  self.postMessage({ type: "stdout", text: String(total) + "\\n" });
};
"""
PAGE = """<!doctype html><meta charset="utf-8"><title>bench</title><script type="module">
function firstOutput(worker, message) {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    worker.onmessage = (event) => {
      if (event.data.type === "stdout") resolve([performance.now() - start, event.data.text]);
      else if (event.data.type === "stderr") reject(new Error(event.data.text));
    };
    worker.postMessage(message);
  });
}
window.bench = async (kind) => {
  if (kind === "js") {
    const worker = new Worker("/jsworker.js");
    return [await firstOutput(worker, {})];
  }
  const worker = new Worker("/static/js/pyworker.js", { type: "module" });
  const message = { code: %s, pyodide: new URL("/static/vendor/pyodide/pyodide.mjs", location.href).href };
  const first = await firstOutput(worker, message);
  const second = await firstOutput(worker, message);
  return [first, second];
};
</script>"""


def serve(folder: Path) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.SimpleHTTPRequestHandler):
        extensions_map = {
            **http.server.SimpleHTTPRequestHandler.extensions_map,
            ".mjs": "text/javascript",
            ".js": "text/javascript",
            ".wasm": "application/wasm",
        }

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(folder))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "static").symlink_to(ROOT / "static")
        (folder / "index.html").write_text(PAGE % json.dumps(PYTHON), encoding="utf-8")
        (folder / "jsworker.js").write_text(JS_WORKER, encoding="utf-8")
        server = serve(folder)
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        times: dict[str, list[float]] = {"js": [], "first": [], "second": []}
        outputs = set()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
            for _ in range(args.rounds):
                for kind in ("js", "python"):
                    context = browser.new_context()
                    page = context.new_page()
                    page.goto(url)
                    page.wait_for_function("() => typeof window.bench === 'function'")
                    results = page.evaluate("(kind) => window.bench(kind)", kind)
                    context.close()
                    outputs.update(text for _, text in results)
                    if kind == "js":
                        times["js"].append(results[0][0])
                    else:
                        times["first"].append(results[0][0])
                        times["second"].append(results[1][0])
            browser.close()
        server.shutdown()
    assert outputs == {"333328333350000\n"}, outputs  # the same answer on every path
    js = statistics.median(times["js"])
    print(f"rounds: {args.rounds}; code: {PYTHON}")
    print("| run | median ms | min ms | max ms | / plain JS worker |")
    print("|---|---:|---:|---:|---:|")
    for label, key in (
        ("plain JS worker (anchor)", "js"),
        ("Pyodide, first run (cold cache)", "first"),
        ("Pyodide, second run (same worker)", "second"),
    ):
        values = times[key]
        median = statistics.median(values)
        print(
            f"| {label} | {median:.1f} | {min(values):.1f} | {max(values):.1f} | "
            f"{median / js:.1f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
