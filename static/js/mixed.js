/* Mixed battles on the pool page: a pool prompt, one side a stored answer (in the battle as
   served), the other answered live by a model that is not established yet. The live side
   streams over the battle websocket as in live battles (the consumer's "stream" frame, one per
   pool user turn; its turn_end says "streaming" while turns are left), then battle.js takes the
   vote over HTTP as for every battle. Model text is rendered by battle.js through render.js. */

/* Stream a mixed battle's live side. hooks: render(turns) redraws both sides (payload turns),
   status(text, isError), done(battle) once it can be voted on or has ended (battle is null when
   the socket failed). Returns {cancel()}: the socket is closed, and the server saves what was
   produced as aborted. */
import { gettext, interpolate } from "./i18n.js";

export function streamMixed(battle, hooks) {
  let turns = battle.turns;
  let current = null;  // the turn streaming
  let finished = false;
  let frameRequested = false;
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(scheme + "//" + location.host + "/ws/battle");
  const ask = () => ws.send(JSON.stringify({ type: "stream", battle_id: battle.id }));

  function end(saved) {
    finished = true;
    ws.close();
    hooks.done(saved);
  }

  function redraw() {
    if (frameRequested) return;
    frameRequested = true;
    requestAnimationFrame(() => { frameRequested = false; hooks.render(turns); });
  }

  function liveSide(payload, index) {
    const turn = payload.turns.find((t) => t.index === index);
    if (!turn) return null;
    return ["a", "b"].find((side) => turn[side] && turn[side].status === "streaming") || null;
  }

  function onFrame(frame) {
    if (frame.type === "turn_start") {
      if (frame.battle.id !== battle.id) return;
      turns = frame.battle.turns;
      current = frame.turn;
      hooks.render(turns);
      const side = liveSide(frame.battle, frame.turn);
      hooks.status(side ? interpolate(gettext("Model %(side)s is answering…"), { side: side.toUpperCase() }, true) : gettext("A model is answering…"));
    } else if (frame.type === "deltas") {
      const turn = turns.find((t) => t.index === current);
      if (!turn) return;
      ["a", "b"].forEach((side) => {
        if (typeof frame[side] === "string" && turn[side]) turn[side].content += frame[side];
      });
      redraw();
    } else if (frame.type === "turn_end") {
      if (frame.battle.id !== battle.id) return;
      turns = frame.battle.turns;  // the saved texts are authoritative
      hooks.render(turns);
      if (frame.battle.state === "streaming") ask();  // the next pool turn
      else end(frame.battle);
    } else if (frame.type === "error") {
      hooks.status(frame.message, true);
      end(null);
    }
  }

  ws.addEventListener("open", ask);
  ws.addEventListener("message", (event) => onFrame(JSON.parse(event.data)));
  ws.addEventListener("close", () => {
    if (finished) return;
    finished = true;
    hooks.status(gettext("The connection was lost; what was produced is saved. Take the next battle."), true);
    hooks.done(null);
  });
  return { cancel() { if (!finished) { finished = true; ws.close(); } } };
}
