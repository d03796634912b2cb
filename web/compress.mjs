// Precompresses the site's files so the server sends them without compressing on the fly:
// FILE.br (brotli) and FILE.gz (gzip) beside each FILE, when they are worth it.
//
//   node compress.mjs FILE...        (build.mjs imports `precompress` instead)

import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { brotliCompressSync, constants, gzipSync } from "node:zlib";

const MIN_BYTES = 1024;
const MIN_SAVING = 0.1; // an already compressed file (a font, a zip) is sent as it is
const BIG = 1 << 20; // brotli's best quality takes a second per MiB: large files get less

export function precompress(path) {
  const data = readFileSync(path);
  if (data.length < MIN_BYTES) return;
  const quality = data.length > BIG ? 9 : 11;
  const brotli = brotliCompressSync(data, {
    params: {
      [constants.BROTLI_PARAM_QUALITY]: quality,
      [constants.BROTLI_PARAM_SIZE_HINT]: data.length,
    },
  });
  if (brotli.length > data.length * (1 - MIN_SAVING)) return;
  writeFileSync(`${path}.br`, brotli);
  writeFileSync(`${path}.gz`, gzipSync(data, { level: 9 }));
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const path of process.argv.slice(2)) precompress(path);
}
