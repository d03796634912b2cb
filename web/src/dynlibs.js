// numpy inside the memory snapshot. A snapshot holds Python's memory, numpy's state included,
// but not numpy's compiled modules: each is a WebAssembly module of its own, linked into
// Pyodide's function table at load time. So the build loads them at fixed places before
// numpy is imported and records where (`preload`); the worker, after restoring the memory,
// loads the same modules at the same places in the same order (`replay`), then puts back the
// memory their loading overwrote. Anything that does not match what was recorded throws, and
// the worker starts Python from scratch instead.
//
// The places are those Emscripten's dynamic linker takes from a library "handle" that says
// the library was loaded before: its memory base and size, its table base and size.

const HANDLE_BYTES = 64;
// Table entries left free before the libraries: a browser's Pyodide adds a few entries of its
// own at start-up that Node's does not, and they must not land where numpy was linked.
const TABLE_MARGIN = 64;
const FLAGS = { loadAsync: false, nodelete: true, allowUndefined: true, global: false };

function libraryFiles(pyodide) {
  return { findObject: (path) => pyodide.FS.findObject(path), readFile: (path) => pyodide.FS.readFile(path) };
}

// The compiled-module files under `folder`, in a fixed order.
export function sharedObjects(pyodide, folder) {
  const found = [];
  const walk = (dir) => {
    for (const name of pyodide.FS.readdir(dir)) {
      if (name === "." || name === "..") continue;
      const path = `${dir}/${name}`;
      if (pyodide.FS.isDir(pyodide.FS.stat(path).mode)) walk(path);
      else if (path.endsWith(".so")) found.push(path);
    }
  };
  walk(folder);
  return found.sort();
}

// Loads `paths` (files in Pyodide's file system) and returns the record `replay` needs.
export function preload(pyodide, paths) {
  const M = pyodide._module;
  M.wasmTable.grow(TABLE_MARGIN);
  const record = { tableStart: M.wasmTable.length, libraries: [] };
  for (const path of paths) {
    const handle = M._calloc(1, HANDLE_BYTES); // zeroed: "never loaded", so the linker places it
    M.loadDynamicLibrary(path, { ...FLAGS, fs: libraryFiles(pyodide) }, {}, handle);
    record.libraries.push({
      path,
      memoryBase: M.HEAPU32[(handle + 12) >> 2],
      memorySize: M.HEAP32[(handle + 16) >> 2],
      tableBase: M.HEAPU32[(handle + 20) >> 2],
      tableSize: M.HEAP32[(handle + 24) >> 2],
      tableAfter: M.wasmTable.length,
    });
    M._free(handle);
  }
  return record;
}

// Links the recorded libraries again after a restore; `modules[path]` is each one compiled
// (WebAssembly.Module) or its bytes.
export function replay(pyodide, record, modules) {
  const M = pyodide._module;
  const spare = record.tableStart - M.wasmTable.length;
  if (spare < 0 || spare > TABLE_MARGIN) {
    throw new Error(`function table of ${M.wasmTable.length} entries, recorded ${record.tableStart}`);
  }
  M.wasmTable.grow(spare);
  for (const library of record.libraries) {
    const { path, memoryBase, memorySize, tableBase, tableSize } = library;
    const kept = M.HEAPU8.slice(memoryBase, memoryBase + memorySize); // numpy's state
    const handle = M._calloc(1, HANDLE_BYTES);
    M.HEAP8[handle + 8] = 1; // "loaded before": the linker takes the places below
    M.HEAPU32[(handle + 12) >> 2] = memoryBase;
    M.HEAP32[(handle + 16) >> 2] = memorySize;
    M.HEAPU32[(handle + 20) >> 2] = tableBase;
    M.HEAP32[(handle + 24) >> 2] = tableSize;
    const scope = {};
    try {
      M.preloadedWasm[path] = M.loadWebAssemblyModule(modules[path], FLAGS, path, scope, handle);
      M.loadDynamicLibrary(path, { ...FLAGS, fs: libraryFiles(pyodide) }, scope); // registers it
    } finally {
      M._free(handle);
    }
    M.HEAPU8.set(kept, memoryBase); // loading wrote the library's initial data over it
    if (M.wasmTable.length !== library.tableAfter) {
      throw new Error(`${path} left ${M.wasmTable.length} table entries, recorded ${library.tableAfter}`);
    }
  }
}
