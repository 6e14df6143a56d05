/* Run buttons on the code blocks of a complete answer. Nothing runs on the server:
   - Python runs in Pyodide (static/vendor/pyodide/) inside a Web Worker (pyworker.js), started
     on the first Run only, so the page loads no Pyodide until a visitor asks. A run is stopped
     by terminating the worker: by the Stop button, or after the time limit (the battle
     element's data-code-run-seconds, the ARENA_CODE_RUN_SECONDS setting). stdout and stderr
     are shown under the block.
   - HTML and JavaScript run in <iframe sandbox="allow-scripts"> without allow-same-origin,
     loading /run/frame (a fixed page with its own CSP: inline code only, no network), which
     writes the code this module posts to it. The frame's origin is opaque: no cookies, no
     storage, no access to this page. Its console output and uncaught errors are posted back
     and shown under the block. The frame also posts a heartbeat: a frame whose page stops
     answering for the time limit (a loop that never yields) is removed, since the browser may
     run both sides' frames in one process and a spinning one would hold the other back.
   battle.js calls codeRunners(battle) whenever the battle on the page changes state, and sends
   codeRan() with the vote: whether a block of each side was run. */
import { gettext, interpolate } from "./i18n.js";

const root = document.querySelector(".battle");
const SIDES = ["a", "b"];
const LANGUAGES = {
  python: "python", py: "python", python3: "python",
  html: "html", javascript: "javascript", js: "javascript",
};
/* The policy the frame's document also states for itself, and a prelude that reports its console
   and its uncaught errors to the page. */
const FRAME_CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:";
const FRAME_PRELUDE =
  '<meta http-equiv="Content-Security-Policy" content="' + FRAME_CSP + '">' +
  "<script>(function () {" +
  "var origin = new URL(location.href).origin;" +
  "function send(kind, args) { try { parent.postMessage({ type: 'arena-frame-output', kind: kind," +
  " text: Array.prototype.map.call(args, String).join(' ') + '\\n' }, origin); } catch (e) {} }" +
  "setInterval(function () { try { parent.postMessage({ type: 'arena-frame-alive' }, origin); }" +
  " catch (e) {} }, 500);" +
  "window.addEventListener('error', function (e) { send('stderr', [e.message]); });" +
  "window.addEventListener('unhandledrejection', function (e) {" +
  " send('stderr', [(e.reason && e.reason.message) || e.reason]); });" +
  "['log', 'info'].forEach(function (n) { var f = console[n]; console[n] = function () {" +
  " send('stdout', arguments); f.apply(console, arguments); }; });" +
  "['error', 'warn'].forEach(function (n) { var f = console[n]; console[n] = function () {" +
  " send('stderr', arguments); f.apply(console, arguments); }; });" +
  "})();</script>";

let battleId = null;
const ran = { a: false, b: false };
let worker = null;
let pythonRun = null;  // the view of the Python run in progress
const frames = new Map();  // a frame's window → {view, html, beat: when it last answered, or null}
let watchdog = null;

export function codeRan() { return { a: ran.a, b: ran.b }; }

function limitSeconds() {
  const seconds = Number(root.dataset.codeRunSeconds);
  return seconds > 0 ? seconds : 10;
}

function blockLanguage(code) {
  const match = /(?:^|\s)language-([\w+-]+)/.exec(code.className || "");
  return match ? LANGUAGES[match[1].toLowerCase()] || null : null;
}

function button(text, testid) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "code-button";
  b.dataset.testid = testid;
  b.textContent = text;
  return b;
}

/* The controls and output under one block. */
function runView(side, language, code) {
  const box = document.createElement("div");
  box.className = "code-run";
  box.dataset.testid = "code-run";
  box.dataset.language = language;
  const controls = document.createElement("div");
  controls.className = "code-controls";
  const run = button(gettext("Run"), "code-run-button");
  const stop = button(gettext("Stop"), "code-stop-button");
  stop.disabled = true;
  const status = document.createElement("span");
  status.className = "code-status";
  status.dataset.testid = "code-status";
  status.setAttribute("role", "status");
  controls.append(run, stop, status);
  const stdout = document.createElement("pre");
  stdout.className = "code-stdout";
  stdout.dataset.testid = "code-stdout";
  stdout.hidden = true;
  const stderr = document.createElement("pre");
  stderr.className = "code-stderr";
  stderr.dataset.testid = "code-stderr";
  stderr.hidden = true;
  box.append(controls, stdout, stderr);
  let timer = null;
  const view = {
    box: box,
    begin() {
      stdout.textContent = ""; stderr.textContent = "";
      stdout.hidden = true; stderr.hidden = true;
      run.disabled = language === "python"; stop.disabled = false;  // Run again redraws a frame
      status.textContent = language === "python" ? gettext("Loading Python…") : "";
    },
    started() {
      ran[side] = true;
      // A frame's page stays until Stop or the next Run; only a Python run is said to be running.
      status.textContent = language === "python" ? gettext("Running…") : "";
      if (language === "python") {
        timer = setTimeout(() => stopPython(interpolate(
          gettext("Stopped: the time limit is %(seconds)s seconds."), { seconds: limitSeconds() }, true)),
        limitSeconds() * 1000);
      }
    },
    write(kind, text) {
      const target = kind === "stderr" ? stderr : stdout;
      target.hidden = false;
      target.textContent += text;
    },
    finish(reason) {
      clearTimeout(timer);
      run.disabled = false; stop.disabled = true;
      status.textContent = reason || (language === "python" ? gettext("Finished.") : "");
    },
  };
  run.addEventListener("click", () => {
    if (language === "python") runPython(code, view);
    else runFrame(language, code, view);
  });
  stop.addEventListener("click", () => {
    if (language === "python") stopPython(gettext("Stopped."));
    else stopFrame(view);
  });
  return view;
}

/* Python: one worker at a time; a new run ends the one before. */
function runPython(code, view) {
  stopPython(gettext("Stopped."));
  if (!worker) {
    worker = new Worker(root.dataset.pythonWorker, { type: "module" });
    worker.onmessage = onWorkerMessage;
    worker.onerror = () => {
      const run = pythonRun;
      stopPython(gettext("Python could not start in this browser."));
      if (run) run.write("stderr", gettext("Python could not start in this browser.") + "\n");
    };
  }
  pythonRun = view;
  view.begin();
  worker.postMessage({ code: code, pyodide: new URL(root.dataset.pyodide, location.href).href });
}

function onWorkerMessage(event) {
  const view = pythonRun;
  const message = event.data || {};
  if (!view) return;
  if (message.type === "started") view.started();
  else if (message.type === "stdout" || message.type === "stderr") view.write(message.type, message.text);
  else if (message.type === "done") { pythonRun = null; view.finish(null); }
}

/* Terminating the worker is the only way to stop Python code mid-loop; the next run starts a
   new one (Pyodide loads again, from the browser's cache). */
function stopPython(reason) {
  if (!pythonRun) return;
  const view = pythonRun;
  pythonRun = null;
  if (worker) { worker.terminate(); worker = null; }
  view.finish(reason);
}

function frameDocument(language, code) {
  if (language === "javascript") {
    // The code as one script; "</script" inside it would end the element early.
    return FRAME_PRELUDE + "<script>" + code.replace(/<\/(script)/gi, "<\\/$1") + "</script>";
  }
  return FRAME_PRELUDE + code;
}

/* Removing the frame ends whatever its page runs (a loop included). */
function removeFrame(view) {
  const old = view.box.querySelector("iframe");
  if (old) { frames.delete(old.contentWindow); old.remove(); }
}

function stopFrame(view) {
  const entry = Array.from(frames.values()).find((e) => e.view === view);
  const stuck = entry !== undefined && silent(entry, Date.now());
  removeFrame(view);
  view.finish(gettext("Stopped."));
  if (stuck) restartSilent(Date.now());
}

/* Whether a frame has missed its last heartbeats (or never sent one). */
function silent(entry, now) { return entry.beat === null || now - entry.beat > 1000; }

/* A frame that has not answered lately may share a stuck frame's process, which only ends once
   none of its frames is left: once the stuck one is gone, such frames start again, in a new
   process. Returns how many. */
function restartSilent(now) {
  const waiting = Array.from(frames.values()).filter((e) => silent(e, now));
  waiting.forEach((entry) => removeFrame(entry.view));
  if (waiting.length) {
    setTimeout(() => waiting.forEach((e) => runFrame(e.language, e.code, e.view)), 100);
  }
  return waiting.length;
}

function runFrame(language, code, view) {
  removeFrame(view);
  view.begin();
  const frame = document.createElement("iframe");
  frame.setAttribute("sandbox", "allow-scripts");
  frame.className = "code-frame";
  frame.dataset.testid = "code-frame";
  frame.title = gettext("The code's output");
  frame.src = root.dataset.runFrame;
  view.box.appendChild(frame);
  frames.set(frame.contentWindow, {
    view: view, language: language, code: code, html: frameDocument(language, code), beat: null,
  });
  if (!watchdog) watchdog = setInterval(checkFrames, 1000);
}

/* A frame silent for the time limit while the page is in view is stopped (counted from its
   first word: a frame still loading is not judged). A hidden page's
   timers are throttled, the frame's as well: its silence then says nothing, and the count
   starts again when the page is back in view. */
function checkFrames() {
  if (document.visibilityState !== "visible") return;
  const limit = limitSeconds();
  const now = Date.now();
  const entries = Array.from(frames.values());
  const hung = entries.filter((e) => e.beat !== null && now - e.beat > limit * 1000);
  if (!hung.length) return;
  hung.forEach((entry) => {
    removeFrame(entry.view);
    entry.view.finish(interpolate(
      gettext("Stopped: the page did not respond for %(seconds)s seconds."), { seconds: limit }, true));
  });
  const restarted = restartSilent(now);
  if (!frames.size && !restarted) { clearInterval(watchdog); watchdog = null; }
}

document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible") frames.forEach((entry) => { if (entry.beat !== null) entry.beat = Date.now(); });
});

window.addEventListener("message", (event) => {
  const entry = frames.get(event.source);
  const message = event.data || {};
  if (!entry) return;
  if (message.type === "arena-frame-alive" || message.type === "arena-frame-ready") entry.beat = Date.now();
  if (message.type === "arena-frame-ready" && entry.html !== null) {
    // The frame's origin is opaque, so its window is addressed as "*": it checks the sender.
    event.source.postMessage({ type: "arena-run", html: entry.html }, "*");
    entry.html = null;
    entry.view.started();
  } else if (message.type === "arena-frame-output" && typeof message.text === "string") {
    entry.view.write(message.kind === "stderr" ? "stderr" : "stdout", message.text);
  }
});

function attach(side) {
  const container = document.getElementById("response-" + side);
  if (!container) return;
  container.querySelectorAll("pre > code").forEach((code) => {
    const pre = code.parentElement;
    const language = blockLanguage(code);
    if (!language || pre.dataset.runnable) return;
    pre.dataset.runnable = language;
    pre.after(runView(side, language, code.textContent).box);
  });
}

/* An answer drawn again once complete (live.js renders the last streamed text in the next
   animation frame) loses its Run buttons with its old markup: they are added back. */
let complete = false;
const observer = new MutationObserver((records) => {
  if (!complete) return;
  SIDES.forEach((side) => {
    if (records.some((r) => r.target.closest && r.target.closest("#response-" + side))) attach(side);
  });
});
SIDES.forEach((side) => {
  const container = document.getElementById("response-" + side);
  if (container) observer.observe(container, { childList: true, subtree: true });
});

/* The battle on the page (or none): a new battle starts with nothing run; a complete one (open
   to a vote, or voted) gets its Run buttons. */
export function codeRunners(data) {
  const id = data ? data.id : null;
  if (id !== battleId) {
    battleId = id;
    ran.a = false; ran.b = false;
    stopPython(null);
    frames.clear();
  }
  complete = Boolean(data && (data.votable || data.state === "voted"));
  if (complete) SIDES.forEach(attach);
}
