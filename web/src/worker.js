// The Python side of the page: Pyodide in a Web Worker, so a long run never freezes the page.
//
// Messages in:  {type: "init", kit, interruptBuffer?}  boot, write the kit, warm pytest up
//               {type: "run", id, code}                 run the hidden tests on `code`
// Messages out: {type: "ready", bootMs} | {type: "result", id, result} | {type: "stopped", id}
//               | {type: "error", id?, message, fatal}; fatal: this Python can no longer run
//
// The kit's files are written to /kit laid out as in the repository, and the learner's code
// replaces the starter, problems/<slug>/<slug>.py: exactly what `pytest problems/<slug>` runs.

const INDEX_URL = new URL("/pyodide/", self.location.href).href;
const ROOT = "/kit";

const WARM_UP_DELAY_MS = 200;

let pyodide = null;
let kit = null;
let warmedUp = false;
// Handed to Python only when a real Run starts: a Stop pressed while the warm-up still runs
// must interrupt the learner's Run queued behind it, not be spent on the warm-up.
let interruptBuffer = null;

function learnerPath() {
  return `${ROOT}/problems/${kit.slug}/${kit.slug}.py`;
}

function writeFiles(files) {
  for (const [path, text] of Object.entries(files)) {
    const full = `${ROOT}/${path}`;
    pyodide.FS.mkdirTree(full.slice(0, full.lastIndexOf("/")));
    pyodide.FS.writeFile(full, text);
  }
}

// Runs the tests and returns the report as a JS object (through JSON: plain data both ways).
function runTests(impl, learnerFile) {
  const runProblem = pyodide.globals.get("_run_as_json");
  try {
    return JSON.parse(runProblem(ROOT, kit.slug, impl, learnerFile));
  } finally {
    runProblem.destroy();
  }
}

async function boot(message) {
  const started = performance.now();
  kit = message.kit;
  const { loadPyodide } = await import(/* external */ `${INDEX_URL}pyodide.mjs`);
  pyodide = await loadPyodide({ indexURL: INDEX_URL });
  const booted = performance.now();
  await loadPackages((options) => pyodide.loadPackage(["numpy", "pytest"], options));
  const loaded = performance.now();
  interruptBuffer = message.interruptBuffer ?? null;
  writeFiles(kit.files);
  pyodide.runPython(`
import json, sys
sys.dont_write_bytecode = True  # an edit within the same second must never run stale bytecode
sys.path.insert(0, ${JSON.stringify(ROOT)})
from grader.webrun import run_problem

def _run_as_json(root, slug, impl, learner_file):
    return json.dumps(run_problem(root, slug, [impl], learner_file))
`);
  pyodide.runPython("import numpy, pytest");
  const now = performance.now();
  const phases = { python: booted - started, packages: loaded - booted, imports: now - loaded };
  self.postMessage({ type: "ready", bootMs: now - started, phases });
  setTimeout(warmUp, WARM_UP_DELAY_MS);
}

// One run of the starter while the learner reads compiles the tests and pytest's lazy imports,
// making the first real Run as fast as the next ones. A Run already waiting goes first and
// makes it pointless.
function warmUp() {
  if (warmedUp) return;
  warmedUp = true;
  try {
    runTests("starter", null);
  } catch (error) {
    console.warn("warm-up run failed; the first Run will show why", error);
  }
}

// loadPackage only logs a missing file or a bad hash: collect and fail loudly instead.
async function loadPackages(load) {
  const failures = [];
  await load({ messageCallback: () => {}, errorCallback: (text) => failures.push(text) });
  if (failures.length) throw new Error(failures.join("\n"));
}

async function run(message) {
  warmedUp = true;
  const started = performance.now();
  // Packages the site ships (array_api_compat) load when the code first imports them.
  await loadPackages((options) => pyodide.loadPackagesFromImports(message.code, options));
  pyodide.FS.writeFile(learnerPath(), message.code);
  if (interruptBuffer) pyodide.setInterruptBuffer(interruptBuffer);
  const result = runTests("starter", learnerPath());
  result.ms = performance.now() - started;
  self.postMessage({ type: "result", id: message.id, result });
}

// After a fatal error (a WebAssembly trap, memory exhausted) every call into Python throws.
function pythonIsAlive() {
  try {
    pyodide.runPython("None");
    return true;
  } catch {
    return false;
  }
}

self.onmessage = async (event) => {
  const message = event.data;
  try {
    if (message.type === "init") await boot(message);
    else if (message.type === "run") await run(message);
  } catch (error) {
    // A Stop that lands just after pytest returned interrupts the code that reports: still a Stop.
    if (message.type === "run" && error?.type === "KeyboardInterrupt" && pythonIsAlive()) {
      self.postMessage({ type: "stopped", id: message.id });
      return;
    }
    const fatal = error?.pyodide_fatal_error === true || (pyodide !== null && !pythonIsAlive());
    self.postMessage({ type: "error", id: message.id, message: String(error?.message ?? error), fatal });
  }
};
