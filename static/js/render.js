/* Markdown rendering for model text. markdown-it runs with raw HTML off, and its output goes
   through DOMPurify before it reaches the DOM, so model text never runs as HTML or script. */
(function () {
  "use strict";
  const md = window.markdownit({ html: false, linkify: false, breaks: false });
  const purifyConfig = {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed"],
    FORBID_ATTR: ["style"],
  };
  window.DOMPurify.addHook("afterSanitizeAttributes", function (node) {
    if (node.tagName === "A") {
      node.setAttribute("rel", "noopener noreferrer nofollow");
      node.setAttribute("target", "_blank");
    }
  });
  function renderMarkdown(text) {
    return window.DOMPurify.sanitize(md.render(text || ""), purifyConfig);
  }
  function setMarkdown(element, text) {
    element.innerHTML = renderMarkdown(text);
  }
  window.ArenaRender = { renderMarkdown: renderMarkdown, setMarkdown: setMarkdown };
})();
