/* Images attached to a live prompt: chosen with the file input (a phone offers its camera roll
   and camera), pasted, or dropped onto the prompt form. Each is uploaded at once to
   POST /api/images, which checks it and stores it re-encoded; the ids go with the start frame
   (live.js: `images`). A refused file shows the server's message and is not attached. */
import { gettext, interpolate } from "./i18n.js";

const box = document.getElementById("attach");
const items = [];  // [{id: string|null, pending: Promise, element}]

function csrfToken() {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return match ? decodeURIComponent(match[1]) : "";
}

function showError(text) {
  const error = document.getElementById("attach-error");
  error.textContent = text;
  error.hidden = !text;
}

function maxImages() { return Number(box.dataset.maxImages) || 4; }

async function upload(file) {
  const body = new FormData();
  body.append("image", file, file.name || "pasted-image");
  const response = await fetch("/api/images", {
    method: "POST",
    credentials: "same-origin",
    headers: { "X-CSRFToken": csrfToken() },
    body: body,
  });
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (!response.ok) {
    throw new Error(data && data.error ? data.error.message : interpolate(
      gettext("The image could not be uploaded (%(status)s)."), { status: response.status }, true));
  }
  return data;
}

function remove(item) {
  const index = items.indexOf(item);
  if (index >= 0) items.splice(index, 1);
  item.element.remove();
}

function add(file) {
  if (items.length >= maxImages()) {
    showError(interpolate(gettext("A prompt has at most %(limit)s images."), { limit: maxImages() }, true));
    return;
  }
  const element = document.createElement("li");
  element.className = "attach-item";
  element.setAttribute("data-testid", "attach-item");
  const label = document.createElement("span");
  label.className = "attach-name";
  const name = file.name || gettext("Pasted image");
  label.textContent = interpolate(gettext("%(name)s (uploading…)"), { name: name }, true);
  const drop = document.createElement("button");
  drop.type = "button";
  drop.className = "attach-remove";
  drop.textContent = gettext("Remove");
  drop.setAttribute("aria-label", interpolate(gettext("Remove %(name)s"), { name: name }, true));
  element.append(label, drop);
  document.getElementById("attach-list").appendChild(element);
  const item = { id: null, element: element, pending: null };
  drop.addEventListener("click", () => remove(item));
  items.push(item);
  item.pending = upload(file).then((data) => {
    item.id = data.id;
    element.dataset.imageId = data.id;
    const thumb = document.createElement("img");
    thumb.src = data.url;
    thumb.alt = name;
    thumb.width = 48;
    thumb.height = Math.max(1, Math.round(48 * data.height / data.width));
    thumb.className = "attach-thumb";
    element.prepend(thumb);
    label.textContent = interpolate(gettext("%(name)s (%(width)s×%(height)s)"),
      { name: name, width: data.width, height: data.height }, true);
  }, (error) => {
    remove(item);
    showError(error.message);
  });
}

function addFiles(files) {
  showError("");
  Array.from(files || []).forEach(add);
}

/* The ids of the attached images once every upload has ended (a refused one is dropped). */
export async function attachedImageIds() {
  if (!box) return [];
  await Promise.all(items.map((item) => item.pending));
  return items.filter((item) => item.id).map((item) => item.id);
}

/* Empty the list: the images went with a prompt (each is sent with one battle only). */
export function clearAttachments() {
  items.slice().forEach(remove);
  showError("");
}

if (box) {
  const input = document.getElementById("attach-input");
  input.addEventListener("change", () => { addFiles(input.files); input.value = ""; });
  const form = box.closest("form") || box;
  form.addEventListener("paste", (event) => {
    const files = Array.from(event.clipboardData ? event.clipboardData.files : []);
    if (files.length) { event.preventDefault(); addFiles(files); }
  });
  form.addEventListener("dragover", (event) => {
    if (event.dataTransfer && Array.from(event.dataTransfer.types).includes("Files")) {
      event.preventDefault();
      form.classList.add("attach-over");
    }
  });
  form.addEventListener("dragleave", () => form.classList.remove("attach-over"));
  form.addEventListener("drop", (event) => {
    form.classList.remove("attach-over");
    if (event.dataTransfer && event.dataTransfer.files.length) {
      event.preventDefault();
      addFiles(event.dataTransfer.files);
    }
  });
}
