// The site-packages image: every file of the Python packages the page uses (numpy, pytest and
// what pytest needs), in one download, written to Pyodide's file system in a few milliseconds
// (unpacking the wheels in Python took a third of a second). grader/webruntime.py writes it:
//
//   uint32 (little-endian) n | n bytes of JSON {"root", "files": [[path, size], ...]} | data
//
// the files' bytes one after the other, in the order listed, each written to root/path.

// Full path -> the file's bytes (views into `bytes`, no copy).
export function readImage(bytes) {
  const length = new DataView(bytes.buffer, bytes.byteOffset, 4).getUint32(0, true);
  const index = JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + length)));
  const files = new Map();
  let offset = 4 + length;
  for (const [path, size] of index.files) {
    files.set(`${index.root}/${path}`, bytes.subarray(offset, offset + size));
    offset += size;
  }
  if (offset !== bytes.length) throw new Error("the site-packages image is damaged: rebuild the site");
  return files;
}

export function writeImage(pyodide, files) {
  const folders = new Set();
  for (const [path, data] of files) {
    const folder = path.slice(0, path.lastIndexOf("/"));
    if (!folders.has(folder)) {
      pyodide.FS.mkdirTree(folder);
      folders.add(folder);
    }
    pyodide.FS.writeFile(path, data);
  }
}
