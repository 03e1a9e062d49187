// `vkgate serve` against OpenAI's official npm client (and raw fetch for what a
// client library would refuse to send): completions and chat, streamed and
// not, seeds, usage, every bad request, a disconnect, 16 concurrent streams,
// memory over 500 requests, SIGTERM. Run by ctest (tests/CMakeLists.txt):
//   node --test tests/serve/openai_client.test.mjs
// Exits 77 (skipped) without the client (tools/fetch_test_clients.sh), or
// fails then when VKGATE_REQUIRE_TEST_CLIENTS=1 (CI).
import test, { before, after } from "node:test";
import assert from "node:assert/strict";
import { clientModule, startServer, modelId, post, rssKiB, activeAfterIdle, sleep } from "./harness.mjs";

const openaiModule = clientModule("openai");
if (!openaiModule) {
  const msg = "openai_client: the openai npm package is not installed (tools/fetch_test_clients.sh BUILD_DIR)";
  if (process.env.VKGATE_REQUIRE_TEST_CLIENTS === "1") throw new Error(msg);
  console.log(`skipped: ${msg}`);
  process.exit(77);
}
const OpenAI = openaiModule.OpenAI ?? openaiModule.default;

let server, client;
before(async () => {
  server = await startServer(["--parallel", "4", "--ctx", "256"]);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
after(async () => {
  if (server) await server.stop();
});

const greedy = { model: modelId, temperature: 0, max_tokens: 8 };

// The streamed text of one completion, and its chunks.
async function streamed(params) {
  const chunks = [];
  let text = "";
  for await (const c of await client.completions.create({ ...params, stream: true })) {
    chunks.push(c);
    text += c.choices[0]?.text ?? "";
  }
  return { text, chunks };
}

test("models: the one model, by its file name", async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [modelId]);
  assert.equal(list.data[0].object, "model");
});

test("completions: text, finish_reason and usage counts", async () => {
  const r = await client.completions.create({ ...greedy, prompt: "hello world" });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].text, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  if (r.choices[0].finish_reason === "length") assert.equal(r.usage.completion_tokens, 8);
  // A longer prompt counts more tokens.
  const r2 = await client.completions.create({ ...greedy, prompt: "hello world hello world" });
  assert.ok(r2.usage.prompt_tokens > r.usage.prompt_tokens);
});

test("completions: streamed chunks add up to the unstreamed text, ending with [DONE]", async () => {
  const whole = await client.completions.create({ ...greedy, prompt: "the cat sat" });
  const { text, chunks } = await streamed({ ...greedy, prompt: "the cat sat" });
  assert.equal(text, whole.choices[0].text);
  assert.ok(chunks.length >= 1);
  assert.equal(chunks.at(-1).choices[0].finish_reason, whole.choices[0].finish_reason);
  // The raw stream ends with the [DONE] event.
  const raw = await post(server.url, "/v1/completions", JSON.stringify({ ...greedy, prompt: "the cat sat", stream: true }));
  assert.equal(raw.status, 200);
  assert.match(raw.text, /data: \[DONE\]\s*$/);
});

test("completions: a seed's draws repeat; usage in the stream with include_usage", async () => {
  const p = { model: modelId, prompt: "once upon", max_tokens: 8, temperature: 1.0, top_p: 0.95, seed: 1234 };
  const a = await client.completions.create(p);
  const b = await client.completions.create(p);
  assert.equal(a.choices[0].text, b.choices[0].text);
  const chunks = [];
  for await (const c of await client.completions.create({ ...p, stream: true, stream_options: { include_usage: true } }))
    chunks.push(c);
  assert.equal(chunks.map((c) => c.choices[0]?.text ?? "").join(""), a.choices[0].text);
  const usage = chunks.find((c) => c.usage)?.usage;
  assert.ok(usage, "a usage chunk");
  const counts = ({ prompt_tokens_details, ...rest }) => rest;
  assert.deepEqual(counts(usage), counts(a.usage));
  // The same prompt again: all of it but its last token from the prompt cache.
  assert.equal(usage.prompt_tokens_details.cached_tokens, usage.prompt_tokens - 1);
});

test("chat: ChatML-formatted conversation, streamed and not", async () => {
  const messages = [
    { role: "system", content: "be brief" },
    { role: "user", content: "hi there" },
  ];
  const r = await client.chat.completions.create({ ...greedy, messages });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  let text = "";
  let last;
  for await (const c of await client.chat.completions.create({ ...greedy, messages, stream: true })) {
    assert.equal(c.object, "chat.completion.chunk");
    text += c.choices[0]?.delta?.content ?? "";
    last = c;
  }
  assert.equal(text, r.choices[0].message.content);
  assert.equal(last.choices[0].finish_reason, r.choices[0].finish_reason);
});

test("logprobs: chat's content entries and completions' lists, the chosen token the likeliest when greedy", async () => {
  const messages = [{ role: "user", content: "hi there" }];
  const r = await client.chat.completions.create({ ...greedy, messages, logprobs: true, top_logprobs: 2 });
  const content = r.choices[0].logprobs.content;
  assert.ok(content.length >= 1 && content.length <= r.usage.completion_tokens);
  for (const t of content) {
    assert.equal(typeof t.token, "string");
    assert.ok(t.logprob <= 0);
    assert.ok(Array.isArray(t.bytes));
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(Math.abs(t.logprob - t.top_logprobs[0].logprob) < 1e-9);
  }
  const c = await client.completions.create({ ...greedy, prompt: "the cat sat", logprobs: 1 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, c.usage.completion_tokens);
  assert.equal(lp.token_logprobs.length, lp.tokens.length);
  // Tokens that are parts of a character show as U+FFFD each.
  if (!lp.tokens.join("").includes("\uFFFD")) assert.equal(lp.tokens.join(""), c.choices[0].text);
  for (const [i, top] of lp.top_logprobs.entries())
    assert.ok(Math.abs(Object.values(top)[0] - lp.token_logprobs[i]) < 1e-9);
  const plain = await client.completions.create({ ...greedy, prompt: "the cat sat" });
  assert.equal(plain.choices[0].logprobs, null);
});

test("n: several choices, each the request alone with seed + index, streamed by index", async () => {
  const p = { model: modelId, prompt: "once upon", max_tokens: 6, temperature: 1.0, seed: 77 };
  const r = await client.completions.create({ ...p, n: 3 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  for (const c of r.choices) {
    const alone = await client.completions.create({ ...p, seed: 77 + c.index });
    assert.equal(c.text, alone.choices[0].text);
  }
  const texts = ["", "", ""];
  for await (const c of await client.completions.create({ ...p, n: 3, stream: true }))
    for (const choice of c.choices) texts[choice.index] += choice.text;
  assert.deepEqual(texts, r.choices.map((c) => c.text));
  const chat = await client.chat.completions.create({ ...greedy, messages: [{ role: "user", content: "hi" }], n: 2 });
  assert.equal(chat.choices.length, 2);
  assert.equal(chat.choices[0].message.content, chat.choices[1].message.content);
});

// status, error.type present, message mentioning `word`.
async function rejects(route, body, status, word, headers, url = server.url) {
  const r = await post(url, route, body, headers);
  assert.equal(r.status, status, `${route} ${String(body).slice(0, 80)}: ${r.text}`);
  assert.ok(r.body && r.body.error, `an OpenAI error body: ${r.text}`);
  assert.equal(typeof r.body.error.message, "string");
  assert.ok("type" in r.body.error && "code" in r.body.error);
  if (word) assert.match(r.body.error.message, word);
}

test("bad requests: OpenAI-style errors with the right status", async () => {
  const c = "/v1/completions";
  await rejects(c, "{not json", 400);
  await rejects(c, JSON.stringify({ prompt: "a", max_tokens: "eight" }), 400, /max_tokens/);
  await rejects(c, JSON.stringify({ prompt: "a", max_tokens: 0 }), 400, /max_tokens/);
  await rejects(c, JSON.stringify({ prompt: "a", temperature: "hot" }), 400, /temperature/);
  await rejects(c, JSON.stringify({ max_tokens: 4 }), 400, /prompt/);
  await rejects(c, JSON.stringify({ prompt: "a ".repeat(400), max_tokens: 4 }), 400, /context/);
  await rejects(c, JSON.stringify({ prompt: "a", model: "no-such-model" }), 404, /no-such-model/);
  // Invalid UTF-8 inside a JSON string.
  const bad = Buffer.concat([Buffer.from('{"prompt": "a'), Buffer.from([0xff, 0xfe]), Buffer.from('", "max_tokens": 2}')]);
  await rejects(c, bad, 400);
  await rejects("/v1/chat/completions", JSON.stringify({ messages: [{ role: "wizard", content: "x" }] }), 400, /role/);
  await rejects("/v1/chat/completions", JSON.stringify({ messages: "hi" }), 400, /messages/);
  // Over the body limit.
  await rejects(c, JSON.stringify({ prompt: "x".repeat(2 << 20) }), 413);
  const nf = await fetch(`${server.url}/v1/nothing-here`);
  assert.equal(nf.status, 404);
});

test("a client that disconnects mid-stream frees its slot", async () => {
  const ac = new AbortController();
  const stream = await client.completions.create(
    { ...greedy, prompt: "a long story", max_tokens: 200, stream: true },
    { signal: ac.signal },
  );
  try {
    for await (const _ of stream) {
      ac.abort();
    }
  } catch {}
  const active = await activeAfterIdle(server.url);
  assert.equal(active, 0, "no request left active after the client went away");
  const r = await client.completions.create({ ...greedy, prompt: "after" });
  assert.ok(r.choices[0].text !== undefined);
});

test("16 concurrent streaming clients each get what they get alone", async () => {
  const prompts = Array.from({ length: 16 }, (_, i) => `prompt number ${i} says`);
  const alone = [];
  for (const p of prompts) alone.push((await client.completions.create({ ...greedy, prompt: p })).choices[0].text);
  const together = await Promise.all(prompts.map((p) => streamed({ ...greedy, prompt: p })));
  together.forEach((r, i) => assert.equal(r.text, alone[i], `client ${i}`));
});

// (VKGATE_SERVE_SKIP_RSS=1: CI's sanitizer stage, where AddressSanitizer's
// quarantine holds freed memory and resident memory means nothing.)
test("server memory stays flat over 500 requests", { skip: process.env.VKGATE_SERVE_SKIP_RSS === "1" }, async () => {
  const one = (i) => client.completions.create({ model: modelId, prompt: `request ${i % 7}`, max_tokens: 2, temperature: 0 });
  for (let i = 0; i < 50; ++i) await one(i);
  const warm = rssKiB(server.proc.pid);
  for (let i = 0; i < 450; i += 4) await Promise.all([one(i), one(i + 1), one(i + 2), one(i + 3)]);
  const end = rssKiB(server.proc.pid);
  console.log(`serve: resident memory ${warm} KiB after 50 requests, ${end} KiB after 500`);
  assert.ok(end - warm < 16 * 1024, `grew ${end - warm} KiB`);
});

test("--api-key: requests without the key get 401; a full queue is refused; SIGTERM exits 0 within 5 s", async () => {
  const keyed = await startServer(["--api-key", "sekret", "--parallel", "1", "--queue", "1"]);
  try {
    const body2 = JSON.stringify({ prompt: "a", max_tokens: 2 });
    await rejects("/v1/completions", body2, 401, null, {}, keyed.url);
    await rejects("/v1/completions", body2, 401, null, { authorization: "Bearer wrong" }, keyed.url);
    const ok = await post(keyed.url, "/v1/completions", body2, { authorization: "Bearer sekret" });
    assert.equal(ok.status, 200, ok.text);
    // One running, one waiting: the rest are refused with 429 or 503.
    const auth = { authorization: "Bearer sekret" };
    const body = JSON.stringify({ prompt: "queue", max_tokens: 64 });
    const all = await Promise.all(Array.from({ length: 6 }, () => post(keyed.url, "/v1/completions", body, auth)));
    const refused = all.filter((r) => r.status === 429 || r.status === 503);
    assert.ok(refused.length >= 1, `statuses ${all.map((r) => r.status)}`);
    assert.ok(refused.every((r) => r.body?.error), "refusals carry an error body");
    assert.ok(all.some((r) => r.status === 200));
    // SIGTERM mid-stream: exit status 0 within 5 s.
    fetch(`${keyed.url}/v1/completions`, { method: "POST", headers: auth, body: JSON.stringify({ prompt: "x", max_tokens: 500, stream: true }) })
      .then((r) => r.text())
      .catch(() => {});
    await sleep(300);
    const { code, signal, ms } = await keyed.stop("SIGTERM");
    assert.equal(signal, null);
    assert.equal(code, 0);
    assert.ok(ms < 5000, `took ${ms} ms`);
  } finally {
    keyed.proc.kill("SIGKILL");
  }
});
