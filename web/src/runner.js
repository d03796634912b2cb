// Runs the hidden tests on the learner's code, in one of two places with one interface:
// `run(code)` resolves with {type: "result", result} | {type: "error", message} |
// {type: "stopped", at?}, and `stop()` ends a run in progress.
//
// * `Runner`: Pyodide in a Web Worker, started at page load (the numpy problems).
// * `ServerRunner`: the local `grpo-kit serve`, which runs them in the sandbox of
//   `grpo-kit grade` (the PyTorch problems; grader/serve.py, grader/localrun.py).

/* global WORKER_URL */ // the worker's hashed URL (set by build.mjs)

const STOP_GRACE_MS = 1000;

// The worker is named after the problem, and boots at once: its first message only hands it
// the buffer that Stop writes to.
const startWorker = (slug) => new Worker(WORKER_URL, { type: "module", name: slug });
const initMessage = (interruptBuffer) => ({ type: "init", interruptBuffer });

// Stop first asks Python to raise KeyboardInterrupt through the interrupt buffer (only possible
// when the page is cross-origin isolated, which `grpo-kit serve` arranges). Code that swallows
// the interrupt, or a page without isolation, gets the fallback after a grace period: the
// worker is terminated and a fresh one boots, so the next Run always works. A fatal error in
// Python (a WebAssembly trap) also brings up a fresh worker.
export class Runner {
  constructor({ slug }) {
    this.slug = slug;
    this.status = null; // [state, text], kept for a page that listens later (`listen`)
    this.onStatus = () => {};
    this.onProgress = () => {};
    this.pending = null; // {id, resolve} of the run in progress
    this.running = null; // the test that run is in, as the worker last said
    this.nextId = 1;
    this.canInterrupt = self.crossOriginIsolated === true;
    this.start();
  }

  // The page's handlers: the runner starts before the page has its elements (start.js).
  listen({ onStatus, onProgress }) {
    this.onStatus = onStatus;
    this.onProgress = onProgress;
    if (this.status) onStatus(...this.status);
  }

  setStatus(state, text) {
    this.status = [state, text];
    this.onStatus(state, text);
  }

  start() {
    // The first worker may have been started by the page's inline script (build.mjs), before
    // this code loaded: adopt it, with the messages it sent meanwhile.
    const early = window.grpoKitBoot;
    window.grpoKitBoot = null;
    if (early) {
      ({ worker: this.worker, interrupt: this.interrupt } = early);
    } else {
      this.interrupt = this.canInterrupt ? new Int32Array(new SharedArrayBuffer(4)) : null;
      this.worker = startWorker(this.slug);
    }
    this.ready = new Promise((resolve, reject) => {
      this.worker.onmessage = (event) => this.receive(event.data, resolve, reject);
      this.worker.onerror = (event) => {
        const error = new Error(event.message || "the Python worker failed");
        reject(error);
        if (this.pending) this.finish({ type: "error", message: error.message });
      };
      for (const message of early?.messages ?? []) this.receive(message, resolve, reject);
      if (early?.failed) this.worker.onerror(early.failed);
    });
    this.ready.then(
      (ms) => this.setStatus("ready", `Python ready (${(ms / 1000).toFixed(1)} s)`),
      (error) => this.setStatus("broken", `Python could not start: ${error.message}`),
    );
    this.setStatus("starting", "Starting Python…");
    if (!early) this.worker.postMessage(initMessage(this.interrupt));
  }

  receive(message, resolveReady, rejectReady) {
    if (message.type === "ready") {
      this.bootPhases = message.phases; // for the benchmark: where the start-up time goes
      resolveReady(message.bootMs);
    } else if (message.type === "kept") this.runtimeKept = true;
    else if (message.type === "error" && !message.id) rejectReady(new Error(message.message));
    else if (this.pending && message.id === this.pending.id) {
      if (message.type === "progress") {
        this.running = message.test;
        this.onProgress(message.test);
        return;
      }
      // An error after Stop was pressed is how the Stop ended the run, not a fault of the code.
      const stopped = message.type === "stopped" || (message.type === "error" && this.pending.timer);
      if (message.type === "error" && message.fatal) {
        // This Python can no longer run anything: bring up a fresh one and say so.
        const crashed = `Python crashed (${message.message}) and is restarting: `
          + "press Run again when it is ready.";
        this.restart(stopped ? this.stopped() : { type: "error", message: crashed });
      } else this.finish(stopped ? this.stopped() : message);
    }
  }

  stopped() {
    return { type: "stopped", at: this.running ? { test: this.running } : null };
  }

  finish(outcome) {
    const { resolve, timer } = this.pending;
    clearTimeout(timer);
    this.pending = null;
    this.running = null;
    resolve(outcome);
  }

  async run(code) {
    if (this.pending) throw new Error("a run is already in progress");
    const id = this.nextId++;
    const done = new Promise((resolve) => {
      this.pending = { id, resolve, timer: null, posted: false };
    });
    try {
      await this.ready;
    } catch (error) {
      this.finish({ type: "error", message: `Python could not start: ${error.message}` });
      return done;
    }
    if (this.pending?.id !== id) return done; // stopped while Python was still starting
    if (this.interrupt) this.interrupt[0] = 0;
    this.pending.posted = true;
    this.worker.postMessage({ type: "run", id, code });
    return done;
  }

  stop() {
    if (!this.pending || this.pending.timer) return;
    if (!this.pending.posted) {
      this.finish({ type: "stopped" }); // still waiting for Python: nothing to interrupt
      return;
    }
    if (this.interrupt) this.interrupt[0] = 2; // SIGINT: Python raises KeyboardInterrupt
    this.pending.timer = setTimeout(() => this.restart(), this.interrupt ? STOP_GRACE_MS : 0);
  }

  // Replaces the worker with a fresh one; a run still pending ends with `outcome`.
  restart(outcome = this.stopped()) {
    this.worker.terminate();
    if (this.pending) this.finish(outcome);
    this.start();
  }
}

// The PyTorch problems, on the machine that serves the page: the server checks that the
// request comes from its own page (origin, and the token it wrote into the page).
export class ServerRunner {
  constructor({ slug, token }) {
    this.slug = slug;
    this.token = token;
    this.bootPhases = null;
    this.current = null;
  }

  listen({ onStatus }) {
    onStatus("ready", "Runs on this machine, with PyTorch");
  }

  post(path, body) {
    return fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Grpo-Kit-Token": this.token },
      body: JSON.stringify(body),
    });
  }

  async run(code) {
    const run = `${Date.now()}-${Math.random().toString(36).slice(2)}`;
    this.current = run;
    const started = performance.now();
    try {
      const response = await this.post("/api/run", { slug: this.slug, code, run });
      const body = await response.json();
      if (!response.ok || body.type === "error") return { type: "error", message: body.message };
      if (body.type === "result") body.result.ms = performance.now() - started;
      return body;
    } catch (error) {
      return {
        type: "error",
        message: `The local server did not answer (${error.message}): is grpo-kit serve still running?`,
      };
    } finally {
      this.current = null;
    }
  }

  stop() {
    if (this.current) this.post("/api/stop", { run: this.current }).catch(() => {});
  }
}
