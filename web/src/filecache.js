// The runtime's big files (the memory snapshot, the site-packages image), kept decoded in the
// origin's private file system once a page has downloaded them. Reading them back is one
// synchronous file read in the worker; the HTTP cache instead decodes them again on every
// load and hands them over in chunks through the browser's network process, which was most
// of a warm start (about half a second for 60 MB).
//
// The files are kept together, as one file: with two reads in a row, Chromium sometimes never
// settled the second (one warm start in forty hung). A read that has not settled in time is
// given up for the download. The name carries the runtime's folder, whose name is a digest
// of its content: a rebuilt runtime never reads an older file, and older files are deleted
// when a newer one is kept. Anything that goes wrong (no such storage, the file locked by
// another tab starting at the same moment, a quota) falls back to the download: the cache
// can only make a start faster.
//
// Format: an index, JSON [[path, offset, size], ...] padded with spaces to HEADER_BYTES, then
// the files, each at an offset that is a multiple of 8 (Pyodide reads the snapshot as 32-bit
// words).

const READ_DEADLINE_MS = 3000; // a read takes a few tens of milliseconds
const HEADER_BYTES = 4096;
const ALIGN = 8;
const PART = ".part"; // written first, renamed when complete: a half-written file is never read

const pathOf = (url) => new URL(url).pathname; // the server's port may change between visits

// One name for a set of files of one runtime folder: "pyodide-3f2a9c1b--snapshot.bin+...".
function cacheName(urls) {
  const paths = urls.map((url) => pathOf(url).split("/").filter(Boolean));
  return `${paths[0][0]}--${paths.map((path) => path.slice(1).join("-")).join("+")}`;
}
const folderOf = (name) => name.split("--")[0];
const alignUp = (offset) => Math.ceil(offset / ALIGN) * ALIGN;

async function readBundle(name) {
  const root = await navigator.storage.getDirectory();
  const handle = await (await root.getFileHandle(name)).createSyncAccessHandle();
  let bytes;
  try {
    bytes = new Uint8Array(handle.getSize());
    if (handle.read(bytes, { at: 0 }) !== bytes.length) throw new Error(`${name} is short`);
  } finally {
    handle.close();
  }
  const index = JSON.parse(new TextDecoder().decode(bytes.subarray(0, HEADER_BYTES)));
  const files = new Map();
  for (const [path, offset, size] of index) {
    if (offset % ALIGN !== 0 || offset + size > bytes.length) throw new Error(`${name} is damaged`);
    files.set(path, bytes.subarray(offset, offset + size));
  }
  return files;
}

function readInTime(name) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`reading ${name} took too long`)), READ_DEADLINE_MS);
  });
  return Promise.race([readBundle(name), late]).finally(() => clearTimeout(timer));
}

// Each of `urls` as a promise of {bytes: Uint8Array, fromCache}: all from the cache if it
// holds them, else each downloaded with `download(url)` (as soon as it arrives).
export function cachedDownloads(urls, download) {
  const cached = readInTime(cacheName(urls)).then((files) => {
    const missing = urls.find((url) => !files.has(pathOf(url)));
    if (missing) throw new Error(`the cache has no ${missing}`);
    return files;
  });
  return Object.fromEntries(
    urls.map((url) => [
      url,
      cached.then(
        (files) => ({ bytes: files.get(pathOf(url)), fromCache: true }),
        async () => ({ bytes: await download(url), fromCache: false }),
      ),
    ]),
  );
}

// Writes the files of `cachedDownloads` to the cache, unless they came from it (call it once
// the learner's first run has gone: the write never delays it), and removes files of other
// runtime versions. True if the cache holds them now.
export async function keep(files) {
  const urls = Object.keys(files);
  const loaded = await Promise.all(Object.values(files));
  if (loaded.every((file) => file.fromCache)) return true;
  const name = cacheName(urls);
  try {
    let offset = HEADER_BYTES;
    const index = urls.map((url, i) => {
      const entry = [pathOf(url), offset, loaded[i].bytes.length];
      offset = alignUp(offset + loaded[i].bytes.length);
      return entry;
    });
    const header = new TextEncoder().encode(JSON.stringify(index).padEnd(HEADER_BYTES));
    if (header.length !== HEADER_BYTES) throw new Error("too many files for one cache entry");
    const root = await navigator.storage.getDirectory();
    const part = await root.getFileHandle(name + PART, { create: true });
    const handle = await part.createSyncAccessHandle();
    try {
      handle.truncate(0);
      handle.write(header, { at: 0 });
      loaded.forEach((file, i) => handle.write(file.bytes, { at: index[i][1] }));
      handle.flush();
    } finally {
      handle.close();
    }
    await part.move(name);
    for await (const old of root.keys()) {
      if (folderOf(old) !== folderOf(name)) await root.removeEntry(old);
    }
    return true;
  } catch (error) {
    console.warn(`could not keep ${name} for the next start`, error);
    return false;
  }
}
