// Adds compiled bytecode to pure-Python wheels, with Pyodide's own Python (3.12), so that the
// browser imports pytest without compiling it at every page load.
//
//   node precompile.mjs PYODIDE_DIR OUT_DIR WHEEL...
//
// Each WHEEL (a file in PYODIDE_DIR) is written to OUT_DIR under the same name, with a
// __pycache__/*.pyc beside every module. The .pyc files are "unchecked-hash" ones: valid
// whatever the files' timestamps, which unzipping does not keep.

import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [pyodideDir, outDir, ...wheels] = process.argv.slice(2);
const indexURL = `${resolve(pyodideDir)}/`;
const { loadPyodide } = await import(pathToFileURL(join(indexURL, "pyodide.mjs")).href);
const pyodide = await loadPyodide({ indexURL });
const precompile = pyodide.runPython(`
import compileall, os, py_compile, shutil, site, zipfile

def precompile(source, target):
    work = "/tmp/wheel"
    shutil.rmtree(work, ignore_errors=True)
    with zipfile.ZipFile(source) as wheel:
        wheel.extractall(work)
    # ddir: code objects name the installed files, as if compiled where they are imported from.
    ok = compileall.compile_dir(
        work, ddir=site.getsitepackages()[0], quiet=1,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    if not ok:
        raise RuntimeError(f"could not compile {source}")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as wheel:
        for folder, dirs, files in os.walk(work):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(folder, name)
                wheel.write(path, os.path.relpath(path, work))

precompile
`);
for (const name of wheels) {
  pyodide.FS.writeFile(`/tmp/${name}`, readFileSync(join(pyodideDir, name)));
  precompile(`/tmp/${name}`, `/tmp/out-${name}`);
  writeFileSync(join(outDir, name), pyodide.FS.readFile(`/tmp/out-${name}`));
}
precompile.destroy();
