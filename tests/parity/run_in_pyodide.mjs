// Runs problems' hidden tests in Pyodide under Node, with one boot for all of them.
//
//   node run_in_pyodide.mjs PYODIDE_DIR JOB.json RESULTS.json
//
// JOB.json: {"files": {relative path: text}, "runs": [{"slug", "impls": [...]}]}. The files are
// written to /kit laid out as in the repository; each run calls grader.webrun.run_problem, the
// same function the browser's worker calls. RESULTS.json gets {slug: run_problem's report}.

import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [pyodideDir, jobPath, resultsPath] = process.argv.slice(2);
const job = JSON.parse(readFileSync(jobPath, "utf8"));
const ROOT = "/kit";

const { loadPyodide } = await import(pathToFileURL(join(resolve(pyodideDir), "pyodide.mjs")).href);
const pyodide = await loadPyodide({ indexURL: `${resolve(pyodideDir)}/`, stdout: () => {} });
const failures = [];
await pyodide.loadPackage(["numpy", "pytest", "array-api-compat"], {
  messageCallback: () => {},
  errorCallback: (text) => failures.push(text),
});
if (failures.length) throw new Error(`could not load packages:\n${failures.join("\n")}`);

for (const [path, text] of Object.entries(job.files)) {
  const full = `${ROOT}/${path}`;
  pyodide.FS.mkdirTree(full.slice(0, full.lastIndexOf("/")));
  pyodide.FS.writeFile(full, text);
}
pyodide.runPython(`
import json, sys
sys.dont_write_bytecode = True
sys.path.insert(0, ${JSON.stringify(ROOT)})
from grader.webrun import run_problem
`);
const runProblem = pyodide.runPython(
  "lambda slug, impls: json.dumps(run_problem('/kit', slug, json.loads(impls)))",
);
const results = {};
for (const { slug, impls } of job.runs) {
  results[slug] = JSON.parse(runProblem(slug, JSON.stringify(impls)));
}
writeFileSync(resultsPath, JSON.stringify(results));
