// Turns a run's report into the results list: one entry per hidden test.

const ICONS = { passed: "✓", failed: "✗", error: "✗", skipped: "–", notrun: "·" };

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  node.append(...children.filter((child) => child !== null && child !== ""));
  return node;
}

function tracebackBlock(frames, fileName) {
  if (!frames.length) return null;
  const lines = frames.map((f) => `${fileName}, line ${f.line}, in ${f.function}\n    ${f.code}`);
  return element("pre", { class: "traceback", "data-testid": "traceback" }, lines.join("\n"));
}

function resultItem(test, fileName) {
  const passed = test.outcome === "passed";
  const item = element(
    "li",
    { class: `result ${test.outcome}`, "data-testid": "result", "data-status": test.outcome },
    element("span", { class: "icon", "aria-hidden": "true" }, ICONS[test.outcome] ?? "?"),
    element("span", { class: "name", "data-testid": "result-name" }, test.name),
    element("span", { class: "visually-hidden" }, ` ${test.outcome}`),
  );
  if (!passed && test.message) {
    item.append(element("pre", { class: "message", "data-testid": "result-message" }, test.message));
  }
  const traceback = tracebackBlock(test.traceback ?? [], fileName);
  if (traceback) item.append(traceback);
  if (test.stdout) {
    // The worker sends at most the first 20,000 characters of a test's output (webrun.py).
    const cut = test.stdout_cut
      ? `\n[${test.stdout_cut.toLocaleString("en")} more characters not shown]`
      : "";
    item.append(
      element("div", { class: "output-label" }, "Your output"),
      element("pre", { class: "stdout", "data-testid": "result-stdout" }, test.stdout + cut),
    );
  }
  return item;
}

// Shows `outcome` from Runner.run(); returns true when every test passed.
export function showOutcome(list, summary, outcome, fileName) {
  list.replaceChildren();
  summary.dataset.status = "done";
  if (outcome.type === "stopped") {
    summary.textContent = "Stopped. Fix the code and press Run again.";
    summary.dataset.verdict = "stopped";
    return false;
  }
  if (outcome.type === "error") {
    summary.textContent = outcome.message;
    summary.dataset.verdict = "error";
    return false;
  }
  const { tests, interrupted, ms, log } = outcome.result;
  // No test ran and nothing says why: pytest's own output is the only explanation.
  const errors = outcome.result.errors.length || tests.length ? outcome.result.errors : [log];
  for (const test of tests) list.append(resultItem(test, fileName));
  const passed = tests.filter((t) => t.outcome === "passed").length;
  const allPassed = tests.length > 0 && passed === tests.length && !interrupted;
  let text = `${passed} of ${tests.length} tests passed (${(ms / 1000).toFixed(2)} s).`;
  if (interrupted) text = `Stopped. ${passed} of ${tests.length} tests passed before the stop.`;
  else if (allPassed) text = `All ${tests.length} tests passed. Solved!`;
  summary.textContent = text;
  summary.dataset.verdict = interrupted ? "stopped" : allPassed ? "passed" : "failed";
  if (errors.length) {
    list.append(element("li", { class: "result error", "data-testid": "result", "data-status": "error" },
      element("pre", { class: "message" }, errors.join("\n"))));
  }
  return allPassed;
}
