// The Python side of the page: Pyodide in a Web Worker, so a long run never freezes the page.
//
// The page names the worker after its problem (`new Worker(url, {name: slug})`): Python and
// the problem's files load from the moment this module runs, since a busy page delivers its
// first message late (after its own scripts have run: a tenth of a second, or more).
//
// Messages in:  {type: "init", interruptBuffer?}       the buffer Stop writes to (or null)
//               {type: "run", id, code}                 run the hidden tests on `code`
// Messages out: {type: "ready", bootMs, phases} | {type: "kept"} (the runtime is in the cache)
//               | {type: "progress", id, test}
//               | {type: "result", id, result} | {type: "stopped", id}
//               | {type: "error", id?, message, fatal}; fatal: this Python can no longer run
//
// Python starts from a memory snapshot taken at build time (web/snapshot.mjs: numpy, pytest
// and the kit's runner already imported; dynlibs.js links numpy's compiled modules again), or
// from scratch should the snapshot not restore. The packages' files come as one image
// (image.js). Both are kept in the worker's own cache after the first run (filecache.js).
// The kit's files are written to /kit laid out as in the repository, and the learner's code
// replaces the starter, problems/<slug>/<slug>.py: exactly what `pytest problems/<slug>` runs.

import { replay } from "./dynlibs.js";
import { cachedDownloads, keep } from "./filecache.js";
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

// The runtime's big files come from the worker's own cache (filecache.js) once a page has
// downloaded them; Pyodide's JavaScript is fetched and evaluated meanwhile (loadPyodide would
// only begin it later, and finds it loaded).
const moduleStarted = performance.now();
const SNAPSHOT_URL = `${INDEX_URL}snapshot.bin`;
const IMAGE_URL = `${INDEX_URL}site-packages.bin`;
// Dropped (null) once kept, or once the snapshot proved unusable: 60 MB the worker no longer needs.
let runtimeFiles = cachedDownloads([SNAPSHOT_URL, IMAGE_URL], (url) =>
  download(url).then((buffer) => new Uint8Array(buffer)),
);
const runtimeScripts = Promise.all([
  import(/* external */ `${INDEX_URL}pyodide.mjs`),
  import(/* external */ `${INDEX_URL}pyodide.asm.js`),
]);

async function startPython() {
  const image = runtimeFiles[IMAGE_URL].then(({ bytes }) => readImage(bytes));
  const snapshot = runtimeFiles[SNAPSHOT_URL].then(({ bytes }) => bytes);
  const record = download(`${INDEX_URL}snapshot.bin.json`, "json");
  // numpy's compiled modules compile in the background while the memory is restored.
  const modules = Promise.all([image, record]).then(([files, { libraries }]) =>
    Promise.all(libraries.map(async ({ path }) => [path, await WebAssembly.compile(files.get(path))])),
  );
  const [{ loadPyodide }] = await runtimeScripts;
  try {
    const restored = await loadPyodide({ indexURL: INDEX_URL, _loadSnapshot: snapshot });
    writeImage(restored, await image);
    replay(restored, await record, Object.fromEntries(await modules));
    return restored;
  } catch (error) {
    console.warn("the memory snapshot could not be used: Python starts from scratch", error);
    runtimeFiles = null; // nothing worth keeping
    const fresh = await loadPyodide({ indexURL: INDEX_URL });
    writeImage(fresh, await image);
    return fresh;
  }
}

// After the first run: the next page's Python starts from the cache.
async function keepRuntimeFiles() {
  if (runtimeFiles === null) return;
  const files = runtimeFiles;
  runtimeFiles = null;
  if (await keep(files)) self.postMessage({ type: "kept" });
}

async function boot() {
  const slug = self.name;
  const files = download(`/p/${slug}/kit.json`, "json"); // written by grader/site.py
  // For the benchmark: the files come from the cache together, or not at all.
  const cached = runtimeFiles[SNAPSHOT_URL].then((file) => file.fromCache, () => false);
  pyodide = await startPython();
  const booted = performance.now();
  kit = { slug, files: await files };
  writeFiles(kit.files);
  const written = performance.now();
  pyodide.runPython(`
import json, sys
from importlib.machinery import FileFinder
# The image's files are new to the import system. (importlib.invalidate_caches would also
# reread the standard library's zip: a tenth of a second.)
for finder in list(sys.path_importer_cache.values()):
    if isinstance(finder, FileFinder):
        finder.invalidate_caches()
sys.dont_write_bytecode = True  # an edit within the same second must never run stale bytecode
if ${JSON.stringify(ROOT)} not in sys.path:
    sys.path.insert(0, ${JSON.stringify(ROOT)})
import numpy, pytest
from grader.webrun import run_problem

def _run_as_json(root, slug, impl, learner_file, progress):
    return json.dumps(run_problem(root, slug, [impl], learner_file, progress))
`);
  const now = performance.now();
  const phases = { python: booted - moduleStarted, files: written - booted, imports: now - written };
  phases.cached = await cached;
  phases.startedAt = performance.timeOrigin + moduleStarted; // to compare with the page's clock
  self.postMessage({ type: "ready", bootMs: now - moduleStarted, phases });
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
  keepRuntimeFiles();
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
  keepRuntimeFiles();
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

function reportError(error, id = undefined) {
  const fatal = error?.pyodide_fatal_error === true || (pyodide !== null && !pythonIsAlive());
  self.postMessage({ type: "error", id, message: String(error?.message ?? error), fatal });
}

const booting = boot().catch((error) => reportError(error));

self.onmessage = async (event) => {
  const message = event.data;
  if (message.type === "init") {
    interruptBuffer = message.interruptBuffer ?? null;
    return;
  }
  await booting; // the page sends a run only once told "ready": this is a guard
  try {
    if (message.type === "run") run(message);
  } catch (error) {
    // A Stop that lands just after pytest returned interrupts the code that reports: still a Stop.
    if (message.type === "run" && error?.type === "KeyboardInterrupt" && pythonIsAlive()) {
      self.postMessage({ type: "stopped", id: message.id });
      return;
    }
    reportError(error, message.id);
  }
};
