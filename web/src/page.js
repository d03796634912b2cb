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
async function run() {
  if (busy) return;
  busy = true;
  saveDraft(problem.slug, getCode(editor));
  // Run stays enabled (and focused, for keyboard users); presses during a run are ignored.
  runButton.setAttribute("aria-busy", "true");
  stopButton.disabled = false;
  summary.dataset.status = "running";
  summary.dataset.verdict = "";
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
    stopButton.disabled = true;
  }
}

runButton.addEventListener("click", run);
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
