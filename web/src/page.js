// A problem page: statement (rendered at build time), editor, Run / Stop / Reset, results.

import { createEditor, getCode, setCode } from "./editor.js";
import { showOutcome } from "./results.js";
import { Runner } from "./runner.js";
import { clearDraft, loadDraft, markSolved, saveDraft } from "./storage.js";

const problem = JSON.parse(document.getElementById("problem-data").textContent);
const byId = (id) => document.querySelector(`[data-testid="${id}"]`);
const runButton = byId("run");
const stopButton = byId("stop");
const resetButton = byId("reset");
const status = byId("status");
const summary = byId("summary");
const results = byId("results");
const fileName = `${problem.slug}.py`;

function setStatus(state, text) {
  status.dataset.state = state;
  status.textContent = text;
}

let saveTimer = null;
const editor = createEditor(byId("editor"), loadDraft(problem.slug) ?? problem.starter, {
  onRun: () => run(),
  onChange: (code) => {
    clearTimeout(saveTimer);
    saveTimer = setTimeout(() => saveDraft(problem.slug, code), 300);
  },
});
// Save at once when the page goes away, so the last keystrokes survive a reload.
addEventListener("pagehide", () => saveDraft(problem.slug, getCode(editor)));

let runner = null;
const runnerReady = fetch(`/p/${problem.slug}/kit.json`)
  .then((response) => {
    if (!response.ok) throw new Error(`cannot load the tests (${response.status}): rebuild the site`);
    return response.json();
  })
  .then((files) => {
    runner = new Runner({ kit: { slug: problem.slug, files }, onStatus: setStatus });
    return runner;
  });
runnerReady.catch((error) => setStatus("broken", error.message));

let busy = false;
let runs = 0;
async function run() {
  if (busy) {
    // Run stays enabled (and focused, for keyboard users): a press during a run says why it
    // does nothing, through the live summary.
    summary.textContent = "Already running the hidden tests: wait for the verdict, or press Stop.";
    return;
  }
  busy = true;
  saveDraft(problem.slug, getCode(editor));
  runButton.setAttribute("aria-busy", "true");
  stopButton.disabled = false;
  // Each run numbers the summary and clears the last verdict, so nothing (a test waiting for
  // a verdict included) can take the previous run's results for this one's.
  summary.dataset.run = String(++runs);
  summary.dataset.status = "running";
  summary.dataset.verdict = "";
  results.replaceChildren();
  summary.textContent =
    status.dataset.state === "ready" ? "Running the hidden tests…" : "Waiting for Python to start…";
  try {
    const outcome = await runnerReady.then(
      (ready) => ready.run(getCode(editor)),
      (error) => ({ type: "error", message: error.message }),
    );
    if (showOutcome(results, summary, outcome, fileName)) markSolved(problem.slug);
  } finally {
    busy = false;
    runButton.removeAttribute("aria-busy");
    // A disabled button loses the focus to <body>: hand it to Run, where the next step is.
    const stopHadFocus = document.activeElement === stopButton;
    stopButton.disabled = true;
    if (stopHadFocus) runButton.focus();
  }
}

runButton.addEventListener("click", run);
// Ctrl/Cmd+Enter runs from anywhere on the page (the editor handles it first, in editor.js).
addEventListener("keydown", (event) => {
  if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey) || event.defaultPrevented) return;
  event.preventDefault();
  run();
});
stopButton.addEventListener("click", () => runner?.stop());
resetButton.addEventListener("click", () => {
  if (!confirm("Replace your code with the starter? Your draft will be lost.")) return;
  setCode(editor, problem.starter);
  clearDraft(problem.slug);
  editor.focus();
});

// A small handle for tests and tools that drive the page.
window.grpoKit = {
  getCode: () => getCode(editor),
  setCode: (code) => setCode(editor, code),
  run,
  stop: () => runner?.stop(),
  bootPhases: () => runner?.bootPhases ?? null,
};
