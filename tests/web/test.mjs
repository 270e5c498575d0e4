// Browser test of the translation page: playwright-core drives Debian's chromium (headless) against a
// running `hymt serve` with the demo model. Usage: node test.mjs URL SCREENSHOT_DIR
import { chromium } from "playwright-core";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [url, shots] = process.argv.slice(2);
mkdirSync(shots, { recursive: true });
const profile = mkdtempSync(join(tmpdir(), "hymt-chromium-"));
let failures = 0;
function check(ok, what) {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures++;
}

const context = await chromium.launchPersistentContext(profile, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  viewport: { width: 1200, height: 820 },
});
try {
  const page = context.pages()[0] || await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });

  await page.goto(url);
  await page.waitForFunction(() => document.getElementById("status").textContent.includes("Model"));
  check((await page.textContent("#status")).includes("memory mode"), "status line shows the model and the memory mode");

  // Every control has an accessible name.
  const unlabeled = await page.evaluate(() => [...document.querySelectorAll("input, select, textarea, button")]
    .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute("aria-label") && !el.textContent.trim())
    .map((el) => el.id || el.outerHTML.slice(0, 60)));
  check(unlabeled.length === 0, "every control has a label " + JSON.stringify(unlabeled));

  // Languages: native and English names; the search box narrows the list.
  await page.fill("#target-filter", "deu");
  const targets = await page.$$eval("#target option", (os) => os.map((o) => o.textContent));
  check(targets.length === 1 && targets[0].includes("Deutsch") && targets[0].includes("German"),
        "searching 'deu' leaves Deutsch — German: " + JSON.stringify(targets));
  await page.fill("#target-filter", "");

  // Type, count, translate (streamed), English -> Chinese.
  await page.selectOption("#source", "en");
  await page.selectOption("#target", "zh");
  await page.click("#input");
  await page.keyboard.type("The house is big.");
  check((await page.textContent("#count")).startsWith("17 /"), "the counter shows 17 characters");
  await page.click("#translate");
  await page.waitForFunction(() => document.getElementById("state").textContent.startsWith("Done"));
  const zh = await page.inputValue("#output");
  check(zh === "这房子很大。", "en→zh 'The house is big.' gives 这房子很大。 (got " + zh + ")");
  await page.waitForFunction(() => document.getElementById("status").textContent.includes("tokens/s"));
  check(true, "the status line shows the speed in tokens/s: " + await page.textContent("#status"));
  await page.screenshot({ path: join(shots, "translate.png") });

  // Swap: languages and texts change places; Ctrl+Enter translates back.
  await page.click("#swap");
  check(await page.inputValue("#source") === "zh" && await page.inputValue("#target") === "en", "swap exchanges the languages");
  check(await page.inputValue("#input") === "这房子很大。", "swap moves the translation into the input");
  await page.click("#input");
  await page.keyboard.press("Control+Enter");
  await page.waitForFunction(() => document.getElementById("state").textContent.startsWith("Done"));
  const back = await page.inputValue("#output");
  check(/house/i.test(back), "Ctrl+Enter translates zh→en: " + back);

  // Auto-detection shows what it found.
  await page.selectOption("#source", "auto");
  await page.selectOption("#target", "en");
  await page.fill("#input", "Das Haus ist sehr groß und schön.");
  await page.click("#translate");
  await page.waitForFunction(() => document.getElementById("detected").textContent.includes("Detected"));
  check((await page.textContent("#detected")).includes("German"), "auto-detect reports German: " + await page.textContent("#detected"));

  // The glossary editor adds and removes terms.
  await page.click("#options summary");
  await page.click("#add-term");
  await page.fill("#glossary tbody tr:last-child td:nth-child(1) input", "house");
  await page.fill("#glossary tbody tr:last-child td:nth-child(2) input", "Haus");
  check(await page.$$eval("#glossary tbody tr", (rs) => rs.length) === 1, "a glossary term was added");
  await page.click("#glossary tbody tr:last-child button");
  check(await page.$$eval("#glossary tbody tr", (rs) => rs.length) === 0, "the glossary term was removed");

  // File upload with progress, then the download.
  await page.selectOption("#source", "en");
  await page.selectOption("#target", "de");
  await page.setInputFiles("#file", {
    name: "notes.md", mimeType: "text/markdown",
    buffer: Buffer.from("# Notes\n\nThe house is big.\n\n`code stays`\n"),
  });
  await page.click("#upload");
  await page.waitForSelector("#download:not([hidden])");
  check(await page.$eval("#progress", (p) => p.value) === 100, "the progress bar reached 100");
  const href = await page.getAttribute("#download", "href");
  const body = await page.evaluate(async (h) => (await fetch(h)).text(), href);
  check(body.startsWith("# ") && body.includes("`code stays`") && body.includes("Haus"),
        "the downloaded file keeps its Markdown and is translated: " + JSON.stringify(body));
  await page.screenshot({ path: join(shots, "file.png") });

  // Dark theme, then phone width.
  await page.click("#theme");
  check(await page.evaluate(() => document.documentElement.dataset.theme) === "dark", "the theme switches to dark");
  await page.screenshot({ path: join(shots, "dark.png") });
  await page.setViewportSize({ width: 390, height: 844 });
  check(await page.evaluate(() => document.documentElement.scrollWidth <= 390), "no horizontal scrolling at phone width");
  await page.screenshot({ path: join(shots, "phone.png"), fullPage: true });

  check(errors.length === 0, "no errors in the page " + JSON.stringify(errors));
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
if (failures) {
  console.log(`${failures} browser check(s) failed`);
  process.exit(1);
}
console.log("all browser checks passed");
