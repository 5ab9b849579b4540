// Runs Python snippets under the real MicroPython WebAssembly port (node).
// Input on stdin: {"mjs": path to micropython.mjs, "files": {vfs path: text},
// "snippets": [code, ...], "heapsize": bytes}. Each snippet is a separate
// runPython call, so control returns to JavaScript between them (the only
// time this port can free memory). After each snippet a line
// "\u0001END <i>" is printed so the caller can split the output.
import { readFileSync } from "node:fs";
import { webcrypto } from "node:crypto";

const spec = JSON.parse(readFileSync(0, "utf8"));
const { loadMicroPython } = await import(spec.mjs);
const mp = await loadMicroPython({
  heapsize: spec.heapsize || 1048576,
  stdout: (line) => process.stdout.write(line + "\n"),
  stderr: (line) => process.stderr.write(line + "\n"),
});
// The port has no os.urandom; boards do. Give it the host CSPRNG.
mp.registerJsModule("jsentropy", {
  urandom: (n) => { const b = new Uint8Array(n); webcrypto.getRandomValues(b); return b; },
});
const entries = Object.entries(spec.files || {}).map(([p, t]) => [p, t])
  .concat(Object.entries(spec.binfiles || {}).map(([p, b64]) => [p, Buffer.from(b64, "base64")]));
for (const [path, text] of entries) {
  const parts = path.split("/").filter(Boolean);
  let dir = "";
  for (const p of parts.slice(0, -1)) {
    dir += "/" + p;
    try { mp.FS.mkdir(dir); } catch (e) { /* exists */ }
  }
  mp.FS.writeFile(path, text);
}
mp.runPython("import sys\nif '/lib' not in sys.path: sys.path.append('/lib')");
let i = 0;
for (const code of spec.snippets) {
  try {
    mp.runPython(code);
  } catch (err) {
    process.stdout.write("\u0001ERROR " + i + "\n");
    process.stderr.write((err.type || err.name) + ": " + err.message + "\n");
    process.exit(3);
  }
  process.stdout.write("\u0001END " + i + "\n");
  i += 1;
}
