// The chat page at `/` in a real browser: Debian's chromium driven by
// puppeteer-core loads it from `vkgate serve`, sends a message, sees the
// reply stream in with a tokens/s figure, and stops a long reply with the
// Stop button. Exits 77 (skipped) where chromium or puppeteer-core is missing,
// unless VKGATE_REQUIRE_TEST_CLIENTS=1 (CI, whose .ci/run installs both).
import test, { before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { clientModule, startServer, activeAfterIdle, sleep } from "./harness.mjs";

const chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));
const puppeteer = clientModule("puppeteer-core");
if (!chromium || !puppeteer) {
  const msg = `chat_page: ${!chromium ? "chromium is not installed (apt-get install chromium)" : "puppeteer-core is not installed (tools/fetch_test_clients.sh BUILD_DIR)"}`;
  if (process.env.VKGATE_REQUIRE_TEST_CLIENTS === "1") throw new Error(msg);
  console.log(`skipped: ${msg}`);
  process.exit(77);
}

let server, browser;
before(async () => {
  server = await startServer(["--parallel", "2"]);
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
});
after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
});

const text = (page, sel) => page.$eval(sel, (e) => e.textContent);

test("the chat page streams a reply and stops one", async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  await page.goto(server.url + "/", { waitUntil: "load" });
  // One file: every request the page made went to the server itself.
  assert.ok(requests.every((u) => u.startsWith(server.url)), `external requests: ${requests}`);
  for (const sel of ["#input", "#send", "#stop", "#messages", "#rate"]) assert.ok(await page.$(sel), `${sel} on the page`);

  const before = (await text(page, "#messages")).length;
  await page.type("#input", "hello there");
  await page.click("#send");
  // The reply grows while it streams, and the page reports a rate when it ends.
  await page.waitForFunction((n) => document.querySelector("#messages").textContent.length > n + "hello there".length, { timeout: 60000 }, before);
  await page.waitForFunction(() => /[0-9]/.test(document.querySelector("#rate").textContent), { timeout: 60000 });

  // A long reply, stopped: the server frees the request.
  await page.type("#input", "tell me a long story");
  await page.click("#send");
  await sleep(500);
  await page.click("#stop");
  const active = await activeAfterIdle(server.url);
  assert.equal(active, 0, "the stopped request was freed");
  assert.deepEqual(errors, []);
});
