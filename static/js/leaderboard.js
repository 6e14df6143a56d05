// Leaderboard controls: apply a new category or style setting as soon as it changes.
// Without JavaScript the form's Apply button does the same (a plain GET). An ES module.
const form = document.querySelector("[data-testid=leaderboard-controls]");
if (form) {
  form.classList.add("js-live");
  form.addEventListener("change", function (event) {
    if (event.target.matches("select, input[type=checkbox]")) form.requestSubmit();
  });
}
