// Drives `starter console` in Debian's Chromium, as an operator would, for
// integration/console_browser_test.go. It reads what to do from the
// environment, waits for page conditions (never for a fixed time), and
// prints one JSON line with what it saw; it exits 1 with the reason on
// any failure.
//
//   CONSOLE_URL   the URL the console printed (token included)
//   SCENARIO      approve | resolve | claim | find | login | deeplink | port | cards
//   CARDS         cards: JSON {kind: workflow id} of the questions whose
//                 cards to read (approval, outcome, reversal)
//   OTHER_CONSOLE_URL  claim: the second operator's console URL
//   WORKFLOW_ID   the plan whose question to decide
//   AMOUNT        approve: the amount the card must show (600.00 EUR)
//   REASON        the reason typed
//   OUTCOME       resolve: succeeded | failed | retry
//   EXTERNAL_ID   resolve succeeded: the provider's id typed
//   CHROMIUM      the browser (default /usr/bin/chromium)
//   AGENTSAGA_SCREENSHOTS  a directory: write console.png there and, with
//                 UI_PLAN_URL, CODEC_LOGIN_URL and CODEC_TOKEN, ui-plan.png
//                 of the Temporal UI's page of the plan (approve scenario)
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const env = process.env;
const need = (name) => {
  if (!env[name]) throw new Error(`set ${name}`);
  return env[name];
};
const TIMEOUT = 20000;

async function main() {
  const url = need('CONSOLE_URL');
  const scenario = need('SCENARIO');
  const wid = env.WORKFLOW_ID || '';
  // PROFILE keeps the browser's profile (its storage) across runs.
  const dir = env.PROFILE || mkdtempSync(join(tmpdir(), 'agentsaga-chromium-'));
  const ctx = await chromium.launchPersistentContext(dir, {
    executablePath: env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const problems = [];
  try {
    const page = ctx.pages()[0] || await ctx.newPage();
    page.setDefaultTimeout(TIMEOUT);
    page.on('console', (m) => {
      // The find scenario sends a bad amount on purpose: its 400 is expected.
      if (m.type() === 'error' && !(scenario === 'find' && /status of 400/.test(m.text()))) problems.push('console error: ' + m.text());
    });
    page.on('pageerror', (e) => problems.push('page error: ' + e.message));
    if (scenario === 'deeplink') {
      console.log(JSON.stringify(await deepLink(page, url)));
      return;
    }
    const resp = await page.goto(url);
    if (!resp || !resp.ok()) throw new Error(`opening the console answered ${resp && resp.status()}`);
    if (page.url().includes('token=')) throw new Error('the token stayed in the address: ' + page.url());
    await page.locator('body[data-loaded="true"]').waitFor();

    const scenarios = { login: async () => ({ shown: await shownQuestions(page) }), approve: () => approve(page, wid, ctx), resolve: () => resolve(page, wid), port: () => otherPort(page, ctx), find: () => findWork(page), claim: () => claimShared(page, wid, ctx), cards: () => readCards(page) };
    if (!scenarios[scenario]) throw new Error('unknown SCENARIO ' + scenario);
    const out = await scenarios[scenario]();
    if (problems.length) throw new Error(problems.join('; '));
    out.url_after_login = page.url();
    console.log(JSON.stringify(out));
  } finally {
    await ctx.close();
    if (!env.PROFILE) rmSync(dir, { recursive: true, force: true });
  }
}

function question(page, wid, kind) {
  return page.locator(`#open article[data-workflow="${wid}"][data-kind="${kind}"]`);
}

// decided waits until the question of wid is listed as decided with text,
// or fails at once with the console's answer when it shows an error.
async function decided(page, wid, text, asked) {
  const art = page.locator(`#decided article[data-workflow="${wid}"]`).filter({ hasText: text });
  const refused = asked.locator('.result.error');
  await Promise.race([art.waitFor(), refused.waitFor()]);
  if (await refused.count()) throw new Error('the console answered: ' + await refused.innerText());
  return art;
}

async function approve(page, wid, ctx) {
  const amount = need('AMOUNT');
  const art = question(page, wid, 'approval');
  await art.waitFor();
  const cardText = await art.locator('dl.card').innerText();
  if (!cardText.includes(amount)) throw new Error(`the card does not show ${amount}: ${cardText}`);
  const digest = (await art.locator('.digest').innerText()).replace(/^card /, '');
  const age = await art.locator('.age').innerText();
  const expiry = await art.locator('.expiry').innerText();
  if (env.AGENTSAGA_SCREENSHOTS) {
    await page.locator('#open article[data-kind="outcome"]').first().waitFor();
    await page.screenshot({ path: join(env.AGENTSAGA_SCREENSHOTS, 'console.png'), fullPage: true });
    if (env.UI_PLAN_URL) await uiShot(ctx);
  }
  await art.locator('textarea[name="reason"]').fill(need('REASON'));
  await art.locator('button[data-action="approve"]').click();
  const done = await decided(page, wid, 'approved', art);
  return { card: cardText, card_digest: digest, age, expiry, decided: await done.innerText() };
}

// readCards reads the card of one question of each kind named in CARDS:
// its lines (label and value), its buttons in page order (":default" on a
// button styled or focused as the default) and what the page says each
// answer does. It decides nothing.
async function readCards(page) {
  const out = { cards: {} };
  for (const [kind, wid] of Object.entries(JSON.parse(need('CARDS')))) {
    const art = question(page, wid, kind);
    await art.waitFor();
    const lines = await art.locator('dl.card').evaluate((dl) => {
      const got = [];
      for (const dt of dl.querySelectorAll('dt')) got.push({ label: dt.textContent, value: dt.nextElementSibling.textContent });
      return got;
    });
    const buttons = await art.locator('button[data-action]').evaluateAll((bs) =>
      bs.map((b) => b.dataset.action + (b.classList.contains('ok') || b === document.activeElement || b.autofocus ? ':default' : '')));
    const does = await art.locator('ul.does li').allInnerTexts();
    out.cards[kind] = { lines, buttons, does };
  }
  return out;
}

async function resolve(page, wid) {
  const outcome = need('OUTCOME');
  const art = question(page, wid, 'outcome');
  await art.waitFor();
  const cardText = await art.locator('dl.card').innerText();
  const digest = (await art.locator('.digest').innerText()).replace(/^card /, '');
  const buttons = await art.locator('button[data-action]').evaluateAll((bs) => bs.map((b) => b.dataset.action + (b.classList.contains('ok') ? ':default' : '')));
  const does = await art.locator('ul.does').innerText();
  await art.locator('textarea[name="reason"]').fill(need('REASON'));
  if (env.EXTERNAL_ID) await art.locator('input[name="external_id"]').fill(env.EXTERNAL_ID);
  await art.locator(`button[data-action="${outcome}"]`).click();
  const done = await decided(page, wid, 'resolved ' + outcome, art);
  return { card: cardText, card_digest: digest, decided: await done.innerText(), buttons, does };
}

// otherPort visits, in the same browser, a server on another local port
// (OTHER_URL) after the console session was opened: it loads a page there
// that requests an image from itself and tries the console's API with the
// browser's credentials, and reads its own storage. The Go test checks
// what that server received.
async function otherPort(page, ctx) {
  const consoleOrigin = new URL(page.url()).origin;
  const own = await page.evaluate(() => localStorage.getItem('agentsaga-console-session'));
  if (!own) throw new Error('the console page holds no session in its storage');
  const other = await ctx.newPage();
  other.setDefaultTimeout(TIMEOUT);
  await other.goto(need('OTHER_URL'));
  await other.locator('img#pixel').evaluate((img) => img.complete || new Promise((r) => { img.onload = img.onerror = r; }));
  const seen = await other.evaluate(async (origin) => {
    const out = { storage: localStorage.getItem('agentsaga-console-session'), cookies: document.cookie };
    try {
      const r = await fetch(origin + '/api/questions', { credentials: 'include', mode: 'cors' });
      out.fetch = 'answered ' + r.status;
    } catch (e) {
      out.fetch = 'refused: ' + e.message;
    }
    try {
      const r = await fetch(origin + '/api/questions', { credentials: 'include', mode: 'no-cors' });
      out.no_cors = 'opaque ' + r.type;
    } catch (e) {
      out.no_cors = 'refused: ' + e.message;
    }
    return out;
  }, consoleOrigin);
  await other.close();
  return { other_storage: seen.storage, other_cookies: seen.cookies, cross_fetch: seen.fetch, no_cors: seen.no_cors };
}

// findWork searches as an operator whose key may only approve: the default
// view, all questions, an object search with paging, one order, and the
// largest amount first. PLAN is what the test's plans' ids share, PREFIX
// what their orders' ids share.
async function findWork(page) {
  const prefix = need('PREFIX');
  const plan = need('PLAN');
  const out = {};
  const arts = () => page.locator('#open article:not([hidden])');
  const settle = async (want) => {
    // Wait until the list answers the search just made (its count line).
    await page.locator('#open-count').filter({ hasText: want }).waitFor();
  };
  const set = async (name, value) => {
    const f = page.locator(`#filters [name="${name}"]`);
    if (await f.evaluate((e) => e.tagName) === 'SELECT') await f.selectOption(value); else await f.fill(value);
  };
  await set('plan', plan);
  await settle(/\(12 matches of \d+ open\)/);
  out.mine_outcome = await page.locator('#open article[data-kind="outcome"]').count();
  out.approval_buttons = await arts().first().locator('button[data-action]').evaluateAll((bs) => bs.map((b) => b.dataset.action + (b.classList.contains('ok') ? ':default' : '')));
  out.resolve_buttons = await page.locator('button[data-action="succeeded"], button[data-action="retry"]').count();
  await set('view', 'all');
  await settle(/\(13 matches/);
  const outcome = page.locator('#open article[data-kind="outcome"]');
  out.all_outcome = await outcome.count();
  out.outcome_buttons = await outcome.locator('button').count();
  out.outcome_note = await outcome.locator('.cannot').innerText();
  await set('view', 'mine');
  await set('size', '10');
  await settle(/\(12 matches/);
  await page.locator('#pageinfo').filter({ hasText: 'page 1 of 2' }).waitFor();
  out.page1 = await arts().count();
  await page.locator('#next').click();
  await page.locator('#pageinfo').filter({ hasText: 'page 2 of 2' }).waitFor();
  out.page2 = await arts().count();
  await set('object', prefix + '07');
  await settle(/\(1 match of/);
  out.one = await arts().first().locator('dl.card').innerText();
  await set('object', '');
  await set('sort', 'amount');
  await set('amount_min', '74000');
  await settle(/\(5 matches/);
  out.largest = await arts().first().locator('.amount').innerText();
  await set('amount_min', 'lots');
  await page.locator('#find-error').filter({ hasText: 'amount_min' }).waitFor();
  out.bad_amount = await page.locator('#find-error').innerText();
  return out;
}

// claimShared plays two operators: alice (this page) claims the question
// of wid; bob (a page on OTHER_CONSOLE_URL, another console) sees her
// claim; alice releases it and bob sees it free; she claims it again and
// bob approves anyway.
async function claimShared(page, wid, ctx) {
  const out = {};
  const a = question(page, wid, 'approval');
  await a.waitFor();
  await a.locator('.claim button.take').click();
  await a.locator('.claim .claimed').filter({ hasText: /^claimed by you/ }).waitFor();
  out.alice_claimed = await a.locator('.claim .claimed').innerText();

  const bobPage = await ctx.newPage();
  bobPage.setDefaultTimeout(TIMEOUT);
  bobPage.on('pageerror', (e) => { throw e; });
  await bobPage.goto(need('OTHER_CONSOLE_URL'));
  await bobPage.locator('body[data-loaded="true"]').waitFor();
  const b = question(bobPage, wid, 'approval');
  await b.waitFor();
  const bobClaim = b.locator('.claim .claimed');
  await bobClaim.filter({ hasText: /^claimed by alice since/ }).waitFor();
  out.bob_sees = await bobClaim.innerText();
  out.bob_take_visible = await b.locator('.claim button.take').isVisible();

  await a.locator('.claim button.give').click();
  await a.locator('.claim .claimed').filter({ hasText: /^not claimed$/ }).waitFor();
  await bobClaim.filter({ hasText: /^not claimed$/ }).waitFor(); // bob's page polls
  out.bob_free = await bobClaim.innerText();
  await a.locator('.claim button.take').click();
  await a.locator('.claim .claimed').filter({ hasText: /^claimed by you/ }).waitFor();
  await bobClaim.filter({ hasText: /^claimed by alice since/ }).waitFor();

  await b.locator('textarea[name="reason"]').fill(need('REASON'));
  await b.locator('button[data-action="approve"]').click();
  const ok = b.locator('.result.ok');
  const refused = b.locator('.result.error');
  await Promise.race([ok.waitFor(), refused.waitFor()]);
  if (await refused.count()) throw new Error('the console answered bob: ' + await refused.innerText());
  out.bob_result = await ok.innerText();
  await bobPage.close();
  return out;
}

// shownQuestions lists the open questions on the page: "workflow question".
async function shownQuestions(page) {
  return page.locator('#open article').evaluateAll((as) => as.map((a) => a.dataset.workflow + ' ' + a.dataset.question));
}

// deepLink opens LINK with the browser's old session (the console was
// restarted since), then the new console's link, and reports what it saw.
async function deepLink(page, url) {
  await page.goto(need('LINK'));
  await page.locator('#login:not([hidden])').waitFor();
  const refused = await page.locator('#login').innerText();
  await page.goto(url);
  await page.waitForURL(/\/q\//);
  await page.locator('#open article').first().waitFor();
  await page.locator('body[data-loaded="true"]').waitFor();
  return { refused, shown: await shownQuestions(page), url: page.url() };
}

// uiShot logs in at the codec server (so the UI decodes payloads) and takes
// the Temporal UI's page of the plan, with the card in its current details.
async function uiShot(ctx) {
  const page = await ctx.newPage();
  page.setDefaultTimeout(TIMEOUT);
  await page.setViewportSize({ width: 1280, height: 1080 });
  await page.goto(need('CODEC_LOGIN_URL'));
  await page.locator('input[name="token"]').fill(need('CODEC_TOKEN'));
  await Promise.all([page.waitForNavigation(), page.locator('button[type="submit"]').click()]);
  await page.goto(need('UI_PLAN_URL'));
  // The card is the plan's current details, under the User Metadata tab.
  await page.getByText('User Metadata', { exact: true }).first().click();
  // The UI renders the current details' markdown in a frame of its own.
  await page.frameLocator('#user-metadata-current-details').getByText(/Open question q\d+-step\d+-approval/).waitFor();
  await page.screenshot({ path: join(env.AGENTSAGA_SCREENSHOTS, 'ui-plan.png'), fullPage: false });
  await page.close();
}

main().catch((e) => {
  console.error(String(e && e.stack || e));
  process.exit(1);
});
