/* The red-team board's opt-in form: POST /api/redteam/profile with the pseudonym and whether
   the player is shown; the API's message (it names the field) is shown as text when refused. */
import { gettext } from "./i18n.js";

const form = document.getElementById("rt-profile");
const pseudonym = document.getElementById("rt-pseudonym");
const onBoard = document.getElementById("rt-on-board");
const statusEl = document.getElementById("rt-profile-status");

function csrfToken() {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return match ? decodeURIComponent(match[1]) : "";
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  statusEl.textContent = gettext("Saving…");
  pseudonym.removeAttribute("aria-invalid");
  let response;
  try {
    response = await fetch("/api/redteam/profile", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify({ pseudonym: pseudonym.value, on_board: onBoard.checked }),
    });
  } catch {
    statusEl.textContent = gettext("The arena could not be reached. Try again.");
    return;
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = body.error || {};
    if (error.field === "pseudonym") {
      pseudonym.setAttribute("aria-invalid", "true");
      pseudonym.focus();
    }
    statusEl.textContent = error.message || gettext("That did not work. Try again.");
    return;
  }
  pseudonym.value = body.pseudonym;
  onBoard.checked = body.on_board;
  statusEl.textContent = body.on_board
    ? gettext("Saved: you are on the players' board.")
    : gettext("Saved: you are not on the players' board.");
});
