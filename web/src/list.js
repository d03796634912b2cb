// The problem list: how many are solved, and which problems are solved or have a draft.

import { hasDraft, isSolved } from "./storage.js";

const rows = [...document.querySelectorAll("[data-slug]")];
let solved = 0;
for (const row of rows) {
  const slug = row.dataset.slug;
  const done = isSolved(slug);
  const draft = !done && hasDraft(slug);
  solved += done;
  row.dataset.solved = String(done);
  row.dataset.draft = String(draft);
  row.querySelector(".solved").textContent = done ? "✓ solved" : draft ? "✎ draft saved" : "";
}
document.querySelector("[data-testid=progress]").textContent =
  `${solved} of ${rows.length} problems solved in this browser.`;
