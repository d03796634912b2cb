// The problem list: marks the problems solved in this browser.

import { isSolved } from "./storage.js";

for (const row of document.querySelectorAll("[data-slug]")) {
  const solved = isSolved(row.dataset.slug);
  row.dataset.solved = String(solved);
  row.querySelector(".solved").textContent = solved ? "✓ solved" : "";
}
