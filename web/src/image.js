// The site-packages image: every file of the Python packages the page uses (numpy, pytest and
// what pytest needs), in one download, written to Pyodide's file system in a few milliseconds
// (unpacking the wheels in Python took a third of a second). grader/webruntime.py writes it:
//
//   uint32 (little-endian) n | n bytes of JSON {"root", "files": [[path, size], ...]} | data
//
// the files' bytes one after the other, in the order listed, each written to root/path.

export function writeImage(pyodide, bytes) {
  const length = new DataView(bytes.buffer, bytes.byteOffset, 4).getUint32(0, true);
  const index = JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + length)));
  let offset = 4 + length;
  const folders = new Set();
  for (const [path, size] of index.files) {
    const full = `${index.root}/${path}`;
    const folder = full.slice(0, full.lastIndexOf("/"));
    if (!folders.has(folder)) {
      pyodide.FS.mkdirTree(folder);
      folders.add(folder);
    }
    pyodide.FS.writeFile(full, bytes.subarray(offset, offset + size));
    offset += size;
  }
  if (offset !== bytes.length) throw new Error("the site-packages image is damaged: rebuild the site");
}
