/* Sharing the outcome after a vote: a public page naming both models and the verdict, with the
   prompt only when the visitor ticks the box (POST /api/battles/<id>/share). */
import { gettext } from "./i18n.js";

export function shareBlock(battleId, api) {
  const block = document.createElement("div");
  block.className = "share-block";
  block.setAttribute("data-testid", "share-block");

  const consent = document.createElement("label");
  consent.className = "share-consent";
  const box = document.createElement("input");
  box.type = "checkbox";
  box.setAttribute("data-testid", "share-include-prompt");
  consent.append(box, " " + gettext("Show my prompt on the shared page"));

  const make = document.createElement("button");
  make.type = "button";
  make.setAttribute("data-testid", "share-make");
  make.textContent = gettext("Get a share link");

  const result = document.createElement("div");
  result.className = "share-result";
  result.hidden = true;
  const field = document.createElement("input");
  field.type = "url";
  field.readOnly = true;
  field.setAttribute("data-testid", "share-url");
  field.setAttribute("aria-label", gettext("Share link"));
  const copy = document.createElement("button");
  copy.type = "button";
  copy.setAttribute("data-testid", "share-copy");
  copy.textContent = gettext("Copy");
  const status = document.createElement("span");
  status.setAttribute("role", "status");
  result.append(field, copy, status);

  make.addEventListener("click", async () => {
    make.disabled = true;
    try {
      const data = await api("POST", "/api/battles/" + battleId + "/share", { include_prompt: box.checked });
      field.value = new URL(data.url, window.location.href).href;
      result.hidden = false;
      status.textContent = "";
      if (navigator.share && window.matchMedia("(pointer: coarse)").matches) {
        navigator.share({ url: field.value }).catch(() => {});  // the visitor may cancel
      }
    } catch (error) {
      status.textContent = error.message;
      result.hidden = false;
    } finally {
      make.disabled = false;
    }
  });
  box.addEventListener("change", () => { result.hidden = true; });  // another choice, another link
  copy.addEventListener("click", async () => {
    field.select();
    try {
      await navigator.clipboard.writeText(field.value);
      status.textContent = gettext("Copied.");
    } catch (error) {
      status.textContent = gettext("Select the link and copy it.");
    }
  });
  block.append(consent, make, result);
  return block;
}
