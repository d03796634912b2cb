// The Python side of the page: Pyodide in a Web Worker, so a long run never freezes the page.
//
// Messages in:  {type: "init", slug, kitUrl, interruptBuffer?}  boot, write the kit, warm up
//               {type: "run", id, code}                 run the hidden tests on `code`
// Messages out: {type: "ready", bootMs, phases} | {type: "progress", id, test}
//               | {type: "result", id, result} | {type: "stopped", id}
//               | {type: "error", id?, message, fatal}; fatal: this Python can no longer run
//
// Python starts from a memory snapshot taken at build time (web/snapshot.mjs: numpy, pytest
// and the kit's runner already imported; dynlibs.js links numpy's compiled modules again), or
// from scratch should the snapshot not restore. The packages' files come as one image
// (image.js).
// The kit's files are written to /kit laid out as in the repository, and the learner's code
// replaces the starter, problems/<slug>/<slug>.py: exactly what `pytest problems/<slug>` runs.

import { replay } from "./dynlibs.js";
import { readImage, writeImage } from "./image.js";

/* global RUNTIME_URL */ // the runtime's folder, e.g. "/pyodide-3f2a9c1b/" (set by build.mjs)
const INDEX_URL = new URL(RUNTIME_URL, self.location.href).href;
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

function download(url, as = "arrayBuffer") {
  return fetch(url).then((response) => {
    if (!response.ok) throw new Error(`cannot load ${url} (${response.status}): rebuild the site`);
    return response[as]();
  });
}

// Runs the tests and returns the report as a JS object (through JSON: plain data both ways).
// `progress(nodeid)` is called as each test starts.
function runTests(impl, learnerFile, progress = null) {
  const runProblem = pyodide.globals.get("_run_as_json");
  try {
    return JSON.parse(runProblem(ROOT, kit.slug, impl, learnerFile, progress));
  } finally {
    runProblem.destroy();
  }
}

async function startPython(image) {
  const record = download(`${INDEX_URL}snapshot.bin.json`, "json");
  // numpy's compiled modules compile in the background while the memory is restored.
  const modules = Promise.all([image, record]).then(([files, { libraries }]) =>
    Promise.all(libraries.map(async ({ path }) => [path, await WebAssembly.compile(files.get(path))])),
  );
  const { loadPyodide } = await import(/* external */ `${INDEX_URL}pyodide.mjs`);
  try {
    const snapshot = download(`${INDEX_URL}snapshot.bin`);
    const restored = await loadPyodide({ indexURL: INDEX_URL, _loadSnapshot: snapshot });
    writeImage(restored, await image);
    replay(restored, await record, Object.fromEntries(await modules));
    return restored;
  } catch (error) {
    console.warn("the memory snapshot could not be used: Python starts from scratch", error);
    const fresh = await loadPyodide({ indexURL: INDEX_URL });
    writeImage(fresh, await image);
    return fresh;
  }
}

async function boot(message) {
  const started = performance.now();
  // The downloads start at once, while Pyodide's own files load.
  const files = download(message.kitUrl, "json");
  const image = download(`${INDEX_URL}site-packages.bin`).then((bytes) => readImage(new Uint8Array(bytes)));
  pyodide = await startPython(image);
  const booted = performance.now();
  kit = { slug: message.slug, files: await files };
  writeFiles(kit.files);
  const written = performance.now();
  interruptBuffer = message.interruptBuffer ?? null;
  pyodide.runPython(`
import importlib, json, sys
importlib.invalidate_caches()  # the image's files are new to the import system
sys.dont_write_bytecode = True  # an edit within the same second must never run stale bytecode
if ${JSON.stringify(ROOT)} not in sys.path:
    sys.path.insert(0, ${JSON.stringify(ROOT)})
import numpy, pytest
from grader.webrun import run_problem

def _run_as_json(root, slug, impl, learner_file, progress):
    return json.dumps(run_problem(root, slug, [impl], learner_file, progress))
`);
  const now = performance.now();
  const phases = { python: booted - started, files: written - booted, imports: now - written };
  phases.startedAt = performance.timeOrigin + started; // to compare with the page's clock
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

function run(message) {
  warmedUp = true;
  const started = performance.now();
  pyodide.FS.writeFile(learnerPath(), message.code);
  if (interruptBuffer) pyodide.setInterruptBuffer(interruptBuffer);
  const progress = (test) => self.postMessage({ type: "progress", id: message.id, test });
  const result = runTests("starter", learnerPath(), progress);
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
    else if (message.type === "run") run(message);
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
