// Turns a run's report into what the learner reads first: a summary, one banner per problem
// of the whole file (grader/feedback.py finds them), the failing tests with what went wrong,
// then the tests held up by a banner and the passing ones, each group folded into one line.

const ICONS = { passed: "✓", failed: "✗", error: "✗", skipped: "–", notrun: "·" };
const STATUS_WORDS = { passed: "passed", failed: "failed", error: "failed", skipped: "skipped", notrun: "not run" };

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  node.append(...children.filter((child) => child !== null && child !== undefined && child !== ""));
  return node;
}

function tracebackBlock(frames, fileName) {
  if (!frames?.length) return null;
  const lines = frames.flatMap((f) => {
    const frame = `${fileName}, line ${f.line}, in ${f.function}\n    ${f.code}`;
    return f.repeated ? [frame, `  [Previous line repeated ${f.repeated} more times]`] : [frame];
  });
  return element("pre", { class: "traceback", "data-testid": "traceback" }, lines.join("\n"));
}

function outputBlock(test, folded) {
  // A passing test whose output fell outside the run's cap shows nothing: only noise.
  if (!test.stdout && (folded || !test.stdout_cut)) return null;
  const cut = test.stdout_cut
    ? `\n[${test.stdout_cut.toLocaleString("en")} more characters not shown]`
    : "";
  const pre = element("pre", { class: "stdout", "data-testid": "result-stdout", tabindex: "0" }, test.stdout + cut);
  if (folded) return element("details", { class: "output" }, element("summary", {}, "Your output"), pre);
  return element("div", { class: "output" }, element("div", { class: "output-label" }, "Your output"), pre);
}

function resultItem(test, fileName, { details = true, note = "" } = {}) {
  const status = test.outcome;
  const item = element(
    "li",
    { class: `result ${status}`, "data-testid": "result", "data-status": status, "data-id": test.id },
    element("span", { class: "icon", "aria-hidden": "true" }, ICONS[status] ?? "?"),
    " ",
    element("span", { class: "name", "data-testid": "result-name" }, test.title ?? test.name),
    element("span", { class: "visually-hidden" }, ` ${STATUS_WORDS[status] ?? status}`),
  );
  if (note) item.append(element("p", { class: "note" }, note));
  if (!details) return item;
  if (status !== "passed" && test.message) {
    item.append(element("pre", { class: "message", "data-testid": "result-message" }, test.message));
  }
  item.append(tracebackBlock(test.traceback, fileName) ?? "", outputBlock(test, status === "passed") ?? "");
  return item;
}

function group(testid, label, items) {
  if (!items.length) return null;
  return element(
    "li",
    { class: "group", "data-testid": testid },
    element("details", {}, element("summary", {}, label), element("ol", {}, ...items)),
  );
}

function banner(problem, fileName, onLine) {
  const where = problem.line ? ` (line ${problem.line})` : "";
  const node = element(
    "div",
    { class: `banner ${problem.kind}`, "data-testid": "banner", "data-kind": problem.kind, role: "alert" },
    element("p", { class: "banner-title" }, BANNER_TITLES[problem.kind] ?? "Your file has a problem", where),
    element("pre", { class: "message", "data-testid": "banner-message" }, problem.message),
    element("p", { class: "banner-tests" }, `It holds up ${plural(problem.tests.length, "test")}.`),
  );
  if (problem.line) {
    const button = element("button", { type: "button", "data-testid": "banner-line" }, `Go to line ${problem.line}`);
    button.addEventListener("click", () => onLine(problem.line));
    node.append(button);
  }
  return node;
}

const BANNER_TITLES = {
  syntax: "Python cannot read your file",
  not_implemented: "Not written yet",
  submission: "Your file has a problem",
};

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

function stoppedText(outcome, titles) {
  const at = outcome.at ?? outcome.result?.interrupted_at;
  if (!at?.test) return "Stopped.";
  const frame = at.traceback?.at(-1);
  const line = frame ? `, on line ${frame.line} of your code (${frame.code})` : "";
  return `Stopped while running “${titles.get(at.test) ?? at.test}”${line}.`;
}

// Shows `outcome` from a runner's run(); returns the verdict: "passed", "failed", "stopped"
// or "error". `checklist` is the list as the page was built (the hidden tests, not run).
export function showOutcome({ list, summary, banners, checklist }, outcome, { fileName, onLine, titles }) {
  banners.replaceChildren();
  summary.dataset.status = "done";
  const finish = (verdict, text) => {
    summary.dataset.verdict = verdict;
    summary.textContent = text;
    return verdict;
  };
  if (outcome.type === "stopped") {
    list.replaceChildren(...checklist.map((item) => item.cloneNode(true)));
    return finish("stopped", `${stoppedText(outcome, titles)} Fix the code and press Run again.`);
  }
  if (outcome.type === "error") {
    list.replaceChildren(...checklist.map((item) => item.cloneNode(true)));
    return finish("error", outcome.message);
  }
  const { tests, interrupted, ms, log, file_problems: problems = [] } = outcome.result;
  const held = new Map(); // test id -> the banner that explains it
  for (const problem of problems) for (const id of problem.tests) held.set(id, problem);
  banners.append(...problems.map((problem) => banner(problem, fileName, onLine)));

  const running = outcome.result.interrupted_at?.test;
  const failing = tests.filter((t) => ["failed", "error"].includes(t.outcome) && !held.has(t.id));
  const passed = tests.filter((t) => t.outcome === "passed");
  const others = tests.filter((t) => ["skipped", "notrun"].includes(t.outcome));
  const items = failing.map((t) => resultItem(t, fileName));
  items.push(
    group("group-held", `${plural(held.size, "test")} held up by the problem above`,
      tests.filter((t) => held.has(t.id)).map((t) => resultItem(t, fileName, { details: false }))),
    group("group-passed", `✓ ${plural(passed.length, "test")} passed`, passed.map((t) => resultItem(t, fileName))),
    ...others.map((t) => resultItem(t, fileName, { details: t.id === running, note: t.id === running ? "Stopped here." : "" })),
  );
  // No test ran and nothing says why: pytest's own output is the only explanation.
  const errors = outcome.result.errors.length || tests.length ? outcome.result.errors : [log];
  if (errors.length) {
    items.push(element("li", { class: "result error", "data-testid": "result", "data-status": "error" },
      element("pre", { class: "message" }, errors.join("\n"))));
  }
  list.replaceChildren(...items.filter(Boolean));

  const count = `${passed.length} of ${plural(tests.length, "test")} passed`;
  if (interrupted) return finish("stopped", `${stoppedText(outcome, titles)} ${count} before the stop.`);
  if (tests.length > 0 && passed.length === tests.length) return finish("passed", `All ${plural(tests.length, "test")} passed. Solved!`);
  return finish(errors.length && !tests.length ? "error" : "failed", `${count} (${(ms / 1000).toFixed(2)} s).`);
}
