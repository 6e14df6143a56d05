/* The language switcher (templates/base.html): a new choice applies at once. Without JavaScript
   the form's button posts the same choice. An ES module. */
const form = document.querySelector("[data-testid=language-form]");
if (form) {
  const apply = form.querySelector("[data-testid=language-apply]");
  if (apply) apply.hidden = true;
  form.querySelector("select").addEventListener("change", function () {
    form.requestSubmit();
  });
}
