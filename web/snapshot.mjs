// Takes the memory snapshot the page's worker starts from: Pyodide booted, the site-packages
// image written, numpy, pytest and the kit's runner imported, pytest run once. Restoring it
// skips Python's start-up, the imports and pytest's first-run imports: most of a start.
//
//   node snapshot.mjs RUNTIME_DIR IMAGE KIT_FILES.json OUT
//
// IMAGE is the site-packages image (grader/webruntime.py writes it, src/image.js reads it).
// KIT_FILES.json maps the kit's runtime files to their text; they are written to /kit as the
// worker writes them, so the modules imported here are the ones the page runs. numpy's
// compiled modules are loaded first, at places recorded in OUT.json (src/dynlibs.js): the
// worker links them there again after restoring OUT.

import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { preload, sharedObjects } from "./src/dynlibs.js";
import { readImage, writeImage } from "./src/image.js";

const [runtimeDir, imagePath, kitFilesPath, outPath] = process.argv.slice(2);
// An uncaught error would print the line it came from: all of Pyodide's minified runtime.
process.on("uncaughtException", (error) => {
  console.error(`the snapshot could not be taken: ${error.message}`);
  process.exit(1);
});
const indexURL = `${resolve(runtimeDir)}/`;
const { loadPyodide } = await import(pathToFileURL(join(indexURL, "pyodide.mjs")).href);
const pyodide = await loadPyodide({ indexURL, _makeSnapshot: true, stdout: () => {} });

writeImage(pyodide, readImage(new Uint8Array(readFileSync(imagePath))));
const sitePackages = pyodide.runPython("import site; site.getsitepackages()[0]");
const record = preload(pyodide, sharedObjects(pyodide, `${sitePackages}/numpy`));
for (const [path, text] of Object.entries(JSON.parse(readFileSync(kitFilesPath, "utf8")))) {
  const full = `/kit/${path}`;
  pyodide.FS.mkdirTree(full.slice(0, full.lastIndexOf("/")));
  pyodide.FS.writeFile(full, text);
}
// A test file that needs none of the kit's problems: running it imports what pytest imports
// lazily on its first run (the runner, fixtures, assertion rewriting, reports).
pyodide.runPython(`
import gc, importlib, os, shutil, sys
importlib.invalidate_caches()
sys.dont_write_bytecode = True
sys.path.insert(0, "/kit")
import numpy, numpy.linalg, numpy.random, pytest
import grader.loader  # noqa: F401 - and with it the rest of the kit's runtime
from grader.collect import Collector
from grader.webrun import PYTEST_ARGS

os.makedirs("/tmp/warm", exist_ok=True)
with open("/tmp/warm/test_warm.py", "w") as f:
    f.write("import numpy as np, pytest\\n\\n@pytest.mark.parametrize('x', [1, 2])\\n"
            "def test_warm(x):\\n    assert np.float64(x) == 1, 'expected'\\n")
pytest.main(["/tmp/warm", "--rootdir", "/tmp/warm", *PYTEST_ARGS], plugins=[Collector()])
shutil.rmtree("/tmp/warm")
for name in [n for n in sys.modules if n.startswith("test_warm")]:
    del sys.modules[name]
gc.collect()

# A snapshot holds Python's memory, not the file system's table of open files: a file left
# open here (a read of the standard library's zip, awaiting collection) would, once restored,
# close whatever file the page opened under the same number.
import io
for stray in [o for o in gc.get_objects() if isinstance(o, io.FileIO)]:
    if not stray.closed and stray.fileno() > 2:
        stray.close()
`);
writeFileSync(`${outPath}.json`, JSON.stringify(record));
writeFileSync(outPath, pyodide.makeMemorySnapshot());
