/* The Web Worker a Python block runs in (Pyodide, vendored under static/vendor/pyodide/). The
   page (run.js) starts it on the first Run, sends {code, pyodide} per run, and terminates it to
   stop a run (the Stop button, the time limit): a loop in Python cannot be interrupted any
   other way. Messages back: {type: "started"} when the code starts running (Pyodide loaded),
   {type: "stdout"|"stderr", text}, and {type: "done"}. */
let pyodide = null;

/* The answer's code reaches JavaScript's globals through Pyodide's `js` module: once Pyodide has
   fetched what it needs, the worker's network is taken away, so the code cannot call this
   site's API with the visitor's cookies. */
const NETWORK = ["fetch", "XMLHttpRequest", "WebSocket", "EventSource", "importScripts", "WebTransport"];
function dropNetwork() {
  NETWORK.forEach((name) => {
    try { delete self[name]; } catch (e) { /* not configurable: overwrite below */ }
    if (name in self) self[name] = undefined;
  });
}

async function load(moduleUrl) {
  const { loadPyodide } = await import(moduleUrl);
  const loaded = await loadPyodide({ indexURL: new URL(".", moduleUrl).href, packages: [] });
  dropNetwork();
  return loaded;
}

self.onmessage = async (event) => {
  const { code, pyodide: moduleUrl } = event.data || {};
  try {
    if (!pyodide) pyodide = await load(moduleUrl);
    pyodide.setStdout({ batched: (text) => self.postMessage({ type: "stdout", text: text + "\n" }) });
    pyodide.setStderr({ batched: (text) => self.postMessage({ type: "stderr", text: text + "\n" }) });
    self.postMessage({ type: "started" });
    const globals = pyodide.globals.get("dict")();
    try {
      await pyodide.runPythonAsync(String(code), { globals: globals });
    } finally {
      globals.destroy();
    }
  } catch (error) {
    self.postMessage({ type: "stderr", text: String((error && error.message) || error) });
  }
  self.postMessage({ type: "done" });
};
