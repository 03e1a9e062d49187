// What the serve tests share: the vkgate CLI started as `vkgate serve` on a
// free port, and the npm clients (tools/fetch_test_clients.sh) loaded from the
// build tree. Environment (tests/CMakeLists.txt sets it):
//   VKGATE_CLI          the vkgate executable
//   VKGATE_NPM_CLIENTS  BUILD_DIR/npm-clients/node_modules
//   VKGATE_SERVE_MODEL  the model the server loads (a tiny GGUF with its tokenizer)
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

export const cli = process.env.VKGATE_CLI;
export const model = process.env.VKGATE_SERVE_MODEL;
export const modelId = model ? path.basename(model).replace(/\.gguf$/, "") : "";

// require() from the clients' node_modules; null where they are not installed.
export function clientModule(name) {
  const dir = process.env.VKGATE_NPM_CLIENTS;
  if (!dir) return null;
  try {
    return createRequire(path.join(dir, "noop.js"))(name);
  } catch {
    return null;
  }
}

// Starts `vkgate serve --weights MODEL --port 0 ...args`; resolves once it
// prints its listening line. stop() sends SIGTERM and resolves with
// {code, signal, ms}.
export function startServer(args = [], weights = model) {
  return new Promise((resolve, reject) => {
    const proc = spawn(cli, ["serve", "--weights", weights, "--port", "0", ...args], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "", err = "";
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      reject(new Error(`vkgate serve printed no listening line in 120 s; stderr: ${err}`));
    }, 120000);
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/vkgate serve: listening on (http:\/\/\S+)/);
      if (m && timer) {
        clearTimeout(timer);
        const exited = new Promise((res) => proc.on("exit", (code, signal) => res({ code, signal })));
        resolve({
          url: m[1],
          proc,
          stderr: () => err,
          exited,
          async stop(signal = "SIGTERM") {
            const t0 = Date.now();
            proc.kill(signal);
            const r = await exited;
            return { ...r, ms: Date.now() - t0 };
          },
        });
      }
    });
    proc.stderr.on("data", (d) => (err += d));
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`vkgate serve exited (${code}) before listening; stderr: ${err}`));
    });
  });
}

// The server's resident memory in KiB (Linux /proc).
export function rssKiB(pid) {
  const m = readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/);
  return m ? Number(m[1]) : NaN;
}

// A metric's value from /metrics' Prometheus text.
export async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = text.match(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.eE+-]+)$`, "m"));
  return m ? Number(m[1]) : NaN;
}

// POST a raw body; resolves with {status, body} (body parsed as JSON where it is).
export async function post(url, route, body, headers = {}) {
  const r = await fetch(`${url}${route}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
  });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, body: json, text };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// vkgate_requests_active once it reaches 0, or its value after 10 s.
export async function activeAfterIdle(url) {
  let active = NaN;
  for (let i = 0; i < 100; ++i) {
    active = await metric(url, "vkgate_requests_active");
    if (active === 0) break;
    await sleep(100);
  }
  return active;
}
