// Leaderboard controls: apply a new category or style setting as soon as it changes.
// Without JavaScript the form's Apply button does the same (a plain GET). An ES module.
import { gettext, interpolate, ngettext } from "./i18n.js";

const form = document.querySelector("[data-testid=leaderboard-controls]");
if (form) {
  form.classList.add("js-live");
  form.addEventListener("change", function (event) {
    if (event.target.matches("select, input[type=checkbox]")) form.requestSubmit();
  });
}

// Search: hide the rows whose name, slug and organisation do not hold every typed word.
// The box is hidden in the HTML, so a visitor without JavaScript sees every row and no box.
const search = document.querySelector("[data-testid=model-search]");
if (search) {
  const rows = Array.from(document.querySelectorAll("tr[data-search]"));
  const count = document.querySelector("[data-testid=search-count]");
  const empty = document.querySelector("[data-testid=search-empty]");
  search.closest("[hidden]")?.removeAttribute("hidden");
  const filter = function () {
    const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    let shown = 0;
    for (const row of rows) {
      const hay = row.dataset.search || "";
      const match = words.every((word) => hay.includes(word));
      row.hidden = !match;
      if (match && row.closest("[data-testid=leaderboard-table]")) shown += 1;
    }
    const total = rows.filter((r) => r.closest("[data-testid=leaderboard-table]")).length;
    if (count) count.textContent = words.length
      ? interpolate(ngettext("%(shown)s of %(total)s rated model", "%(shown)s of %(total)s rated models", total), { shown, total }, true)
      : "";
    if (empty) empty.hidden = shown > 0 || total === 0;
  };
  search.addEventListener("input", filter);
  filter();
}

// Sortable columns: each header with data-sort-key becomes a button; a click (or Enter or
// Space, as for any button) sorts by it, a second click reverses; aria-sort says the order.
const number = (row, key) => {
  if (key === "rank") return Number(row.dataset.order);
  if (key === "interval") return Number(row.dataset.minus) + Number(row.dataset.plus);
  return Number(row.dataset[key]);
};
for (const table of document.querySelectorAll("table[data-sortable]")) {
  const body = table.tBodies[0];
  const headers = Array.from(table.querySelectorAll("th[data-sort-key]"));
  for (const th of headers) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "sort-button";
    button.dataset.testid = `sort-${th.dataset.sortKey}`;
    button.append(...th.childNodes);
    th.append(button);
    button.addEventListener("click", function () {
      const current = th.getAttribute("aria-sort");
      const first = th.dataset.sortFirst || "ascending";
      const order = current === first ? (first === "ascending" ? "descending" : "ascending") : first;
      for (const other of headers) other.removeAttribute("aria-sort");
      th.setAttribute("aria-sort", order);
      const key = th.dataset.sortKey;
      const sign = order === "ascending" ? 1 : -1;
      const sorted = Array.from(body.rows).sort(
        (a, b) => sign * (number(a, key) - number(b, key)) || number(a, "rank") - number(b, "rank"),
      );
      body.append(...sorted);
    });
  }
}
