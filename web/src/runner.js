// Owns the Pyodide worker: starts it early, runs code, and stops runaway code.
//
// Stop first asks Python to raise KeyboardInterrupt through the interrupt buffer (only possible
// when the page is cross-origin isolated, which `grpo-kit serve` arranges). Code that swallows
// the interrupt, or a page without isolation, gets the fallback after a grace period: the
// worker is terminated and a fresh one boots, so the next Run always works. A fatal error in
// Python (a WebAssembly trap) also brings up a fresh worker.

const STOP_GRACE_MS = 1000;

export class Runner {
  constructor({ kit, onStatus }) {
    this.kit = kit;
    this.onStatus = onStatus;
    this.pending = null; // {id, resolve} of the run in progress
    this.nextId = 1;
    this.canInterrupt = self.crossOriginIsolated === true;
    this.start();
  }

  start() {
    this.interrupt = this.canInterrupt ? new Int32Array(new SharedArrayBuffer(4)) : null;
    this.worker = new Worker("/assets/worker.js", { type: "module" });
    this.ready = new Promise((resolve, reject) => {
      this.worker.onmessage = (event) => this.receive(event.data, resolve, reject);
      this.worker.onerror = (event) => {
        const error = new Error(event.message || "the Python worker failed");
        reject(error);
        if (this.pending) this.finish({ type: "error", message: error.message });
      };
    });
    this.ready.then(
      (ms) => this.onStatus("ready", `Python ready (${(ms / 1000).toFixed(1)} s)`),
      (error) => this.onStatus("broken", `Python could not start: ${error.message}`),
    );
    this.onStatus("starting", "Starting Python…");
    this.worker.postMessage({ type: "init", kit: this.kit, interruptBuffer: this.interrupt });
  }

  receive(message, resolveReady, rejectReady) {
    if (message.type === "ready") {
      this.bootPhases = message.phases; // for the benchmark: where the start-up time goes
      resolveReady(message.bootMs);
    }
    else if (message.type === "error" && !message.id) rejectReady(new Error(message.message));
    else if (this.pending && message.id === this.pending.id) {
      // An error after Stop was pressed is how the Stop ended the run, not a fault of the code.
      const stopped = message.type === "stopped" || (message.type === "error" && this.pending.timer);
      if (message.type === "error" && message.fatal) {
        // This Python can no longer run anything: bring up a fresh one and say so.
        const crashed = `Python crashed (${message.message}) and is restarting: `
          + "press Run again when it is ready.";
        this.restart(stopped ? { type: "stopped" } : { type: "error", message: crashed });
      } else this.finish(stopped ? { type: "stopped" } : message);
    }
  }

  finish(outcome) {
    const { resolve, timer } = this.pending;
    clearTimeout(timer);
    this.pending = null;
    resolve(outcome);
  }

  // Resolves with {type: "result", result} or {type: "error", message} or {type: "stopped"}.
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
  restart(outcome = { type: "stopped" }) {
    this.worker.terminate();
    if (this.pending) this.finish(outcome);
    this.start();
  }
}
