// The console in a real browser: Debian's Chromium, headless, driven by playwright-core.
//   node console.test.mjs ONCELY_CLI
// Needs ONCELY_TEST_DATABASE_URL (a fresh schema of its own is made and dropped); without
// it exits 77 (skipped) unless ONCELY_REQUIRE_PG=1. ONCELY_UPDATE_SCREENSHOTS=1 writes
// the screenshots into docs/images/; otherwise they go to ONCELY_SCREENSHOT_DIR (ctest sets
// it in the build tree) or a temporary directory, never into the source tree.
//
// Cases: every page loads; the XSS dead letter renders as text and no dialog opens; a
// replay from the page completes the job (a worker runs) and a second one adds nothing,
// the dry run's count matching; a viewer sees no buttons and its POST gets 403; a form
// posting from another origin (another port) gets 403; no CSP violation anywhere; pages
// with 0, 1 and 100,000 dead letters; the database-unreachable page.

import { spawn, execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdirSync, writeFileSync, rmSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const here = dirname(fileURLToPath(import.meta.url));
// playwright-core from the node_modules that `npm ci` filled (tests/browser/setup.sh): the
// build tree's (ONCELY_NODE_MODULES) or one beside this file.
const modules = process.env.ONCELY_NODE_MODULES || join(here, 'node_modules');
const { chromium } = createRequire(join(modules, 'noop.js'))('playwright-core');
const cli = process.argv[2];
const url = process.env.ONCELY_TEST_DATABASE_URL;
if (!url) {
  console.error('ONCELY_TEST_DATABASE_URL not set');
  process.exit(process.env.ONCELY_REQUIRE_PG === '1' ? 1 : 77);
}
const schema = `oncely_browser_${process.pid}`;
const shots = process.env.ONCELY_UPDATE_SCREENSHOTS === '1' ? join(here, '..', '..', 'docs', 'images')
  : process.env.ONCELY_SCREENSHOT_DIR || mkdtempSync(join(tmpdir(), 'oncely-screenshots-'));
const OPERATOR_TOKEN = 'operator-token-0123456789';
const VIEWER_TOKEN = 'viewer-token-0123456789ab';
const XSS = '<img src=x onerror=alert(1)>';
const children = [];
const started = Date.now();

function sql(text) {
  return execFileSync('psql', [url, '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', '-c', text], { encoding: 'utf8' }).trim();
}

async function waitUntil(what, fn, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/// Starts `oncely web` and resolves with its base URL once it listens.
function startConsole(args, env = {}, database = url) {
  const child = spawn(cli, ['--database-url', database, '--schema', schema, 'web', '--addr', '127.0.0.1:0',
                            '--refresh', '1s', ...args],
                      { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let log = '';
  child.stderr.on('data', (d) => { log += d; });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[^\s]+)/);
      if (m) resolve({ base: m[1], child, log: () => log });
    });
    child.on('exit', (code) => reject(new Error(`oncely web exited ${code}: ${log}`)));
  });
}

function insertDeadLetters(n, error, queue = 'default', kind = 'noop', payload = '{"note": "hello"}') {
  // One statement, as many as asked; failed_at spread out so that the order is by time.
  sql(`INSERT INTO ${schema}.dead_letters (job_id, queue, kind, payload, priority, attempts, last_error, error_class,
                                           errors, created_at, failed_at)
       SELECT 1000000 + i, '${queue}', '${kind}', '${payload.replace(/'/g, "''")}'::jsonb, 0, 3,
              replace('${error.replace(/'/g, "''")}', '#', i::text), 'exhausted',
              jsonb_build_array(jsonb_build_object('attempt', 3, 'at', now(), 'error', '${error.replace(/'/g, "''")}', 'class', 'retryable')),
              now() - interval '1 hour', now() - i * interval '1 second'
         FROM generate_series(1, ${n}) AS i`);
}

async function main() {
  execFileSync(cli, ['--database-url', url, '--schema', schema, 'migrate'], { stdio: 'ignore' });
  sql(`CREATE TABLE ${schema}.done (note text)`);
  const env = { ONCELY_WEB_OPERATOR_TOKEN: OPERATOR_TOKEN, ONCELY_WEB_VIEWER_TOKEN: VIEWER_TOKEN };
  const consoleA = await startConsole([], env);
  const base = consoleA.base;

  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
  const violations = [];
  const dialogs = [];
  async function newPage() {
    const context = await browser.newContext({ viewport: { width: 1360, height: 900 } });
    const page = await context.newPage();
    await page.addInitScript(() => {
      document.addEventListener('securitypolicyviolation', (e) => {
        console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`);
      });
    });
    page.on('console', (m) => {
      if (m.type() === 'error' && !/status of 40[39]|status of 503/.test(m.text())) violations.push(`${page.url()}: ${m.text()}`);
    });
    page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss(); });
    return page;
  }
  async function login(page, token) {
    const r = await page.goto(`${base}/`);
    assert.match(page.url(), /\/login$/, 'an anonymous visit goes to the login page');
    await page.fill('input[name=token]', token);
    await Promise.all([page.waitForNavigation(), page.click('form.login button')]);
    assert.equal(new URL(page.url()).pathname, '/');
    return r;
  }
  async function visit(page, path, status = 200) {
    const r = await page.goto(`${base}${path}`);
    assert.equal(r.status(), status, `${path}: status`);
    const h = r.headers();
    assert.match(h['content-security-policy'], /script-src 'nonce-[0-9a-f]+'/, `${path}: CSP`);
    assert.doesNotMatch(h['content-security-policy'], /unsafe-inline/);
    assert.match(h['content-security-policy'], /frame-ancestors 'none'/);
    assert.equal(h['cache-control'], 'no-store');
    assert.equal(h['x-content-type-options'], 'nosniff');
    return r;
  }

  const op = await newPage();
  await login(op, OPERATOR_TOKEN);

  // ---- 0 dead letters ----
  await visit(op, '/dead-letters');
  assert.match(await op.textContent('main'), /no dead letters/);

  // ---- 1 dead letter: hostile text as error and in the payload ----
  insertDeadLetters(1, XSS, 'default', 'noop', JSON.stringify({ note: XSS }));
  const xssId = sql(`SELECT id FROM ${schema}.dead_letters`);
  await visit(op, '/dead-letters');
  assert.equal(await op.locator('main img').count(), 0, 'no element made of the error text');
  assert.equal((await op.locator('section[data-live=list] td.error-text').first().textContent()), XSS);
  await visit(op, `/dead-letters/${xssId}`);
  assert.equal(await op.textContent('#last-error'), XSS);
  assert.match(await op.textContent('#payload'), /<img src=x onerror=alert\(1\)>/);
  assert.equal(await op.locator('main img').count(), 0);

  // ---- replay from the page; a worker completes the job ----
  const workerConfig = join(mkdtempSync(join(tmpdir(), 'oncely-browser-')), 'worker.json');
  writeFileSync(workerConfig, JSON.stringify({
    queues: { default: { concurrency: 1, poll_interval: '100ms' } },
    handlers: { noop: { type: 'sql', statement: `INSERT INTO ${schema}.done (note) VALUES ($1)`, params: ['/note'] } },
  }));
  const worker = spawn(cli, ['--database-url', url, '--schema', schema, 'worker', '--config', workerConfig],
                       { stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(worker);
  await Promise.all([op.waitForNavigation(), op.click('a.button:text("Replay…")')]);
  const shown = Number(await op.getAttribute('.dry-run strong', 'data-count'));
  assert.equal(shown, 1, 'the dry run counts the one dead letter');
  const confirmUrl = op.url();
  await Promise.all([op.waitForNavigation(), op.click('button[data-action=confirm]')]);
  assert.equal(Number(await op.getAttribute('.result', 'data-replayed')), shown, 'replayed what the dry run counted');
  await waitUntil('the replayed job to complete', () => sql(`SELECT count(*) FROM ${schema}.done`) === '1' &&
                                                         sql(`SELECT count(*) FROM ${schema}.jobs`) === '0');
  assert.equal(sql(`SELECT note FROM ${schema}.done`), XSS);
  // A second replay adds nothing: the dry run says 0 and offers no button...
  await op.goto(confirmUrl);
  assert.equal(Number(await op.getAttribute('.dry-run strong', 'data-count')), 0);
  assert.equal(await op.locator('button[data-action=confirm]').count(), 0);
  // ...and the first confirmation posted again (the browser's back and resubmit) changes nothing.
  const again = await op.evaluate(async () => {
    const csrf = document.querySelector('input[name=csrf]').value;
    const id = new URL(window.location.href).searchParams.get('id');
    const r = await fetch('/dead-letters/replay', {
      method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      body: `csrf=${csrf}&id=${id}&expected=1` });
    return { status: r.status, text: await r.text() };
  });
  assert.equal(again.status, 409);
  assert.match(again.text, /You were shown 1, the selection now holds 0\. Nothing was replayed/);
  assert.equal(sql(`SELECT count(*) FROM ${schema}.jobs`), '0');
  assert.equal(sql(`SELECT count(*) FROM ${schema}.done`), '1');
  assert.match(consoleA.log(), /console action who=operator role=operator action=replay count=1/);

  // ---- every page, with some data: screenshots ----
  insertDeadLetters(40, 'connection to payments.internal:# refused', 'payments', 'charge');
  insertDeadLetters(12, 'HTTP 503 from https://crm.internal/hooks/#', 'default', 'notify_crm');
  insertDeadLetters(3, 'permission denied for table ledger_#', 'payments', 'settle');
  sql(`INSERT INTO ${schema}.job_stats (slot_id, minute, queue, completed, retried, dead_lettered, deduplicated)
       SELECT -1, date_trunc('minute', now()) - m * interval '1 minute', q,
              (40 + 30 * sin(m / 9.0))::int, (m % 7)::int, (m % 23 = 0)::int * 3, (m % 11)::int
         FROM generate_series(0, 1439) AS m, unnest(ARRAY['default', 'payments']) AS q`);
  execFileSync(cli, ['--database-url', url, '--schema', schema, 'enqueue', 'charge', '{"account": 7}',
                     '--queue', 'payments', '--run-at', '2099-01-01T00:00:00Z'], { stdio: 'ignore' });
  const jobId = sql(`SELECT id FROM ${schema}.jobs`);
  // A batch under way: 40 exports, 25 of them completed, 2 dead, its report still to come.
  const batchId = sql(`SELECT ${schema}.open_batch(on_success => '{"kind": "mail_report", "payload": {"to": "ops@example.com"}}',
                                                    on_failure => '{"kind": "page_oncall"}')`);
  sql(`INSERT INTO ${schema}.jobs (kind, payload, batch_id, run_at)
       SELECT 'export_customer', jsonb_build_object('customer', c), ${batchId}, '2099-01-01' FROM generate_series(1, 40) c`);
  sql(`SELECT ${schema}.close_batch(${batchId})`);
  sql(`WITH gone AS (DELETE FROM ${schema}.jobs WHERE batch_id = ${batchId} AND (payload->>'customer')::int <= 25 RETURNING id)
       SELECT ${schema}.settle_dependents(array_agg(id), 'completed') FROM gone`);
  sql(`SELECT ${schema}.dead_letter_job(id, 1, 'export failed', 'permanent', 'permanent') FROM ${schema}.jobs
        WHERE batch_id = ${batchId} AND (payload->>'customer')::int IN (26, 27)`);
  for (const path of ['/', '/dead-letters', `/dead-letters/${xssId}`, '/dead-letters?pattern=connection%20to%20payments.internal%3A%23%20refused',
                      `/dead-letters/confirm?action=purge&queue=payments`, '/jobs', `/jobs/${jobId}`,
                      '/jobs?state=scheduled', '/queues', '/workers', '/batches', `/batches/${batchId}`,
                      `/jobs?batch=${batchId}`, '/cron']) {
    await visit(op, path);
  }
  assert.match(await op.textContent('main'), /no cron entries/);
  await visit(op, '/batches');
  assert.match(await op.textContent('section[data-live=batches]'), /27\/40/);
  mkdirSync(shots, { recursive: true });
  await op.screenshot({ path: join(shots, 'console-batches.png'), fullPage: true });
  await visit(op, `/batches/${batchId}`);
  assert.match(await op.textContent('main'), /mail_report/);
  await visit(op, '/workers');
  await waitUntil('the worker on the workers page', async () => {
    await op.reload();
    return /default/.test(await op.textContent('section[data-live=workers]'));
  });
  mkdirSync(shots, { recursive: true });
  await visit(op, '/');
  await op.screenshot({ path: join(shots, 'console-overview.png'), fullPage: true });
  await visit(op, '/dead-letters');
  await op.screenshot({ path: join(shots, 'console-dead-letters.png'), fullPage: true });
  const example = sql(`SELECT max(id) FROM ${schema}.dead_letters WHERE kind = 'charge'`);
  await visit(op, `/dead-letters/${example}`);
  await op.screenshot({ path: join(shots, 'console-dead-letter.png'), fullPage: true });

  // Pause and resume from the page.
  await visit(op, '/queues');
  await op.fill('#pause-by-name input[name=queue]', 'payments');
  await op.fill('#pause-by-name input[name=reason]', 'deploy <b>bold</b>');
  await Promise.all([op.waitForNavigation(), op.click('#pause-by-name button')]);
  assert.equal(sql(`SELECT count(*) FROM ${schema}.queue_pauses WHERE queue = 'payments'`), '1');
  await visit(op, '/queues');
  await Promise.all([op.waitForNavigation(), op.click('form[action="/queues/resume"] button')]);
  assert.equal(sql(`SELECT count(*) FROM ${schema}.queue_pauses`), '0');
  // Cancel the scheduled job from its page.
  await visit(op, `/jobs/${jobId}`);
  await Promise.all([op.waitForNavigation(), op.click('button[data-action=confirm]')]);
  assert.equal(Number(await op.getAttribute('.result', 'data-cancelled')), 1);
  assert.equal(sql(`SELECT error_class FROM ${schema}.dead_letters WHERE job_id = ${jobId}`), 'cancelled');

  // Live refresh: a new dead letter shows without a reload.
  await visit(op, '/');
  const before = await op.textContent('section[data-live=queues]');
  insertDeadLetters(1, 'late arrival', 'default');
  await waitUntil('the overview to refresh itself', async () =>
    (await op.textContent('section[data-live=queues]')) !== before, 10000);

  // ---- a viewer: no buttons, no payloads, its POST refused ----
  const viewer = await newPage();
  const viewerBase = base;
  await viewer.goto(`${viewerBase}/login`);
  await viewer.fill('input[name=token]', VIEWER_TOKEN);
  await Promise.all([viewer.waitForNavigation(), viewer.click('form.login button')]);
  for (const path of ['/', '/dead-letters', `/dead-letters/${example}`, '/jobs', '/queues', '/workers', '/cron', '/batches', `/batches/${batchId}`,
                      `/dead-letters/confirm?action=replay&queue=payments`]) {
    await viewer.goto(`${viewerBase}${path}`);
    assert.equal(await viewer.locator('main form[method=post], main a.button, main input[type=checkbox][name=id], main button[data-action], main button[name=action]').count(), 0,
                 `${path}: a viewer sees no button`);
  }
  await viewer.goto(`${viewerBase}/dead-letters/${example}`);
  assert.match(await viewer.textContent('#payload'), /payload hidden/);
  await viewer.goto(`${viewerBase}/batches/${batchId}`);
  assert.doesNotMatch(await viewer.textContent('main'), /ops@example\.com/);  // a callback's payload
  const viewerPost = await viewer.evaluate(async () => {
    const csrf = document.querySelector('input[name=csrf]').value;  // its own, valid token (the logout form's)
    const r = await fetch('/queues/pause', {
      method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      body: `csrf=${csrf}&queue=payments` });
    return r.status;
  });
  assert.equal(viewerPost, 403);
  assert.equal(sql(`SELECT count(*) FROM ${schema}.queue_pauses`), '0');

  // ---- a form posting from another origin (another port of this host): same-site, not same-origin ----
  const csrf = await op.evaluate(() => document.querySelector('input[name=csrf]').value);
  const evil = createServer((req, res) => {
    res.setHeader('Content-Type', 'text/html');
    res.end(`<form id=f method=post action="${base}/queues/pause"><input name=csrf value="${csrf}">` +
            `<input name=queue value=payments></form><script>document.getElementById('f').submit()</script>`);
  });
  await new Promise((r) => evil.listen(0, '127.0.0.1', r));
  const [posted] = await Promise.all([
    op.waitForResponse((r) => r.url() === `${base}/queues/pause`),
    op.goto(`http://127.0.0.1:${evil.address().port}/`),
  ]);
  assert.equal(posted.status(), 403, 'a cross-origin form is refused even with the right token');
  assert.equal(sql(`SELECT count(*) FROM ${schema}.queue_pauses`), '0');
  evil.close();
  // A same-origin POST without the session's CSRF token is refused too.
  await visit(op, '/queues');
  const noToken = await op.evaluate(async () => (await fetch('/queues/pause', {
    method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: 'queue=payments' })).status);
  assert.equal(noToken, 403);
  assert.equal(sql(`SELECT count(*) FROM ${schema}.queue_pauses`), '0');

  // ---- 100,000 dead letters ----
  insertDeadLetters(100000, 'timeout after # ms talking to upstream', 'bulk', 'sync');
  const t0 = Date.now();
  await visit(op, '/dead-letters');
  const took = Date.now() - t0;
  assert.match(await op.textContent('section[data-live=groups]'), /100000/);
  await Promise.all([op.waitForNavigation(), op.click('a[rel=next]')]);
  assert.equal(await op.locator('section[data-live=list] tbody tr').count(), 50);
  await visit(op, '/dead-letters/confirm?action=replay&queue=bulk');
  assert.equal(Number(await op.getAttribute('.dry-run strong', 'data-count')), 100000);
  await visit(op, '/');
  console.log(`dead-letter page with 100,000: ${took} ms`);

  // ---- the database unreachable ----
  const down = await startConsole([], {}, 'postgresql://postgres@127.0.0.1:1/postgres?connect_timeout=2');
  const downPage = await newPage();
  const r = await downPage.goto(`${down.base}/`);
  assert.equal(r.status(), 503);
  const text = await downPage.textContent('main');
  assert.match(text, /Database unavailable/);
  assert.doesNotMatch(text, /postgresql:|127\.0\.0\.1:1|terminate|exception|#0 /);

  assert.deepEqual(dialogs, [], 'no dialog opened');
  assert.deepEqual(violations, [], 'no CSP violation or console error');
  await browser.close();
  console.log(`browser tests passed in ${((Date.now() - started) / 1000).toFixed(1)} s; screenshots in ${shots}`);
}

let failed = false;
try {
  await main();
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  for (const c of children) c.kill('SIGTERM');
  try { sql(`SET client_min_messages = warning; DROP SCHEMA IF EXISTS ${schema} CASCADE`); } catch (e) { console.error(e.message); }
}
process.exit(failed ? 1 : 0);
