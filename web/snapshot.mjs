// Takes the memory snapshot the page's worker starts from: Pyodide booted, the site-packages
// image written, pytest and the kit's runner imported and run once. Restoring it skips
// Python's start-up, the imports and pytest's first-run imports: most of a cold start.
//
//   node snapshot.mjs RUNTIME_DIR IMAGE KIT_FILES.json OUT
//
// IMAGE is the site-packages image (grader/webruntime.py writes it; web/src/image.js reads
// it, here and in the worker). KIT_FILES.json maps the kit's runtime files to their text;
// they are written to /kit as the worker writes them, so the modules imported here are the
// ones the page runs. numpy is installed but not imported: its compiled modules live outside
// the memory a snapshot holds, so the worker imports it after restoring.

import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { writeImage } from "./src/image.js";

const [runtimeDir, imagePath, kitFilesPath, outPath] = process.argv.slice(2);
const indexURL = `${resolve(runtimeDir)}/`;
const { loadPyodide } = await import(pathToFileURL(join(indexURL, "pyodide.mjs")).href);
const pyodide = await loadPyodide({ indexURL, _makeSnapshot: true, stdout: () => {} });

writeImage(pyodide, new Uint8Array(readFileSync(imagePath)));
for (const [path, text] of Object.entries(JSON.parse(readFileSync(kitFilesPath, "utf8")))) {
  const full = `/kit/${path}`;
  pyodide.FS.mkdirTree(full.slice(0, full.lastIndexOf("/")));
  pyodide.FS.writeFile(full, text);
}
// A test file that needs neither numpy nor the kit's problems: running it imports what pytest
// imports lazily on its first run (the runner, fixtures, assertion rewriting, reports).
pyodide.runPython(`
import importlib, os, shutil, sys
importlib.invalidate_caches()
sys.dont_write_bytecode = True
sys.path.insert(0, "/kit")
import pytest
from grader.collect import Collector
from grader.webrun import PYTEST_ARGS, run_problem  # noqa: F401 - imported for the snapshot

os.makedirs("/tmp/warm", exist_ok=True)
with open("/tmp/warm/test_warm.py", "w") as f:
    f.write("import pytest\\n\\n@pytest.mark.parametrize('x', [1, 2])\\n"
            "def test_warm(x):\\n    assert x == 1, 'expected'\\n")
pytest.main(["/tmp/warm", "--rootdir", "/tmp/warm", *PYTEST_ARGS], plugins=[Collector()])
shutil.rmtree("/tmp/warm")
for name in [n for n in sys.modules if n.startswith("test_warm")]:
    del sys.modules[name]
import gc
gc.collect()
`);
writeFileSync(outPath, pyodide.makeMemorySnapshot());
