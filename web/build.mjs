// Builds the static site into web/dist/ from a manifest of problems (written by grader/site.py):
// bundles the page and worker scripts with esbuild, renders each statement's Markdown and LaTeX
// to HTML with markdown-it and KaTeX, and writes the problem list and one page per problem.
//
//   node build.mjs MANIFEST.json

import { cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import katexPlugin from "@vscode/markdown-it-katex";
import * as esbuild from "esbuild";
import MarkdownIt from "markdown-it";

const here = dirname(fileURLToPath(import.meta.url));
const manifest = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = manifest.out;

const markdown = new MarkdownIt({ html: false }).use(katexPlugin.default ?? katexPlugin, {
  throwOnError: true, // a typo in a formula fails the build instead of showing red text
});

const escape = (text) =>
  String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
// JSON inside <script>: "<" escaped so no "</script>" in a starter can end the element.
const scriptJson = (value) => JSON.stringify(value).replace(/</g, "\\u003c");

function layout({ title, body, script }) {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escape(title)} · grpo-kit</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/katex/katex.min.css">
<link rel="stylesheet" href="/assets/style.css">
</head>
<body>
<header class="site"><a href="/">grpo-kit</a> <span>GRPO, one exercise at a time</span></header>
${body}
${script ? `<script type="module" src="${script}"></script>` : ""}
</body>
</html>
`;
}

function tags(problem) {
  return problem.tags.map((tag) => `<span class="tag">${escape(tag)}</span>`).join(" ");
}

function listPage(problems) {
  const rows = problems.map(
    (p) => `<tr data-testid="problem-row" data-slug="${escape(p.slug)}">
  <td>${p.order}</td>
  <td><a href="/p/${escape(p.slug)}/">${escape(p.title)}</a><div class="teaches">${escape(p.teaches)}</div></td>
  <td><span class="difficulty ${escape(p.difficulty)}">${escape(p.difficulty)}</span></td>
  <td>${tags(p)}</td>
  <td>${p.runtime === "pyodide" ? "in the browser" : "locally (PyTorch)"}</td>
  <td class="solved" data-testid="solved"></td>
</tr>`,
  );
  const body = `<main class="list">
<h1>Problems</h1>
<p>Solve them in order: each one builds a piece of a GRPO trainer. Your drafts and solved
problems are kept in this browser.</p>
<table>
<thead><tr><th>#</th><th>Problem</th><th>Difficulty</th><th>Tags</th><th>Runs</th><th>Status</th></tr></thead>
<tbody>
${rows.join("\n")}
</tbody>
</table>
</main>`;
  return layout({ title: "Problems", body, script: "/assets/list.js" });
}

function workbench(problem) {
  // The editor comes first and the buttons right after it, so that leaving the editor with
  // Esc then Tab lands on Run; the results list takes the focus too, to be read or scrolled.
  return `<section class="workbench" aria-label="Your solution">
<div class="editor" data-testid="editor"></div>
<div class="toolbar">
  <button type="button" data-testid="run" class="primary" aria-keyshortcuts="Control+Enter Meta+Enter">Run tests</button>
  <button type="button" data-testid="stop" disabled>Stop</button>
  <button type="button" data-testid="reset">Reset to starter</button>
  <span class="status" data-testid="status" role="status" data-state="starting">Starting Python…</span>
</div>
<p class="keys">Ctrl+Enter (⌘+Enter on macOS) runs the hidden tests from anywhere on the page.
In the editor Tab indents; press <kbd>Esc</kbd> then <kbd>Tab</kbd> to move on to the buttons
and results. Your draft is saved in this browser as you type.</p>
<div class="summary" data-testid="summary" role="status" aria-live="polite"></div>
<ol class="results" data-testid="results" aria-label="Test results" tabindex="0"></ol>
</section>`;
}

function localOnly(problem) {
  return `<section class="workbench local-only" data-testid="local-only">
<h2>Runs locally, not in the browser</h2>
<p>This problem uses PyTorch, which the browser cannot run. Edit
<code>problems/${escape(problem.slug)}/${escape(problem.slug)}.py</code> in your checkout and run
its hidden tests with:</p>
<pre><code>${escape(problem.commands.test)}</code></pre>
<p>or check any file against them (as the batch grader does) with:</p>
<pre><code>${escape(problem.commands.check)}</code></pre>
<h3>Starter</h3>
<pre class="starter"><code>${escape(problem.starter)}</code></pre>
</section>`;
}

function problemPage(problem, position, problems) {
  const previous = problems[position - 1];
  const next = problems[position + 1];
  const link = (p, label) =>
    p ? `<a href="/p/${escape(p.slug)}/">${label}: ${escape(p.title)}</a>` : "<span></span>";
  const browser = problem.runtime === "pyodide";
  const data = { slug: problem.slug, starter: problem.starter, runtime: problem.runtime };
  const body = `<main class="problem">
<article class="statement">
<p class="meta"><span class="difficulty ${escape(problem.difficulty)}">${escape(problem.difficulty)}</span> ${tags(problem)}</p>
${markdown.render(problem.statement)}
<nav class="pager">${link(previous, "Previous")} ${link(next, "Next")}</nav>
</article>
${browser ? workbench(problem) : localOnly(problem)}
</main>
<script type="application/json" id="problem-data">${scriptJson(data)}</script>`;
  return layout({ title: problem.title, body, script: browser ? "/assets/page.js" : null });
}

await esbuild.build({
  entryPoints: {
    page: join(here, "src/page.js"),
    list: join(here, "src/list.js"),
    worker: join(here, "src/worker.js"),
    style: join(here, "src/style.css"),
  },
  outdir: join(out, "assets"),
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  sourcemap: "linked",
  logLevel: "warning",
});
cpSync(join(here, "node_modules/katex/dist/katex.min.css"), join(out, "katex/katex.min.css"));
cpSync(join(here, "node_modules/katex/dist/fonts"), join(out, "katex/fonts"), { recursive: true });

writeFileSync(join(out, "index.html"), listPage(manifest.problems));
manifest.problems.forEach((problem, position) => {
  const folder = join(out, "p", problem.slug);
  mkdirSync(folder, { recursive: true });
  writeFileSync(join(folder, "index.html"), problemPage(problem, position, manifest.problems));
});
console.log(`built ${manifest.problems.length} problem pages into ${out}`);
