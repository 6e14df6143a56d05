/* Markdown rendering for model text. markdown-it runs with raw HTML off, and its output goes
   through DOMPurify before it reaches the DOM, so model text never runs as HTML or script.
   An ES module. The vendored markdown-it and DOMPurify are UMD files that the page loads as
   classic scripts before any module (module scripts run after them); this is the one module
   that reads their globals. */
import { gettext, interpolate } from "./i18n.js";

const md = window.markdownit({ html: false, linkify: false, breaks: false });
/* A markdown image becomes a link to it: an <img> would make the voter's browser fetch any
   URL a model (or a prompt injected into it) names, before the vote, with no click. */
md.renderer.rules.image = function (tokens, idx, options, env, self) {
  const token = tokens[idx];
  const alt = self.renderInlineAsText(token.children, options, env) || gettext("image");
  const src = md.utils.escapeHtml(token.attrGet("src") || "");
  const shown = interpolate(gettext("[image: %(alt)s]"), { alt: alt }, true);
  return '<a href="' + src + '">' + md.utils.escapeHtml(shown) + "</a>";
};
/* Table column alignment as a class, not the style attribute markdown-it writes: the
   Content-Security-Policy (style-src 'self') blocks inline styles, even in DOMPurify's parse. */
md.core.ruler.push("align_classes", function (state) {
  state.tokens.forEach(function (token) {
    const align = /^text-align:(left|center|right)$/.exec(token.attrGet("style") || "");
    if (!align) return;
    token.attrs = token.attrs.filter(function (attr) { return attr[0] !== "style"; });
    token.attrJoin("class", "align-" + align[1]);
  });
});
const purifyConfig = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed", "img", "picture", "video", "audio", "source"],
  FORBID_ATTR: ["style"],
};
window.DOMPurify.addHook("afterSanitizeAttributes", function (node) {
  if (node.tagName === "A") {
    node.setAttribute("rel", "noopener noreferrer nofollow");
    node.setAttribute("target", "_blank");
  }
});
export function renderMarkdown(text) {
  return window.DOMPurify.sanitize(md.render(text || ""), purifyConfig);
}
export function setMarkdown(element, text) {
  element.innerHTML = renderMarkdown(text);
  // A code block scrolls sideways rather than wrap: keyboard users reach it to scroll it.
  element.querySelectorAll("pre").forEach((pre) => { pre.tabIndex = 0; });
}
/* "Turn N" label, shown only when a battle has more than one turn. */
export function turnLabel(index, count) {
  if (count <= 1) return null;
  const label = document.createElement("div");
  label.className = "turn-label";
  label.textContent = interpolate(gettext("Turn %(number)s"), { number: index + 1 }, true);
  return label;
}
/* One side's answer to one turn: a labelled block whose body receives markdown. */
export function turnBlock(index, count) {
  const block = document.createElement("div");
  block.className = "turn";
  block.dataset.turn = String(index);
  const label = turnLabel(index, count);
  if (label) block.appendChild(label);
  const body = document.createElement("div");
  body.className = "markdown";
  block.appendChild(body);
  return { block: block, body: body };
}
