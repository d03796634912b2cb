// Builds the static site into web/dist/ from a manifest of problems (written by grader/site.py):
// bundles the page and worker scripts with esbuild under content-hashed names, renders each
// statement's Markdown and LaTeX to HTML with markdown-it and KaTeX, writes the problem list and
// one page per problem, and precompresses every file it wrote (web/compress.mjs).
//
//   node build.mjs MANIFEST.json

import { createHash } from "node:crypto";
import { cpSync, existsSync, readdirSync, readFileSync, statSync, writeFileSync, mkdirSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import katexPlugin from "@vscode/markdown-it-katex";
import * as esbuild from "esbuild";
import MarkdownIt from "markdown-it";
import { precompress } from "./compress.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const manifest = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = manifest.out;

const escape = (text) =>
  String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
// JSON inside <script>: "<" escaped so no "</script>" in a starter can end the element.
const scriptJson = (value) => JSON.stringify(value).replace(/</g, "\\u003c");
const shortHash = (data) => createHash("sha256").update(data).digest("hex").slice(0, 10);

// ------------------------------------------------------------------ Markdown

const markdown = new MarkdownIt({ html: false }).use(katexPlugin.default ?? katexPlugin, {
  throwOnError: true, // a typo in a formula fails the build instead of showing red text
});

// Headings get ids ("#problem-statement"), so that a section can be linked to.
const slugify = (text) =>
  text.toLowerCase().replace(/<[^>]*>/g, "").replace(/[^\p{L}\p{N}]+/gu, "-").replace(/^-|-$/g, "");
markdown.core.ruler.push("heading_ids", (state) => {
  const seen = new Map();
  state.tokens.forEach((token, i) => {
    if (token.type !== "heading_open") return;
    const base = slugify(state.tokens[i + 1].content) || "section";
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    token.attrSet("id", count ? `${base}-${count}` : base);
  });
});

// What may scroll sideways (code, wide tables, display maths) takes the keyboard focus, so it
// can be scrolled without a mouse.
const rules = markdown.renderer.rules;
const defaultFence = rules.fence;
rules.fence = (...args) => defaultFence(...args).replace(/^<pre/, '<pre tabindex="0"');
const defaultCodeBlock = rules.code_block;
rules.code_block = (...args) => defaultCodeBlock(...args).replace(/^<pre/, '<pre tabindex="0"');
rules.table_open = () => '<div class="table-scroll" tabindex="0">\n<table>\n';
rules.table_close = () => "</table>\n</div>\n";

// A paragraph that holds only an image is a figure; its alternative text is its caption.
rules.paragraph_open = (tokens, i, options, env, self) => {
  const only = tokens[i + 1]?.children;
  if (only?.length === 1 && only[0].type === "image") return "<figure>";
  return self.renderToken(tokens, i, options);
};
rules.paragraph_close = (tokens, i, options, env, self) => {
  const only = tokens[i - 1]?.children;
  if (only?.length === 1 && only[0].type === "image") return "</figure>\n";
  return self.renderToken(tokens, i, options);
};
rules.image = (tokens, i, options, env) => {
  const token = tokens[i];
  const src = token.attrGet("src");
  if (!/^figures\/[\w-]+\.svg$/.test(src)) throw new Error(`${env.slug}: images must be figures/<name>.svg, not ${src}`);
  if (!existsSync(join(out, "p", env.slug, src))) throw new Error(`${env.slug}: ${src} was not drawn`);
  const caption = markdown.renderInline(token.content);
  return `<img src="${escape(src)}" alt="" loading="lazy"><figcaption>${caption}</figcaption>`;
};

function renderStatement(problem) {
  return markdown
    .render(problem.statement, { slug: problem.slug })
    .replaceAll('<span class="katex-display">', '<span class="katex-display" tabindex="0">');
}

// ------------------------------------------------------------------ scripts and styles

async function bundle(entryPoints, define = {}) {
  const result = await esbuild.build({
    entryPoints,
    outdir: join(out, "assets"),
    entryNames: "[name]-[hash]",
    bundle: true,
    format: "esm",
    target: "es2022",
    minify: true,
    sourcemap: "linked",
    metafile: true,
    logLevel: "warning",
    define,
  });
  // entry name -> its URL, e.g. page -> /assets/page-3F2A9C1B.js
  const urls = {};
  for (const [file, meta] of Object.entries(result.metafile.outputs)) {
    if (!meta.entryPoint) continue;
    const name = basename(meta.entryPoint).replace(/\.[^.]+$/, "");
    urls[name] = `/assets/${basename(file)}`;
  }
  return urls;
}

// The worker first: the page must know its hashed name.
const workerUrls = await bundle(
  { worker: join(here, "src/worker.js") },
  { RUNTIME_URL: JSON.stringify(manifest.runtime) },
);
const urls = await bundle(
  {
    page: join(here, "src/page.js"),
    list: join(here, "src/list.js"),
    style: join(here, "src/style.css"),
  },
  { WORKER_URL: JSON.stringify(workerUrls.worker) },
);
const katexCss = readFileSync(join(here, "node_modules/katex/dist/katex.min.css"));
const katexDir = `katex-${shortHash(katexCss)}`;
cpSync(join(here, "node_modules/katex/dist/katex.min.css"), join(out, katexDir, "katex.min.css"));
cpSync(join(here, "node_modules/katex/dist/fonts"), join(out, katexDir, "fonts"), { recursive: true });

// ------------------------------------------------------------------ pages

function layout({ title, body, script, head = "" }) {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
${head}<title>${escape(title)} · grpo-kit</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/${katexDir}/katex.min.css">
<link rel="stylesheet" href="${urls.style}">
</head>
<body>
<a class="skip" href="#main">Skip to the content</a>
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
  <td class="order">${p.order}</td>
  <td class="title"><a href="/p/${escape(p.slug)}/">${escape(p.title)}</a><div class="teaches">${escape(p.teaches)}</div></td>
  <td class="difficulty-cell"><span class="difficulty ${escape(p.difficulty)}">${escape(p.difficulty)}</span></td>
  <td class="tags">${tags(p)}</td>
  <td class="runs">${p.runtime === "pyodide" ? "in the browser" : "PyTorch, on your machine"}</td>
  <td class="solved" data-testid="solved"></td>
</tr>`,
  );
  const body = `<main class="list" id="main">
<h1>Problems</h1>
<p>Solve them in order: each one builds a piece of a GRPO trainer. Your drafts and solved
problems are kept in this browser.</p>
<p class="progress" data-testid="progress" aria-live="polite">${problems.length} problems.</p>
<table>
<thead><tr><th>#</th><th>Problem</th><th>Difficulty</th><th>Tags</th><th>Runs</th><th>Status</th></tr></thead>
<tbody>
${rows.join("\n")}
</tbody>
</table>
</main>`;
  return layout({ title: "Problems", body, script: urls.list });
}

function checklist(problem) {
  const items = problem.tests.map(
    (test) => `<li class="result notrun" data-testid="result" data-status="notrun" data-id="${escape(test.id)}">
<span class="icon" aria-hidden="true">·</span> <span class="name" data-testid="result-name">${escape(test.title)}</span>
<span class="points">${test.points} pt</span><span class="visually-hidden"> not run yet</span></li>`,
  );
  return items.join("\n");
}

function workbench(problem, next, hidden) {
  // The editor comes first and the buttons right after it, so that leaving the editor with
  // Esc then Tab lands on Run; the results list takes the focus too, to be read or scrolled.
  const nextLink = next
    ? `<a class="next" data-testid="next" href="/p/${escape(next.slug)}/" hidden>Next problem: ${escape(next.title)} →</a>`
    : `<a class="next" data-testid="next" href="/" hidden>All problems solved? Back to the list →</a>`;
  return `<section class="workbench" id="workbench" aria-label="Your solution" data-testid="workbench"${hidden ? " hidden" : ""}>
<div class="editor" data-testid="editor"></div>
<div class="toolbar">
  <button type="button" data-testid="run" class="primary" aria-keyshortcuts="Control+Enter Meta+Enter">Run tests</button>
  <button type="button" data-testid="stop" disabled>Stop</button>
  <button type="button" data-testid="reset">Reset to starter</button>
  <span class="status" data-testid="status" role="status" data-state="starting">Starting…</span>
</div>
<p class="keys">Ctrl+Enter (⌘+Enter on macOS) runs the hidden tests from anywhere on the page.
In the editor Tab indents; press <kbd>Esc</kbd> then <kbd>Tab</kbd> to move on to the buttons
and results.</p>
<p class="saved">Your draft is saved in this browser as you type.</p>
<div class="verdict">
<div class="summary" data-testid="summary" role="status" aria-live="polite">The hidden tests are listed below: press Run tests to check your code against them.</div>
${nextLink}
</div>
<div class="banners" data-testid="banners"></div>
<section class="hints" data-testid="hints" hidden aria-label="Hints">
<ol class="hint-list"></ol>
<button type="button" data-testid="hint">Show a hint</button>
</section>
<ol class="results" data-testid="results" aria-label="Hidden tests" tabindex="0">
${checklist(problem)}
</ol>
</section>`;
}

function localOnly(problem) {
  return `<section class="workbench local-only" data-testid="local-only" aria-label="Run it on your machine">
<h2>Runs with PyTorch, on your machine</h2>
<p>This problem uses PyTorch, which the browser cannot run. Served by <code>grpo-kit serve</code>
on a machine with PyTorch, this page runs the hidden tests there. Or edit
<code>problems/${escape(problem.slug)}/${escape(problem.slug)}.py</code> in your checkout and run
its hidden tests with:</p>
<pre tabindex="0"><code>${escape(problem.commands.test)}</code></pre>
<p>or check any file against them (as the batch grader does) with:</p>
<pre tabindex="0"><code>${escape(problem.commands.check)}</code></pre>
<h3>Starter</h3>
<pre class="starter" tabindex="0"><code>${escape(problem.starter)}</code></pre>
</section>`;
}

function problemPage(problem, position, problems) {
  const previous = problems[position - 1];
  const next = problems[position + 1];
  const link = (p, label, rel) =>
    p ? `<a rel="${rel}" href="/p/${escape(p.slug)}/">${label}: ${escape(p.title)}</a>` : "<span></span>";
  const browser = problem.runtime === "pyodide";
  const data = {
    slug: problem.slug,
    starter: problem.starter,
    runtime: problem.runtime,
    hints: problem.hints.map((hint) => markdown.renderInline(hint)),
    tests: problem.tests.length,
  };
  const body = `<nav class="view-switch" aria-label="Show">
<button type="button" data-view="statement" aria-pressed="true">Statement</button>
<button type="button" data-view="code" aria-pressed="false">Code</button>
</nav>
<main class="problem" id="main" data-view="statement">
<article class="statement" id="statement">
<p class="meta"><span class="difficulty ${escape(problem.difficulty)}">${escape(problem.difficulty)}</span> ${tags(problem)}</p>
${renderStatement(problem)}
<nav class="pager" aria-label="Problems">${link(previous, "Previous", "prev")} ${link(next, "Next", "next")}</nav>
</article>
${workbench(problem, next, !browser)}
${browser ? "" : localOnly(problem)}
</main>
<script type="application/json" id="problem-data">${scriptJson(data)}</script>`;
  // The numpy problems' Python starts while the rest of the page loads: src/runner.js adopts
  // this worker and the messages it sent before the page's script ran.
  const head = browser
    ? `<script>
window.grpoKitBoot = (() => {
  const interrupt = self.crossOriginIsolated ? new Int32Array(new SharedArrayBuffer(4)) : null;
  const worker = new Worker(${scriptJson(workerUrls.worker)}, { type: "module", name: ${scriptJson(problem.slug)} });
  const boot = { worker, interrupt, messages: [], failed: null };
  worker.onmessage = (event) => boot.messages.push(event.data);
  worker.onerror = (event) => { boot.failed = event; };
  worker.postMessage({ type: "init", interruptBuffer: interrupt });
  return boot;
})();
</script>
`
    : "";
  return layout({ title: problem.title, body, script: urls.page, head });
}

writeFileSync(join(out, "index.html"), listPage(manifest.problems));
manifest.problems.forEach((problem, position) => {
  const folder = join(out, "p", problem.slug);
  mkdirSync(folder, { recursive: true });
  writeFileSync(join(folder, "index.html"), problemPage(problem, position, manifest.problems));
});

// ------------------------------------------------------------------ precompression

const COMPRESSIBLE = /\.(js|mjs|css|json|svg|map|ttf|woff)$/;
function walk(folder) {
  for (const name of readdirSync(folder)) {
    const path = join(folder, name);
    if (statSync(path).isDirectory()) {
      if (!name.startsWith("pyodide-")) walk(path); // the runtime comes precompressed
    } else if (COMPRESSIBLE.test(name)) precompress(path);
  }
}
walk(out);
console.log(`built ${manifest.problems.length} problem pages into ${out}`);
