#!/usr/bin/env node
// Load on `vkgate serve`: C concurrent clients, each sending R streaming
// completions one after another, at each C of --clients. Prints per level the
// aggregate generated tokens/s, the aggregate decode tokens/s (the tokens
// after each request's first, per second of the time some request was past
// its first token: prompts left out), time to first token and request
// latency percentiles (p50/p90/p99), and with --json the same as JSON.
//   node tools/bench_serve.mjs --url http://127.0.0.1:8080 [--clients 1,4,8,16]
//        [--requests 2] [--max-tokens 32] [--prompt "..."] [--json]
//   node tools/bench_serve.mjs --weights FILE.gguf [--cli build/tools/vkgate] [--parallel 16]
//        [--precision P] [--quant T] ...
// (--weights starts the server itself on a free port and stops it afterwards;
// --prompt-cache N passes that flag on.)
// Greedy requests with distinct prompts; tokens from each stream's usage chunk.
// Each level starts after c unmeasured concurrent requests of 4 tokens.
//   ... --turns N [--turn-words W]: instead, one conversation of N turns, each
//   prompt the last one, its completion and W (default 64) more words, as a
//   chat client resends its history: per turn the prompt's tokens, those the
//   server's prompt cache held, and the time to first token.
import { spawn } from "node:child_process";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => {
    if (a.startsWith("--")) acc.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith("--") ? all[i + 1] : "1"]);
    return acc;
  }, []),
);
const levels = (args.clients ?? "1,4,8,16").split(",").map(Number);
const perClient = Number(args.requests ?? 2);
const maxTokens = Number(args["max-tokens"] ?? 32);
const prompt = args.prompt ?? "The history of the";

async function startServer() {
  const cli = args.cli ?? "build/tools/vkgate";
  const extra = ["--parallel", args.parallel ?? String(Math.max(...levels))];
  if (args.precision) extra.push("--precision", args.precision);
  if (args.quant) extra.push("--quant", args.quant);
  if (args["prompt-cache"]) extra.push("--prompt-cache", args["prompt-cache"]);
  const proc = spawn(cli, ["serve", "--weights", args.weights, "--port", "0", ...extra], { stdio: ["ignore", "pipe", "inherit"] });
  const url = await new Promise((resolve, reject) => {
    let out = "";
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    proc.on("exit", (c) => reject(new Error(`vkgate serve exited with ${c}`)));
  });
  return { url, stop: () => proc.kill("SIGTERM") };
}

// One streamed completion: {ttft, total} in ms, its generated tokens, and
// when (performance.now()) its first token and its end came.
async function one(url, text, tokensWanted = maxTokens) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(args["api-key"] ? { authorization: `Bearer ${args["api-key"]}` } : {}) },
    body: JSON.stringify({ prompt: text, max_tokens: tokensWanted, temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  let ttft = null, tokens = 0, reply = "", usage = null, buf = "";
  const decoder = new TextDecoder();
  for await (const chunk of r.body) {
    buf += decoder.decode(chunk, { stream: true });
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, at).trim();
      buf = buf.slice(at + 2);
      if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
      const j = JSON.parse(event.slice(6));
      if (ttft === null && j.choices?.[0]?.text) ttft = performance.now() - t0;
      reply += j.choices?.[0]?.text ?? "";
      if (j.usage) (usage = j.usage), (tokens = j.usage.completion_tokens);
    }
  }
  const end = performance.now();
  return { ttft: ttft ?? end - t0, total: end - t0, tokens, first: t0 + (ttft ?? end - t0), end, text: reply, usage };
}

// Seconds covered by the union of the runs' [first, end] intervals.
function decodeSeconds(runs) {
  const spans = runs.map((r) => [r.first, r.end]).sort((a, b) => a[0] - b[0]);
  let ms = 0, from = -Infinity, to = -Infinity;
  for (const [a, b] of spans) {
    if (a > to) {
      ms += to - from > 0 ? to - from : 0;
      [from, to] = [a, b];
    } else to = Math.max(to, b);
  }
  ms += to - from > 0 ? to - from : 0;
  return ms / 1e3;
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

// One conversation of --turns turns: per turn its prompt's tokens, the cached ones, the first token's time.
async function conversation(url) {
  const words = Number(args["turn-words"] ?? 64);
  const more = (turn) => Array.from({ length: words }, (_, i) => `word${(turn * 7919 + i * 104729) % 9973}`).join(" ");
  await one(url, "warm up the pipelines", 4);
  let text = prompt;
  const turns = [];
  for (let t = 0; t < Number(args.turns); ++t) {
    text += " " + more(t);
    const r = await one(url, text);
    turns.push({ turn: t + 1, prompt_tokens: r.usage.prompt_tokens,
                 cached_tokens: r.usage.prompt_tokens_details?.cached_tokens ?? 0, ttft_ms: r.ttft });
    if (!args.json)
      console.log(`turn ${t + 1}: prompt ${r.usage.prompt_tokens} tokens, ${turns.at(-1).cached_tokens} cached, ` +
                  `first token ${r.ttft.toFixed(0)} ms`);
    text += r.text;
  }
  return turns;
}

const server = args.weights ? await startServer() : { url: args.url ?? "http://127.0.0.1:8080", stop() {} };
const results = [];
try {
  if (args.turns) {
    const turns = await conversation(server.url);
    if (args.json) console.log(JSON.stringify({ url: server.url, max_tokens: maxTokens, turns }, null, 2));
    server.stop();
    process.exit(0);
  }
  await one(server.url, prompt);  // warm-up: pipelines compiled, plans recorded
  for (const c of levels) {
    // The level's own warm-up, unmeasured: a step of c rows takes kernels a
    // single row does not (a driver like lavapipe compiles each on first use).
    if (c > 1) await Promise.all(Array.from({ length: c }, (_, i) => one(server.url, `${prompt} ${i} warm-up`, 4)));
    const t0 = performance.now();
    const runs = (await Promise.all(
      Array.from({ length: c }, async (_, i) => {
        const out = [];
        for (let r = 0; r < perClient; ++r) out.push(await one(server.url, `${prompt} ${i} ${r}`));
        return out;
      }),
    )).flat();
    const seconds = (performance.now() - t0) / 1e3;
    const tokens = runs.reduce((a, r) => a + r.tokens, 0);
    const row = {
      clients: c, requests: runs.length, tokens, seconds,
      tokens_per_s: tokens / seconds,
      decode_tokens_per_s: runs.reduce((a, r) => a + Math.max(r.tokens - 1, 0), 0) / decodeSeconds(runs),
      ttft_ms: { p50: pct(runs.map((r) => r.ttft), 50), p90: pct(runs.map((r) => r.ttft), 90), p99: pct(runs.map((r) => r.ttft), 99) },
      latency_ms: { p50: pct(runs.map((r) => r.total), 50), p90: pct(runs.map((r) => r.total), 90), p99: pct(runs.map((r) => r.total), 99) },
    };
    results.push(row);
    if (!args.json)
      console.log(`clients ${String(c).padStart(2)}: ${row.tokens_per_s.toFixed(2)} tokens/s (${tokens} tokens in ${seconds.toFixed(1)} s), ` +
        `decode ${row.decode_tokens_per_s.toFixed(2)} tokens/s | ` +
        `first token p50 ${row.ttft_ms.p50.toFixed(0)} p90 ${row.ttft_ms.p90.toFixed(0)} p99 ${row.ttft_ms.p99.toFixed(0)} ms | ` +
        `request p50 ${row.latency_ms.p50.toFixed(0)} p90 ${row.latency_ms.p90.toFixed(0)} p99 ${row.latency_ms.p99.toFixed(0)} ms`);
  }
  const single = results.find((r) => r.clients === 1);
  for (const r of results)
    if (single && r.clients > 1 && !args.json)
      console.log(`clients ${r.clients}: ${(r.tokens_per_s / single.tokens_per_s).toFixed(2)}x the single client's tokens/s, ` +
        `${(r.decode_tokens_per_s / single.decode_tokens_per_s).toFixed(2)}x its decode tokens/s`);
  if (args.json) console.log(JSON.stringify({ url: server.url, max_tokens: maxTokens, results }, null, 2));
} finally {
  server.stop();
}
