/* The red-teaming chat page: one attempt at a time over /ws/redteam (frames documented in
   redteam/consumer.py). The terms are accepted and the proof-of-work challenge solved over the
   visitor API first, as before a vote. Every text (the player's, the model's, the judge's) is
   set as text, never as HTML; the evidence of a success is highlighted with a <mark>. */
import { solveChallenge } from "./challenge.js";
import { gettext, interpolate } from "./i18n.js";

const $ = (id) => document.getElementById(id);
const root = document.querySelector(".redteam.play");
const chat = $("chat");
const form = $("prompt-form");
const input = $("prompt-input");
const sendButton = $("send");
const stopButton = $("stop");
const surrenderButton = $("surrender");
const rejudgeButton = $("rejudge");
const statusEl = $("status");
const outcome = $("outcome");
const termsDialog = $("terms");

let socket = null;
let opening = null;
let attempt = null;
let streaming = false;
let current = null;  // the model's answer element of the turn streaming
let termsAccepted = root.dataset.termsAccepted === "true";
let challengePending = root.dataset.challengePending === "true";
let clock = null;  // the countdown's interval while a time-limited attempt is open

function csrfToken() {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return match ? decodeURIComponent(match[1]) : "";
}

async function api(method, url, body) {
  const response = await fetch(url, {
    method: method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (!response.ok) {
    throw new Error(data && data.error ? data.error.message : interpolate(gettext("Something went wrong (%(status)s)."), { status: response.status }, true));
  }
  return data;
}

function setStatus(text, isError) {
  statusEl.textContent = text || "";
  statusEl.classList.toggle("error", Boolean(isError));
}

function updateButtons() {
  const open = attempt !== null && attempt.state === "open";
  sendButton.disabled = !open || streaming;
  stopButton.disabled = !streaming;
  surrenderButton.disabled = !open;
  input.disabled = !open;
}

/* A time-limited attempt's countdown. At zero the server ends the attempt (expired) on the
   next message, so Send stays on and says what happens. */
function showTimeLeft() {
  const el = $("time-left");
  if (clock) { clearInterval(clock); clock = null; }
  if (!attempt || attempt.state !== "open" || !attempt.deadline) { el.hidden = true; return; }
  const deadline = Date.parse(attempt.deadline);
  const tick = () => {
    const left = Math.max(0, Math.round((deadline - Date.now()) / 1000));
    const clockText = Math.floor(left / 60) + ":" + String(left % 60).padStart(2, "0");
    el.textContent = left > 0 ? interpolate(gettext("Time left: %(time)s"), { time: clockText }, true)
      : gettext("Time is up: your next message ends the attempt.");
    if (left === 0 && clock) { clearInterval(clock); clock = null; }
  };
  el.hidden = false;
  tick();
  clock = setInterval(tick, 1000);
}

// --- terms and challenge, then the attempt ---------------------------------------------------
function termsReady() {
  if (termsAccepted) return Promise.resolve();
  return new Promise((resolve) => {
    const accept = $("terms-accept");
    const error = $("terms-error");
    accept.addEventListener("click", async () => {
      accept.disabled = true;
      try {
        await api("POST", "/api/terms", { accept: true });
        termsAccepted = true;
        termsDialog.close();
        resolve();
      } catch (e) {
        error.textContent = e.message;
        error.hidden = false;
      } finally {
        accept.disabled = false;
      }
    });
    termsDialog.addEventListener("cancel", (event) => event.preventDefault());
    termsDialog.showModal();
  });
}

async function challengeReady() {
  if (!challengePending) return;
  setStatus(gettext("Checking your browser…"));
  const challenge = await api("GET", "/api/challenge");
  await api("POST", "/api/challenge/verify", { payload: await solveChallenge(challenge) });
  challengePending = false;
}

function connect() {
  if (socket && socket.readyState === WebSocket.OPEN) return Promise.resolve(socket);
  if (opening) return opening;
  opening = new Promise((resolve, reject) => {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(scheme + "//" + location.host + "/ws/redteam");
    ws.addEventListener("open", () => { socket = ws; opening = null; resolve(ws); });
    ws.addEventListener("message", (event) => onFrame(JSON.parse(event.data)));
    ws.addEventListener("close", () => {
      const wasOpen = socket === ws;
      if (wasOpen) socket = null;
      opening = null;
      if (!wasOpen) { reject(new Error(gettext("Could not connect to the arena."))); return; }
      if (streaming) {
        streaming = false;
        setStatus(gettext("The connection was lost; what was produced is saved."), true);
        updateButtons();
      }
    });
  });
  return opening;
}

async function send(frame) {
  try {
    const ws = await connect();
    ws.send(JSON.stringify(frame));
    return true;
  } catch (error) {
    setStatus(error.message, true);
    return false;
  }
}

async function begin() {
  attempt = null;
  showTimeLeft();
  chat.replaceChildren();
  outcome.hidden = true;
  $("opponent").textContent = gettext("An anonymous model");
  updateButtons();
  try {
    await termsReady();
    await challengeReady();
  } catch (error) {
    setStatus(error.message, true);
    return;
  }
  setStatus(gettext("Starting an attempt…"));
  send({ type: "start", challenge: root.dataset.challenge });
}

// --- frames -------------------------------------------------------------------------------
function onFrame(frame) {
  switch (frame.type) {
    case "attempt_start":
      attempt = frame.attempt;
      showTimeLeft();
      setStatus(gettext("Your opponent is ready: write your first message."));
      updateButtons();
      input.focus();
      return;
    case "turn_start": return onTurnStart(frame);
    case "deltas":
      if (current) current.textContent += frame.text;
      return;
    case "turn_end": return onTurnEnd(frame);
    case "attempt_end": return onAttemptEnd(frame.attempt);
    case "error": return onError(frame);
    default: return;
  }
}

function onTurnStart(frame) {
  streaming = true;
  rejudgeButton.hidden = true;
  const player = document.createElement("li");
  player.className = "message player";
  player.dataset.testid = "player-message";
  player.textContent = frame.prompt;
  const model = document.createElement("li");
  model.className = "message model streaming";
  model.dataset.testid = "model-message";
  model.dataset.turn = String(frame.turn);
  const text = document.createElement("div");
  text.className = "message-text";
  model.appendChild(text);
  chat.append(player, model);
  current = text;
  setStatus(gettext("The model is answering…"));
  updateButtons();
  model.scrollIntoView({ block: "nearest" });
}

function turnItem(turn) {
  return chat.querySelector('li.model[data-turn="' + turn + '"]');
}

function onTurnEnd(frame) {
  streaming = false;
  current = null;
  attempt = frame.attempt;
  const item = turnItem(frame.turn.turn);
  if (item) {
    item.classList.remove("streaming");
    item.querySelector(".message-text").textContent = frame.turn.content;
    const verdict = frame.turn.verdict;
    let note = item.querySelector(".turn-verdict");
    if (!note) {
      note = document.createElement("p");
      note.className = "turn-verdict";
      note.dataset.testid = "turn-verdict";
      item.appendChild(note);
    }
    if (frame.turn.status === "errored") note.textContent = gettext("The model could not answer; send your message again.");
    else if (verdict && verdict.success) note.textContent = gettext("The rule broke.");
    else if (verdict) note.textContent = gettext("The rule held.");
    else if (frame.turn.status === "stopped") note.textContent = gettext("Stopped.");
    else note.textContent = gettext("Not judged yet.");
    note.classList.toggle("broke", Boolean(verdict && verdict.success));
  }
  if (attempt.state === "open") {
    const left = attempt.max_turns ? attempt.max_turns - attempt.turns_used : null;
    setStatus(left === null ? gettext("The rule held. Try again.")
      : interpolate(gettext("The rule held. Turns left: %(left)s."), { left: left }, true));
  }
  updateButtons();
}

function highlight(evidence) {
  const item = turnItem(evidence.turn);
  if (!item) return;
  const text = item.querySelector(".message-text");
  const content = text.textContent;
  const mark = document.createElement("mark");
  mark.dataset.testid = "evidence";
  mark.textContent = content.slice(evidence.start, evidence.end);
  text.replaceChildren(content.slice(0, evidence.start), mark, content.slice(evidence.end));
  if (evidence.encoding && evidence.encoding !== "plain" && evidence.encoding !== "words") {
    const how = document.createElement("p");
    how.className = "evidence-encoding";
    how.dataset.testid = "evidence-encoding";
    how.textContent = interpolate(gettext("Encoded: %(encoding)s"), { encoding: evidence.encoding }, true)
      + (evidence.decoded ? " → " + evidence.decoded : "");
    item.appendChild(how);
  }
}

const HEADLINES = {
  succeeded: () => gettext("You broke the rule!"),
  surrendered: () => gettext("You surrendered."),
  expired: () => gettext("Out of turns or time: the rule held."),
  errored: () => gettext("The attempt failed."),
};

/* Why the rule broke, in the player's language: the automatic judges' finding by the evidence's
   encoding (the stored verdict_reason is the dataset's English), a judge model's own words. */
const FINDINGS = {
  words: () => gettext("The answer says the phrase."),
  plain: () => gettext("The answer reveals the secret."),
  spaced: () => gettext("The answer reveals the secret, spelled out."),
  reversed: () => gettext("The answer reveals the secret, reversed."),
  base64: () => gettext("The answer reveals the secret, in base64."),
};

function reasonText(ended) {
  const finding = ended.evidence && FINDINGS[ended.evidence.encoding];
  return finding ? finding() : ended.verdict_reason || "";
}

function onAttemptEnd(ended) {
  streaming = false;
  current = null;
  attempt = ended;
  showTimeLeft();
  outcome.hidden = false;
  outcome.dataset.state = ended.state;
  $("outcome-headline").textContent = (HEADLINES[ended.state] || HEADLINES.errored)();
  $("outcome-reason").textContent = reasonText(ended);
  if (ended.model) {
    const name = ended.model.organization ? ended.model.name + " (" + ended.model.organization + ")" : ended.model.name;
    $("outcome-model").textContent = interpolate(gettext("You were talking to %(model)s."), { model: name }, true);
    $("opponent").textContent = name;
    $("opponent").classList.add("revealed");
  }
  if (ended.evidence && ended.evidence.turn !== undefined) highlight(ended.evidence);
  setStatus("");
  updateButtons();
}

function onError(frame) {
  if (frame.code === "judge_unavailable") rejudgeButton.hidden = false;
  if (frame.code === "challenge_required") challengePending = true;
  if (streaming && current) { streaming = false; current = null; }
  setStatus(frame.message, true);
  updateButtons();
}

// --- the player's actions -------------------------------------------------------------------
form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const prompt = input.value.trim();
  if (!prompt || !attempt || streaming) return;
  if (await send({ type: "turn", attempt_id: attempt.id, prompt: prompt })) input.value = "";
});
input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
});
stopButton.addEventListener("click", () => send({ type: "stop" }));
surrenderButton.addEventListener("click", () => { if (attempt) send({ type: "surrender", attempt_id: attempt.id }); });
rejudgeButton.addEventListener("click", () => {
  rejudgeButton.hidden = true;
  if (attempt) send({ type: "rejudge", attempt_id: attempt.id });
});
$("again").addEventListener("click", () => begin());

begin();
