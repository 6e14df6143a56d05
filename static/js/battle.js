/* The battle page: take one vote, reveal the names. Pool battles (data-mode="pool") are fetched
   here; live battles (data-mode="live") are streamed by live.js, which uses the helpers this
   module exports and carries their votes over its socket (setVoteTransport). It tells live.js of a vote and of "Next battle" by events on the .battle
   element: "arena:voted" (detail: the voted battle) and, in live mode, "arena:next" (live.js
   starts over; in pool mode this module fetches the next battle itself). The page's tabs
   (?mode=live / ?mode=pool) are plain links. */
import { solveChallenge } from "./challenge.js";
import { gettext, interpolate } from "./i18n.js";
import { streamMixed } from "./mixed.js";
import { reactionsClose, reactionsOpen } from "./reactions.js";
import { setMarkdown, turnBlock, turnLabel } from "./render.js";
import { codeRan, codeRunners } from "./run.js";
import { shareBlock } from "./share.js";

const $ = (id) => document.getElementById(id);
const root = document.querySelector(".battle");
const statusEl = $("status");
const voteButtons = Array.from(document.querySelectorAll("button.vote"));
const nextButton = $("next-battle");
const verdictEl = $("verdict");
const termsDialog = $("terms");
const termsAcceptButton = $("terms-accept");
const termsError = $("terms-error");
const termsOpenButton = $("terms-open");
const liveMode = root.dataset.mode === "live";
let termsAccepted = root.dataset.termsAccepted === "true";
let battle = null;
let busy = false;
let mixedStream = null;  // a mixed battle's live side streaming (mixed.js)

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
    const message = data && data.error ? data.error.message : interpolate(gettext("Something went wrong (%(status)s)."), { status: response.status }, true);
    const error = new Error(message);
    error.code = data && data.error ? data.error.code : "http_" + response.status;
    throw error;
  }
  return data;
}

/* The proof-of-work challenge before the session's first vote (data-challenge="true"): solved
   in the background from page load; a vote waits for it. Settles once verified; a failure is
   forgotten so that the next vote tries again. */
let challengeDone = root.dataset.challenge === "true" ? null : Promise.resolve();
function challengePassed() {
  if (!challengeDone) {
    challengeDone = (async () => {
      const challenge = await api("GET", "/api/challenge");
      await api("POST", "/api/challenge/verify", { payload: await solveChallenge(challenge) });
    })();
    challengeDone.catch(() => { challengeDone = null; });
  }
  return challengeDone;
}

/* A live battle's vote goes over its open socket (live.js gives the transport: it answers
   null when the socket cannot carry it); else, and for pool battles, over HTTP. Either way the
   answer is the voted battle, or an error with the same code and message. */
let voteOverSocket = null;
export function setVoteTransport(transport) { voteOverSocket = transport; }

async function sendVote(winner) {
  const body = { winner: winner, ran: codeRan() };
  const overSocket = voteOverSocket ? voteOverSocket(battle.id, body) : null;
  if (overSocket) {
    try {
      return await overSocket;
    } catch (error) {
      // The socket closed before the answer: over HTTP, which says already_voted if it landed.
      if (error.code !== "socket_closed") throw error;
    }
  }
  return await api("POST", "/api/battles/" + battle.id + "/vote", body);
}

async function postVote(winner) {
  await challengePassed();
  try {
    return await sendVote(winner);
  } catch (error) {
    if (error.code !== "challenge_required") throw error;
    challengeDone = null;  // e.g. a new session meanwhile: solve again, then vote once more
    await challengePassed();
    return await sendVote(winner);
  }
}

export function setStatus(text, isError) {
  statusEl.textContent = text || "";
  statusEl.classList.toggle("error", Boolean(isError));
}

function setVotingEnabled(enabled) {
  voteButtons.forEach((b) => { b.disabled = !enabled; });
}

function renderSide(side, turns) {
  const container = $("response-" + side);
  container.replaceChildren();
  turns.forEach((turn) => {
    const parts = turnBlock(turn.index, turns.length);
    setMarkdown(parts.body, turn[side] ? turn[side].content : "");
    container.appendChild(parts.block);
  });
}

/* The prompt's turns; the images (their URLs) go with the first turn, as they were sent. */
export function renderPrompt(turns, images = []) {
  const container = $("prompt");
  container.replaceChildren();
  turns.forEach((turn) => {
    const label = turnLabel(turn.index, turns.length);
    if (label) container.appendChild(label);
    const p = document.createElement("p");
    p.className = "turn-prompt";
    p.textContent = turn.prompt;  // user text is shown as text, never as HTML
    container.appendChild(p);
    if (turn.index === 0 && images.length) container.appendChild(promptImages(images));
  });
}

function promptImages(images) {
  const list = document.createElement("ul");
  list.className = "prompt-images";
  list.dataset.testid = "prompt-images";
  images.forEach((url, i) => {
    const item = document.createElement("li");
    const img = document.createElement("img");
    img.src = url;
    img.alt = interpolate(gettext("Image %(n)s of the prompt"), { n: i + 1 }, true);
    img.loading = "lazy";
    item.appendChild(img);
    list.appendChild(item);
  });
  return list;
}

export function resetNames() {
  ["a", "b"].forEach((side) => {
    const el = $("model-name-" + side);
    el.textContent = interpolate(gettext("Model %(side)s"), { side: side.toUpperCase() }, true);
    el.classList.remove("revealed");
    $("response-" + side).setAttribute("aria-label", interpolate(gettext("Answer of model %(side)s"), { side: side.toUpperCase() }, true));
  });
}

/* A model's page: /models/<its public name>, the name URL-encoded. */
function modelLink(model) {
  const link = document.createElement("a");
  link.href = "/models/" + encodeURIComponent(model.name);
  link.textContent = model.name;
  return link;
}

export function revealNames(models) {
  ["a", "b"].forEach((side) => {
    const el = $("model-name-" + side);
    el.replaceChildren(modelLink(models[side]));
    if (models[side].organization) {
      const org = document.createElement("span");
      org.className = "org";
      org.textContent = models[side].organization;
      el.appendChild(org);
    }
    el.classList.add("revealed");
    $("response-" + side).setAttribute("aria-label", interpolate(gettext("Answer of model %(side)s, %(name)s"), { side: side.toUpperCase(), name: models[side].name }, true));
  });
}

/* A translated sentence with "%(a)s" and "%(b)s" standing for nodes (links): its text around
   them, the nodes where they stand, so that a translation can put them in its own order. */
function withNodes(format, nodes) {
  return format.split(/(%\([ab]\)s)/).filter((part) => part !== "").map((part) => {
    const name = part.match(/^%\(([ab])\)s$/);
    return name ? nodes[name[1]] : part;
  });
}

/* The verdict after a vote, naming the models, in #verdict (a polite live region, so that screen
   readers hear the names): the sentence, then which side was which and the leaderboard. */
function showVerdict(winner, models) {
  const main = document.createElement("p");
  main.className = "verdict-main";
  const sentence = {
    model_a: gettext("You preferred %(a)s."),
    model_b: gettext("You preferred %(b)s."),
    tie: gettext("You called it a tie between %(a)s and %(b)s."),
    "tie (bothbad)": gettext("You found both %(a)s and %(b)s bad."),
  }[winner];
  main.append(...withNodes(sentence, { a: modelLink(models.a), b: modelLink(models.b) }), " " + gettext("Thanks for voting!"));
  const sides = document.createElement("p");
  sides.className = "verdict-links";
  const leaderboard = document.createElement("a");
  leaderboard.href = "/leaderboard";
  leaderboard.textContent = gettext("See the leaderboard");
  sides.append(interpolate(gettext("A was %(a)s, B was %(b)s."), { a: models.a.name, b: models.b.name }, true) + " ", leaderboard);
  verdictEl.replaceChildren(main, sides);
}

function clearVerdict() { verdictEl.replaceChildren(); }

/* Reactions are open on a battle whose answers are complete (votable, or voted already). */
function syncReactions(data) {
  codeRunners(data);  // Run buttons on a complete answer's code blocks (run.js)
  if (data && (data.votable || data.state === "voted")) reactionsOpen(data, api);
  else reactionsClose();
}

/* A battle on the page: the vote dock sticks to the bottom of the viewport (arena.css). */
function setShown(shown) { root.dataset.shown = shown ? "true" : "false"; }

function renderTurns(turns) {
  renderPrompt(turns, (battle && battle.images) || []);
  renderSide("a", turns);
  renderSide("b", turns);
}

function showBattle(data) {
  battle = data;
  renderTurns(data.turns);
  resetNames();
  setShown(true);
  voteButtons.forEach((b) => b.classList.remove("chosen"));
  clearVerdict();
  nextButton.hidden = true;
  if (data.source === "mixed" && data.state === "streaming") {
    setVotingEnabled(false);
    setStatus(gettext("One model is answering…"));
    mixedStream = streamMixed(data, { render: renderTurns, status: setStatus, done: mixedDone });
    return;
  }
  setVotingEnabled(data.votable);
  syncReactions(data);
  if (!data.votable) setStatus(gettext("This battle cannot be voted on."), true);
  else if (termsDeclined()) setStatus(TERMS_HINT, true);  // keep saying why a vote asks first
  else setStatus("");
}

/* A mixed battle's live side has ended: vote as on any battle, or go on if it failed. */
function mixedDone(data) {
  mixedStream = null;
  if (data && data.id === battle.id) battle = data;
  if (data && data.votable) {
    setVotingEnabled(true);
    syncReactions(data);
    setStatus(termsDeclined() ? TERMS_HINT : gettext("Both answers are complete. Vote for the better one."), termsDeclined());
    return;
  }
  if (data) setStatus(gettext("An answer failed or was stopped, so this battle cannot be voted on."), true);
  nextButton.hidden = false;
}

async function newBattle(scrollUp) {
  if (busy) return;
  if (mixedStream) { mixedStream.cancel(); mixedStream = null; }
  busy = true;
  setVotingEnabled(false);
  setStatus(gettext("Loading a new battle…"));
  try {
    showBattle(await api("POST", "/api/battles"));
    // The next battle starts at its prompt, not where the last one's vote left the page.
    if (scrollUp) root.scrollIntoView({ block: "start" });
  } catch (error) {
    setStatus(error.message, true);
  } finally {
    busy = false;
  }
}

/* The terms: acceptance is recorded only from the "I agree" button. Escape (the dialog's
   cancel) or "Not now" closes the dialog without it: the answers can be read, and the next
   vote (or "Read the terms to vote") shows the terms again. Resolves to whether they are
   accepted. */
const TERMS_HINT = gettext("You have not agreed to the terms, so you cannot vote yet. Voting shows them again.");
let termsPending = null;
let settleTerms = null;
function termsDeclined() { return !termsAccepted && !termsOpenButton.hidden; }
/* Settles the pending promise as soon as the dialog closes, however it closes. The dialog's
   "close" event comes a task later, so a key pressed just after Escape ("2" to vote) would
   still find the old promise pending and get its "no" without the terms shown again. */
function termsClosed() {
  if (!settleTerms) return;
  const settle = settleTerms;
  settleTerms = null;
  termsPending = null;
  termsOpenButton.hidden = termsAccepted;
  if (!termsAccepted) setStatus(TERMS_HINT, true);
  else if (statusEl.textContent === TERMS_HINT) setStatus("");
  settle(termsAccepted);
}
function closeTerms(returnValue) {
  termsDialog.close(returnValue);
  termsClosed();
}
export function ensureTerms() {
  if (termsAccepted) return Promise.resolve(true);
  if (termsPending) return termsPending;
  termsPending = new Promise((resolve) => { settleTerms = resolve; });
  termsError.hidden = true;
  termsDialog.showModal();
  return termsPending;
}

async function acceptTerms() {
  termsAcceptButton.disabled = true;
  try {
    await api("POST", "/api/terms", { accept: true });
    termsAccepted = true;
    closeTerms("accepted");
  } catch (error) {
    termsError.textContent = error.message;
    termsError.hidden = false;
  } finally {
    termsAcceptButton.disabled = false;
  }
}

termsAcceptButton.addEventListener("click", acceptTerms);
$("terms-later").addEventListener("click", () => closeTerms());
termsDialog.addEventListener("cancel", (event) => { event.preventDefault(); closeTerms(); });  // Escape
// Any other way it closed; a close event queued before the terms were shown again is old news.
termsDialog.addEventListener("close", () => { if (!termsDialog.open) termsClosed(); });
termsOpenButton.addEventListener("click", () => ensureTerms());

async function vote(winner) {
  if (!battle || busy || !battle.votable) return;
  if (!(await ensureTerms())) return;
  if (!battle || busy || !battle.votable) return;
  busy = true;
  setVotingEnabled(false);
  try {
    const data = await postVote(winner);
    battle = data;
    voteButtons.forEach((b) => b.classList.toggle("chosen", b.dataset.winner === winner));
    revealNames(data.models);
    showVerdict(winner, data.models);
    verdictEl.appendChild(shareBlock(data.id, api));
    nextButton.hidden = false;
    setStatus("");
    root.dispatchEvent(new CustomEvent("arena:voted", { detail: data }));
    nextButton.focus();
  } catch (error) {
    setStatus(error.message, true);
    if (error.code === "terms_required") termsAccepted = false;  // e.g. new terms meanwhile
    if (error.code !== "already_voted" && error.code !== "not_votable") setVotingEnabled(true);
  } finally {
    busy = false;
  }
}

voteButtons.forEach((b) => b.addEventListener("click", () => vote(b.dataset.winner)));
function next() {
  if (liveMode) root.dispatchEvent(new CustomEvent("arena:next"));
  else newBattle(true);
}
nextButton.addEventListener("click", next);

/* Live battles: the battle being voted on, and whether voting is open. */
export function setBattle(data) {
  battle = data;
  setShown(Boolean(data));
  voteButtons.forEach((b) => b.classList.remove("chosen"));
  clearVerdict();
  nextButton.hidden = true;
  setVotingEnabled(Boolean(data && data.votable));
  syncReactions(data);
}

const KEYS = { "1": "model_a", "2": "model_b", "3": "tie", "4": "tie (bothbad)" };
document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const tag = (event.target.tagName || "").toLowerCase();
  if (tag === "input" || tag === "textarea" || termsDialog.open) return;
  if (KEYS[event.key] && battle && battle.votable) { event.preventDefault(); vote(KEYS[event.key]); }
  else if ((event.key === "n" || event.key === "N") && !nextButton.hidden) { event.preventDefault(); next(); }
});

// A pool battle is fetched behind the terms, so a visitor who closes them can read it.
challengePassed().catch(() => {});  // a vote tries again and says what failed
ensureTerms();
if (!liveMode) newBattle();
