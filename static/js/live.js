/* Live battles: send a prompt over the battle websocket, stream both answers side by side,
   then vote through battle.js (one vote path: this module carries it over the open socket, a
   "vote" frame answered by "voted" or an error frame replying to it; HTTP when the socket is
   closed). Frames are documented in arena/live/consumer.py. Model text is rendered only through render.js (markdown-it with HTML off,
   then DOMPurify); prompts and errors are set as text. battle.js tells this module of a vote
   and of "Next battle" by the "arena:voted" and "arena:next" events on the .battle element. */
import { ensureTerms, renderPrompt, resetNames, revealNames, setBattle, setStatus, setVoteTransport } from "./battle.js";
import { gettext, interpolate } from "./i18n.js";
import { setMarkdown, turnBlock } from "./render.js";
import { attachedImageIds, clearAttachments } from "./attach.js";

const root = document.querySelector(".battle");
if (root.dataset.mode === "live") startLive();  // pool battles are battle.js's alone

function startLive() {
  const $ = (id) => document.getElementById(id);
  const SIDES = ["a", "b"];
  const form = $("prompt-form");
  const input = $("prompt-input");
  const sendButton = $("send");
  const stopButton = $("stop");
  const regenButton = $("regenerate");
  const newButton = $("new-battle");
  const suggestButton = $("suggest");
  const namedPicker = $("named-picker");
  const picks = { a: $("pick-a"), b: $("pick-b") };

  let socket = null;
  let opening = null;
  let battle = null;       // the latest battle payload from the server
  let turns = [];          // [{index, prompt, a: {text, status, error}, b: {...}}]
  let streaming = false;
  let voted = false;
  let dirty = new Set();
  let frameRequested = false;
  let pendingVote = null;  // {battleId, resolve, reject}: a vote sent over the socket

  function mode() {
    const checked = document.querySelector("input[name=mode]:checked");
    return checked ? checked.value : "anonymous";
  }

  // --- the socket ---------------------------------------------------------------------------
  function connect() {
    if (socket && socket.readyState === WebSocket.OPEN) return Promise.resolve(socket);
    if (opening) return opening;
    opening = new Promise((resolve, reject) => {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      const ws = new WebSocket(scheme + "//" + location.host + "/ws/battle");
      ws.addEventListener("open", () => { socket = ws; opening = null; resolve(ws); });
      ws.addEventListener("message", (event) => onFrame(JSON.parse(event.data)));
      ws.addEventListener("close", () => {
        const wasOpen = socket === ws;
        if (wasOpen) socket = null;
        opening = null;
        if (wasOpen) settleVote(null, socketClosed());
        if (!wasOpen) { reject(new Error(gettext("Could not connect to the arena."))); return; }
        if (streaming) {
          streaming = false;
          SIDES.forEach((side) => setSideStatus(side, gettext("Interrupted.")));
          setStatus(gettext("The connection was lost; what was produced is saved. Start a new battle."), true);
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

  /* battle.js's vote over the open socket: a promise of the voted battle, or null (the socket
     is not open, or the vote is for another battle) for battle.js to vote over HTTP. */
  function voteOverSocket(battleId, body) {
    if (!socket || socket.readyState !== WebSocket.OPEN || pendingVote) return null;
    if (!battle || battle.id !== battleId) return null;
    const answer = new Promise((resolve, reject) => { pendingVote = { battleId, resolve, reject }; });
    socket.send(JSON.stringify(Object.assign({ type: "vote", battle_id: battleId }, body)));
    return answer;
  }

  function socketClosed() {
    const error = new Error(gettext("Could not connect to the arena."));
    error.code = "socket_closed";  // battle.js votes over HTTP instead
    return error;
  }

  // The vote's answer (a voted battle, or an error as battle.js's api() throws it).
  function settleVote(voted, error) {
    const pending = pendingVote;
    if (!pending) return;
    pendingVote = null;
    if (error) pending.reject(error);
    else pending.resolve(voted);
  }

  function onVoteAnswer(frame) {
    if (!pendingVote) return;
    if (frame.type === "voted") {
      if (frame.battle.id === pendingVote.battleId) settleVote(frame.battle, null);
      return;
    }
    if (frame.battle_id !== undefined && frame.battle_id !== pendingVote.battleId) return;
    const error = new Error(frame.message);
    error.code = frame.code;
    settleVote(null, error);
  }

  // --- frames from the server -----------------------------------------------------------------
  function onFrame(frame) {
    switch (frame.type) {
      case "turn_start": return onTurnStart(frame);
      case "deltas": return onDeltas(frame);
      case "side_end": return onSideEnd(frame);
      case "turn_end": return onTurnEnd(frame);
      case "models": return fillPicker(frame.models);
      case "suggestion": return onSuggestion(frame);
      case "voted": return onVoteAnswer(frame);
      case "error": return frame.reply_to === "vote" ? onVoteAnswer(frame) : onError(frame);
      default: return undefined;
    }
  }

  function onTurnStart(frame) {
    const fresh = !battle || battle.id !== frame.battle.id;
    battle = frame.battle;
    if (fresh) {
      turns = [];
      voted = false;
      resetNames();
    }
    const entry = {
      index: frame.turn, prompt: frame.prompt,
      a: { text: "", status: "streaming", error: "" }, b: { text: "", status: "streaming", error: "" },
    };
    turns = turns.filter((t) => t.index < frame.turn);  // a regenerated turn replaces the last
    turns.push(entry);
    streaming = true;
    setBattle(Object.assign({}, battle, { votable: false }));
    if (battle.models) revealNames(battle.models);  // named mode: the visitor chose them
    renderPrompt(turns, battle.images || []);
    SIDES.forEach((side) => { renderSide(side); setSideStatus(side, gettext("Answering…")); });
    setStatus(frame.regenerated ? gettext("Regenerating both answers…") : gettext("Both models are answering…"));
    input.value = "";
    if (fresh) clearAttachments();
    updateButtons();
    showAnswers(frame.turn);
  }

  /* The answers come into view as they start (on a phone the form fills the screen): the
     first turn from the top of the answers, a follow-up from its own block in side A. */
  function showAnswers(index) {
    const block = $("response-a").querySelector('.turn[data-turn="' + index + '"]');
    const target = index > 0 && block ? block : $("sides");
    // At once, not smoothly: a smooth scroll is cancelled by the layout changes of the first
    // tokens (Chromium stops it midway on a busy machine), leaving the answers below the fold.
    target.scrollIntoView({ block: "start", behavior: "auto" });
    // Before the first tokens the page may be too short to bring the answers up that far: the
    // scroll is made again as they are drawn, until the answers reach the top, unless the page
    // has been scrolled since by anything else (the visitor, or a click that brought a button
    // into view), which the scroll must never take back.
    showPending = target;
    shownAt = window.scrollY;
  }

  let showPending = null;
  let shownAt = 0;  // the page's scroll position this module's last scroll left it at
  ["wheel", "touchstart", "touchmove", "pointerdown", "keydown"].forEach((type) =>
    window.addEventListener(type, () => { showPending = null; }, { passive: true }));

  function current() { return turns[turns.length - 1]; }

  // One frame carries the next text of each side that has some: {type, a?, b?}.
  function onDeltas(frame) {
    const turn = current();
    if (!turn) return;
    ["a", "b"].forEach((side) => {
      if (typeof frame[side] !== "string" || !turn[side]) return;
      turn[side].text += frame[side];
      dirty.add(side);
    });
    if (!frameRequested) {
      frameRequested = true;
      requestAnimationFrame(flush);
    }
  }

  function flush() {
    frameRequested = false;
    dirty.forEach((side) => renderCurrent(side));
    dirty = new Set();
    if (showPending && window.scrollY !== shownAt) showPending = null;
    if (showPending) {
      showPending.scrollIntoView({ block: "start", behavior: "auto" });
      shownAt = window.scrollY;
      if (Math.abs(showPending.getBoundingClientRect().top) <= 1) showPending = null;
    }
  }

  const SIDE_ENDS = { done: gettext("Done."), aborted: gettext("Stopped."), error: gettext("Failed.") };

  function onSideEnd(frame) {
    const turn = current();
    if (!turn) return;
    turn[frame.side].status = frame.status;
    turn[frame.side].error = frame.error || "";
    renderCurrent(frame.side);
    const note = SIDE_ENDS[frame.status] || "";
    setSideStatus(frame.side, frame.error ? note + " " + frame.error : note);
    // One side failing while the other still streams is said at once, not at the turn's end.
    const other = frame.side === "a" ? "b" : "a";
    if (frame.status === "error" && streaming && turn[other].status === "streaming") {
      const names = { side: frame.side.toUpperCase(), other: other.toUpperCase() };
      const text = frame.error
        ? interpolate(gettext("Model %(side)s failed (%(reason)s); Model %(other)s is still answering. This battle cannot be voted on."),
          Object.assign({ reason: frame.error.replace(/\.$/, "") }, names), true)
        : interpolate(gettext("Model %(side)s failed; Model %(other)s is still answering. This battle cannot be voted on."), names, true);
      setStatus(text, true);
    }
  }

  function onTurnEnd(frame) {
    // The end of a battle the visitor has left ("New battle" while it streamed) changes nothing.
    if (!battle || battle.id !== frame.battle.id) return;
    battle = frame.battle;
    streaming = false;
    // The saved texts are authoritative (and hold anything a lost frame missed).
    const saved = battle.turns[battle.turns.length - 1];
    const turn = current();
    if (saved && turn) {
      SIDES.forEach((side) => {
        if (saved[side]) { turn[side].text = saved[side].content; turn[side].status = saved[side].status; }
        renderCurrent(side);
      });
    }
    setBattle(battle);
    if (battle.state === "ready") {
      setStatus(gettext("Both answers are complete. Vote for the better one, or ask a follow-up."));
    } else if (battle.state === "errored") {
      setStatus(gettext("A model failed to answer, so this battle cannot be voted on. Regenerate, or start a new battle."), true);
      newButton.focus();
    } else if (battle.state === "aborted") {
      setStatus(gettext("The answers were stopped, so this battle cannot be voted on. Regenerate, or start a new battle."), true);
    }
    updateButtons();
  }

  function onError(frame) {
    if (frame.code === "turn_lost") {
      // The turn's end is not saved yet: nothing to vote on, but it can be regenerated (the
      // server saves it first), and a turn_end follows if the save lands meanwhile.
      streaming = false;
      if (battle) battle = Object.assign({}, battle, { state: "aborted", votable: false });
      setBattle(battle);
    }
    setStatus(frame.message, true);
    if (frame.field === "prompt") input.focus();
    updateButtons();
  }

  function onSuggestion(frame) {
    if (frame.prompt) { input.value = frame.prompt; input.focus(); }
    else setStatus(gettext("No suggested prompts are available."), true);
  }

  function fillPicker(models) {
    SIDES.forEach((side, i) => {
      const select = picks[side];
      select.replaceChildren();
      models.forEach((m) => {
        const option = document.createElement("option");
        option.value = m.slug;
        option.textContent = m.organization ? m.name + " (" + m.organization + ")" : m.name;
        select.appendChild(option);
      });
      if (models.length > i) select.selectedIndex = i;
    });
  }

  // --- rendering ----------------------------------------------------------------------------
  function setSideStatus(side, text) { $("side-status-" + side).textContent = text; }

  function renderSide(side) {
    const container = $("response-" + side);
    container.replaceChildren();
    turns.forEach((turn) => {
      const parts = turnBlock(turn.index, turns.length);
      container.appendChild(parts.block);
      setMarkdown(parts.body, turn[side].text);
    });
  }

  function renderCurrent(side) {
    const turn = current();
    const container = $("response-" + side);
    const block = container.querySelector('.turn[data-turn="' + turn.index + '"] .markdown');
    if (!block) { renderSide(side); return; }
    setMarkdown(block, turn[side].text);
    block.classList.toggle("streaming", turn[side].status === "streaming");
  }

  function updateButtons() {
    const ended = battle && ["ready", "aborted", "errored"].includes(battle.state);
    stopButton.disabled = !streaming;
    regenButton.disabled = streaming || voted || !ended;
    sendButton.disabled = streaming;
    sendButton.textContent = canFollowUp() ? gettext("Send follow-up") : gettext("Send");
  }

  function canFollowUp() {
    return Boolean(battle && battle.state === "ready" && !voted);
  }

  // --- actions --------------------------------------------------------------------------------
  async function submit(event) {
    if (event) event.preventDefault();
    if (streaming) return;
    const prompt = input.value.trim();
    if (!prompt) { setStatus(gettext("Type a prompt first."), true); input.focus(); return; }
    if (!(await ensureTerms())) return;  // prompts may be published: the terms say so
    if (canFollowUp()) {
      await send({ type: "turn", battle_id: battle.id, prompt: prompt });
      return;
    }
    const frame = { type: "start", prompt: prompt, mode: mode() };
    if (frame.mode === "named") frame.models = [picks.a.value, picks.b.value];
    const images = await attachedImageIds();
    if (images.length) frame.images = images;
    await send(frame);
  }

  function startOver() {
    if (streaming) send({ type: "stop" });
    battle = null;
    turns = [];
    voted = false;
    streaming = false;
    setBattle(null);
    resetNames();
    renderPrompt([]);
    SIDES.forEach((side) => { $("response-" + side).replaceChildren(); setSideStatus(side, ""); });
    setStatus(gettext("New battle: type a prompt."));
    updateButtons();
    input.focus();
  }

  form.addEventListener("submit", submit);
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) submit(event);
  });
  stopButton.addEventListener("click", () => send({ type: "stop" }));
  regenButton.addEventListener("click", () => {
    if (battle) send({ type: "regenerate", battle_id: battle.id });
  });
  newButton.addEventListener("click", startOver);
  suggestButton.addEventListener("click", () => send({ type: "suggest" }));
  // Code mode: a programming task whose answers can be run (run.js).
  $("suggest-code").addEventListener("click", () => send({ type: "suggest", category: "code" }));
  document.querySelectorAll("input[name=mode]").forEach((radio) => {
    radio.addEventListener("change", () => {
      const named = mode() === "named";
      namedPicker.hidden = !named;
      if (named && !picks.a.options.length) send({ type: "models" });
    });
  });

  setVoteTransport(voteOverSocket);
  root.addEventListener("arena:voted", () => { voted = true; updateButtons(); });
  root.addEventListener("arena:next", startOver);
  updateButtons();
  connect().catch(() => undefined);
}
