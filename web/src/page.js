// A problem page: statement (rendered at build time), editor, Run / Stop / Reset, results,
// hints. The numpy problems run in a Pyodide worker; the PyTorch ones on the local server when
// `grpo-kit serve` wrote its token into the page, else the page says how to run them locally.

import { createEditor, getCode, goToLine, markProblems, setCode } from "./editor.js";
import { showOutcome } from "./results.js";
import { Runner, ServerRunner } from "./runner.js";
import {
  clearDraft,
  hintsShown,
  isSolved,
  loadDraft,
  markSolved,
  saveDraft,
  setHintsShown,
} from "./storage.js";

const problem = JSON.parse(document.getElementById("problem-data").textContent);
const token = document.querySelector('meta[name="grpo-kit-token"]')?.content;
const byId = (id) => document.querySelector(`[data-testid="${id}"]`);
const main = document.querySelector("main.problem");

const switches = document.querySelectorAll(".view-switch [data-view]");
for (const button of switches) button.addEventListener("click", () => showView(button.dataset.view));
const runnable = problem.runtime === "pyodide" || Boolean(token);
if (runnable) setUpWorkbench();

// Narrow screens show the "statement" or the "code", one at a time (wide ones show both).
function showView(view) {
  main.dataset.view = view;
  for (const button of switches) button.setAttribute("aria-pressed", String(button.dataset.view === view));
  if (switches[0]?.offsetParent) scrollTo({ top: 0 }); // the switch shows: a narrow screen
}

function setUpWorkbench() {
  const runButton = byId("run");
  const stopButton = byId("stop");
  const status = byId("status");
  const summary = byId("summary");
  const results = byId("results");
  const banners = byId("banners");
  const nextLink = byId("next");
  const fileName = `${problem.slug}.py`;
  const checklist = [...results.children].map((item) => item.cloneNode(true));
  const titles = new Map(checklist.map((item) => [item.dataset.id, item.querySelector(".name").textContent]));

  if (problem.runtime !== "pyodide") {
    byId("workbench").hidden = false;
    byId("local-only").hidden = true;
  }
  if (isSolved(problem.slug)) nextLink.hidden = false;

  function setStatus(state, text) {
    status.dataset.state = state;
    status.textContent = text;
  }

  let saveTimer = null;
  const saveSoon = (code) => {
    clearTimeout(saveTimer);
    saveTimer = setTimeout(() => saveNow(code), 300);
  };
  // The starter itself is no draft: the problem list marks only problems begun.
  const saveNow = (code) => (code === problem.starter ? clearDraft : saveDraft)(problem.slug, code);
  const editor = createEditor(byId("editor"), loadDraft(problem.slug) ?? problem.starter, {
    onRun: () => run(),
    onChange: saveSoon,
  });
  // Save at once when the page goes away, so the last keystrokes survive a reload.
  addEventListener("pagehide", () => saveNow(getCode(editor)));
  const showLine = (line) => {
    if (main.dataset.view !== "code") showView("code");
    goToLine(editor, line);
  };

  const runner =
    problem.runtime === "pyodide"
      ? new Runner({ slug: problem.slug })
      : new ServerRunner({ slug: problem.slug, token });
  runner.listen({ onStatus: setStatus, onProgress });

  let done = 0;
  function onProgress(test) {
    done += 1;
    summary.textContent = `Running test ${done} of ${problem.tests}: ${titles.get(test) ?? test}`;
  }

  const hints = setUpHints();
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
    done = 0;
    saveNow(getCode(editor));
    runButton.setAttribute("aria-busy", "true");
    stopButton.disabled = false;
    // Each run numbers the summary and clears the last verdict, so nothing (a test waiting for
    // a verdict included) can take the previous run's results for this one's.
    summary.dataset.run = String(++runs);
    summary.dataset.status = "running";
    summary.dataset.verdict = "";
    summary.textContent = status.dataset.state === "ready" ? "Running the hidden tests…" : "Waiting for Python to start…";
    try {
      const outcome = await runner.run(getCode(editor));
      const verdict = showOutcome({ list: results, summary, banners, checklist }, outcome, {
        fileName,
        onLine: showLine,
        titles,
      });
      markProblems(editor, outcome.result?.file_problems ?? []);
      if (verdict === "passed") {
        markSolved(problem.slug);
        nextLink.hidden = false;
      }
      if (verdict === "failed") hints.offer();
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
  stopButton.addEventListener("click", () => runner.stop());
  byId("reset").addEventListener("click", () => {
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
    stop: () => runner.stop(),
    bootPhases: () => runner.bootPhases ?? null,
    runtimeKept: () => runner.runtimeKept === true, // the next page starts from the cache
  };
}

// Hints come one at a time, and only once a run has failed: first try, then ask. How many were
// shown is remembered, so a reload does not hide them again.
function setUpHints() {
  const section = byId("hints");
  const list = section.querySelector(".hint-list");
  const button = byId("hint");
  let shown = 0;
  const show = (count) => {
    while (shown < Math.min(count, problem.hints.length)) {
      const item = document.createElement("li");
      item.dataset.testid = "hint-text";
      item.innerHTML = problem.hints[shown]; // rendered from the problem's metadata at build time
      list.append(item);
      shown += 1;
    }
    button.hidden = shown >= problem.hints.length;
    button.textContent = `Show a hint (${shown + 1} of ${problem.hints.length})`;
  };
  const offer = () => {
    if (problem.hints.length) section.hidden = false;
  };
  button.addEventListener("click", () => {
    show(shown + 1);
    setHintsShown(problem.slug, shown);
    list.lastElementChild?.setAttribute("tabindex", "-1");
    list.lastElementChild?.focus();
  });
  const remembered = hintsShown(problem.slug);
  if (remembered) {
    show(remembered);
    offer();
  } else show(0);
  return { offer };
}
