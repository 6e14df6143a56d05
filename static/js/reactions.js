/* Reactions on each answer: a thumbs up or down, then the reasons that go with it. Each change
   is saved at once (PUT /api/battles/<id>/reactions/<side>); the server keeps one reaction per
   side and marks those given after the vote. The reasons come from the page (the .battle
   element's data-reaction-tags: the staff's active tags as JSON). */
import { gettext } from "./i18n.js";

const $ = (id) => document.getElementById(id);
const battleRoot = document.querySelector(".battle");
const TAGS = battleRoot && battleRoot.dataset.reactionTags
  ? JSON.parse(battleRoot.dataset.reactionTags) : { up: [], down: [] };

let battleId = null;
let request = null;  // api(method, url, body), from battle.js
const state = { a: null, b: null };  // side -> {liked, tags} or null

function button(label, testid, extra) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "reaction " + (extra || "");
  b.setAttribute("aria-pressed", "false");
  b.dataset.testid = testid;
  b.setAttribute("data-testid", testid);
  b.textContent = label;
  return b;
}

function render(side) {
  const bar = $("reactions-" + side);
  if (!bar) return;
  const current = state[side];
  bar.querySelectorAll("button.thumb").forEach((b) => {
    const pressed = current !== null && String(current.liked) === b.dataset.liked;
    b.setAttribute("aria-pressed", pressed ? "true" : "false");
  });
  const tags = bar.querySelector(".reaction-tags");
  tags.replaceChildren();
  tags.hidden = current === null;
  if (current === null) return;
  (current.liked ? TAGS.up : TAGS.down).forEach((tag) => {
    const chip = button(tag.label, "reaction-tag-" + side + "-" + tag.slug, "chip");
    chip.setAttribute("aria-pressed", current.tags.includes(tag.slug) ? "true" : "false");
    chip.addEventListener("click", () => toggleTag(side, tag.slug));
    tags.appendChild(chip);
  });
}

/* Saves of one side go one after another, each sending the side's state as it is then: two
   quick clicks (a thumb, then a reason) may not reach the server in the other order. */
const saving = { a: Promise.resolve(), b: Promise.resolve() };
function save(side) {
  saving[side] = saving[side].then(() => send(side));
}

async function send(side) {
  const status = $("reactions-" + side).querySelector(".reaction-status");
  const current = state[side];
  try {
    await request("PUT", "/api/battles/" + battleId + "/reactions/" + side,
      current === null ? { liked: null } : { liked: current.liked, tags: current.tags });
    status.textContent = current === null ? "" : gettext("Saved.");
  } catch (error) {
    status.textContent = error.message;
  }
}

function setThumb(side, liked) {
  const current = state[side];
  state[side] = current !== null && current.liked === liked ? null : { liked: liked, tags: [] };
  render(side);
  save(side);
}

function toggleTag(side, slug) {
  const current = state[side];
  if (current === null) return;
  const at = current.tags.indexOf(slug);
  if (at >= 0) current.tags.splice(at, 1);
  else current.tags.push(slug);
  render(side);
  save(side);
}

function build(side) {
  const bar = $("reactions-" + side);
  if (!bar || bar.dataset.built) return;
  bar.dataset.built = "true";
  const thumbs = document.createElement("div");
  thumbs.className = "thumbs";
  const up = button("👍 " + gettext("Good answer"), "react-up-" + side, "thumb");
  up.dataset.liked = "true";
  const down = button("👎 " + gettext("Poor answer"), "react-down-" + side, "thumb");
  down.dataset.liked = "false";
  up.addEventListener("click", () => setThumb(side, true));
  down.addEventListener("click", () => setThumb(side, false));
  thumbs.append(up, down);
  const tags = document.createElement("div");
  tags.className = "reaction-tags";
  tags.setAttribute("role", "group");
  tags.setAttribute("aria-label", gettext("Why?"));
  tags.hidden = true;
  const status = document.createElement("span");
  status.className = "reaction-status";
  status.setAttribute("role", "status");
  bar.append(thumbs, tags, status);
}

/* A battle whose answers are complete: reactions open (cleared for a new battle). */
export function reactionsOpen(battle, api) {
  request = api;
  if (battleId !== battle.id) {
    battleId = battle.id;
    state.a = null;
    state.b = null;
  }
  ["a", "b"].forEach((side) => {
    build(side);
    const bar = $("reactions-" + side);
    if (!bar) return;
    bar.hidden = false;
    bar.querySelector(".reaction-status").textContent = "";
    render(side);
  });
}

/* No battle, or one whose answers are not complete yet. */
export function reactionsClose() {
  ["a", "b"].forEach((side) => {
    const bar = $("reactions-" + side);
    if (bar) bar.hidden = true;
  });
}
