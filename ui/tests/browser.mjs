// The browser acceptance test of the shoal console: headless Chromium (Debian's
// /usr/bin/chromium) driven by playwright-core through the embedded UI of a
// running daemon. Each step asserts what a person would check, writes a
// screenshot, and a failure exits 1 with the step and the reason.
//
//   SHOAL_URL=http://127.0.0.1:8080 SHOAL_PASSWORD=... SHOAL_POOL=tank \
//   SHOT_DIR=/tmp/shots node tests/browser.mjs
//
// Protocol with the harness: after sharing POOL/ui the script prints
// "LOAD POOL/ui"; the harness then reads files in that share from 127.0.0.1 and
// 127.0.0.2, and the script waits until the daemon sees both clients. The last
// line is "DONE".
import { assert, required, startBrowser, StepFailure } from './harness.mjs';

const URL = required('SHOAL_URL').replace(/\/$/, '');
const PASSWORD = process.env.SHOAL_PASSWORD ?? '';
const POOL = required('SHOAL_POOL');
const SHOT_DIR = required('SHOT_DIR');
const FS = `${POOL}/ui`;
const SHARE_PATH = `/${FS}`;
const RULES = '*(rw,no_root_squash,insecure)';
const WORKSHEET = 'ui-acceptance';
const REPLICA = `${POOL}/ui-replica`;
const CLIENTS = ['127.0.0.1', '127.0.0.2'];

const { page, step, shot, until, run } = await startBrowser(SHOT_DIR);

/** An API call with the browser's session cookie. */
async function apiGet(path) {
  const res = await page.request.get(`${URL}${path}`);
  assert(res.ok(), `GET ${path}: ${res.status()} ${await res.text()}`);
  return res.json();
}

const chart = (dataset) => page.locator(`[data-test=chart][data-dataset="${dataset}"]`);
const legendKeys = (dataset) =>
  chart(dataset).locator('[data-test=legend-key]').evaluateAll((els) => els.map((e) => e.getAttribute('data-key')));

async function addStatistic(statistic, breakdown) {
  await page.click('[data-test=add-stat]');
  await page.selectOption('[data-test=add-stat-statistic]', statistic);
  await page.selectOption('[data-test=add-stat-breakdown]', breakdown);
  await page.click('[data-test=add-stat-submit]');
  await page.locator('[data-test=add-stat-dialog]').waitFor({ state: 'detached' });
}

await run(async () => {
  await step('login', async () => {
    await page.goto(URL);
    await page.locator('[data-test=login-form]').waitFor();
    await page.fill('[data-test=login-password]', `${PASSWORD}-wrong`);
    await page.click('[data-test=login-submit]');
    const error = page.locator('[data-test=login-error]');
    await error.waitFor({ state: 'visible' });
    assert((await error.textContent()).trim().length > 0, 'a wrong password shows no error');
    await shot('login-wrong-password');
    await page.fill('[data-test=login-password]', PASSWORD);
    await page.click('[data-test=login-submit]');
    await page.locator('[data-test=page-status]').waitFor();
    assert(!(await page.locator('[data-test=login-form]').isVisible()), 'the login form stays after a good password');
    const session = await apiGet('/api/v1/session');
    assert(session.authenticated, `the session is not authenticated: ${JSON.stringify(session)}`);
  });

  await step('filesystem', async () => {
    await page.click('[data-test=nav-filesystems]');
    await page.locator('[data-test=page-filesystems]').waitFor();
    await page.fill('[data-test=fs-name]', FS);
    await page.selectOption('[data-test=fs-compression]', 'lz4');
    await page.click('[data-test=fs-create]');
    const row = page.locator(`[data-test=fs-row][data-name="${FS}"]`);
    await row.waitFor();
    assert(!(await page.locator('[data-test=fs-create-error]').isVisible()), `create failed: ${await page.locator('[data-test=fs-create-error]').textContent()}`);
    assert((await row.textContent()).includes('lz4'), 'the new filesystem is not listed with compression lz4');
  });

  await step('share', async () => {
    await page.click('[data-test=nav-shares]');
    await page.locator('[data-test=page-shares]').waitFor();
    await page.locator(`[data-test=share-dataset] option[value="${FS}"]`).waitFor({ state: 'attached' });
    await page.selectOption('[data-test=share-dataset]', FS);
    await page.fill('[data-test=share-rules]', RULES);
    await page.click('[data-test=share-submit]');
    const row = page.locator(`[data-test=share-row][data-dataset="${FS}"]`);
    await row.waitFor();
    const rules = await row.locator('[data-test=share-rules-cell]').textContent();
    assert(rules.includes('no_root_squash') && rules.includes('insecure') && rules.startsWith('*('), `the share's rules are ${rules}`);
    assert((await row.textContent()).includes(SHARE_PATH), `the share is not exported at ${SHARE_PATH}`);
  });

  await step('load', async () => {
    // Record clients from now on, so there is something to wait for.
    const res = await page.request.post(`${URL}/api/v1/analytics/datasets`, { data: { name: 'nfs3.ops[client]' } });
    assert(res.ok(), `enabling nfs3.ops[client]: ${res.status()} ${await res.text()}`);
    process.stdout.write(`LOAD ${FS}\n`);
    let seen = [];
    await until(60, `NFS operations from ${CLIENTS.join(' and ')}`, async () => {
      const d = await apiGet(`/api/v1/analytics/data?name=${encodeURIComponent('nfs3.ops[client]')}&seconds=60`);
      seen = [...new Set(d.points.flatMap((p) => (p.breakdown ?? []).map((b) => b.key)))];
      return CLIENTS.every((c) => seen.includes(c));
    }).catch((e) => {
      throw new StepFailure(`${e.message}; clients seen: ${seen.join(', ') || 'none'}`);
    });
  });

  await step('ops-by-client', async () => {
    await page.click('[data-test=nav-analytics]');
    await page.locator('[data-test=page-analytics]').waitFor();
    await page.locator('[data-test=chart]').first().waitFor();
    await addStatistic('nfs3.ops', 'client');
    await chart('nfs3.ops[client]').waitFor();
    let keys = [];
    await until(30, 'both clients in the legend', async () => {
      keys = await legendKeys('nfs3.ops[client]');
      return CLIENTS.every((c) => keys.includes(c));
    }).catch((e) => {
      throw new StepFailure(`${e.message}; the legend lists ${keys.join(', ') || 'nothing'}`);
    });
  });

  const drilled = 'nfs3.ops[client=127.0.0.2][file]';
  await step('drill-by-file', async () => {
    await chart('nfs3.ops[client]').locator('[data-test=legend-key][data-key="127.0.0.2"]').click();
    await page.locator('[data-test=drill-menu]').waitFor();
    await page.click('[data-test=drill-menu] [data-test=drill-file]');
    await chart(drilled).waitFor();
    // The new dataset counts from the next second: wait for its first sealed seconds.
    const files = await until(45, `a file of ${SHARE_PATH} in the drill-down's legend`, async () => {
      const keys = await legendKeys(drilled);
      const f = keys.filter((k) => k.startsWith(`${SHARE_PATH}/`));
      return f.length ? f : false;
    });
    assert(files.length > 0, 'no file listed');
    const title = await chart(drilled).locator('.chip').textContent();
    assert(title.includes('127.0.0.2'), `the drill-down's filter reads ${title}`);
    await chart(drilled).scrollIntoViewIfNeeded();
  });

  await step('latency-heatmap', async () => {
    await addStatistic('nfs3.ops', 'latency');
    const heat = chart('nfs3.ops[latency]');
    await heat.waitFor();
    assert((await heat.getAttribute('data-kind')) === 'heatmap', 'nfs3.ops[latency] is not drawn as a heatmap');
    const cells = await until(30, 'heatmap cells', async () => Number((await heat.getAttribute('data-cells')) ?? 0) > 0);
    assert(cells, 'the heatmap has no cells');
    // And the canvas really has colour in it, not only axes and grid.
    const coloured = await heat.locator('canvas').evaluate((c) => {
      const ctx = c.getContext('2d');
      const { data } = ctx.getImageData(0, 0, c.width, c.height);
      let n = 0;
      for (let i = 0; i < data.length; i += 4) {
        const [r, g, b, a] = [data[i], data[i + 1], data[i + 2], data[i + 3]];
        if (a > 0 && r - b > 60) n++; // the heat ramp is warm; axes and grid are grey
      }
      return n;
    });
    assert(coloured > 0, 'the heatmap canvas has no coloured pixels');
    await heat.scrollIntoViewIfNeeded();
  });

  await step('range-select', async () => {
    const c = chart('nfs3.ops[client]');
    await c.scrollIntoViewIfNeeded();
    const over = c.locator('.u-over');
    const box = await over.boundingBox();
    assert(box && box.width > 100, 'the ops-by-client chart has no plot area');
    const y = box.y + box.height / 2;
    await page.mouse.move(box.x + box.width * 0.15, y);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.6, y, { steps: 8 });
    await page.mouse.move(box.x + box.width * 0.97, y, { steps: 8 });
    await page.mouse.up();
    const summary = c.locator('[data-test=range-summary]');
    await until(15, 'the range summary', async () => (await summary.getAttribute('data-state')) === 'ready');
    const value = async (t) => Number(await summary.locator(`[data-test=${t}]`).getAttribute('data-value'));
    const [avg, min, max] = [await value('range-avg'), await value('range-min'), await value('range-max')];
    assert(avg > 0, `the selected range's average is ${avg}`);
    assert(min <= avg && avg <= max, `average ${avg} is not between minimum ${min} and maximum ${max}`);
    assert(await summary.isVisible(), 'the range summary is not visible');
    console.log(`range: average ${avg}, minimum ${min}, maximum ${max} ops/s`);
  });

  await step('worksheet-saved', async () => {
    const expected = await page.locator('[data-test=chart]').evaluateAll((els) => els.map((e) => e.getAttribute('data-dataset')));
    await page.click('[data-test=worksheet-save]');
    await page.fill('[data-test=worksheet-name]', WORKSHEET);
    await page.click('[data-test=worksheet-save-submit]');
    const dialogError = page.locator('[data-test=save-dialog] [data-test=dialog-error]');
    await until(15, 'the worksheet to be saved', async () => {
      if (await dialogError.isVisible()) throw new StepFailure(`saving failed: ${await dialogError.textContent()}`);
      return page.url().endsWith(`#/analytics/${WORKSHEET}`);
    });
    await page.reload();
    await page.locator(`[data-test=worksheet-select] option[value="${WORKSHEET}"]`).waitFor({ state: 'attached' });
    await page.locator(`[data-test=chart][data-dataset="${drilled}"]`).waitFor();
    const shown = await page.locator('[data-test=chart]').evaluateAll((els) => els.map((e) => e.getAttribute('data-dataset')));
    assert(JSON.stringify(shown) === JSON.stringify(expected), `after a reload the worksheet shows ${shown.join(', ')}, not ${expected.join(', ')}`);
    const saved = await apiGet('/api/v1/analytics/worksheets');
    assert(saved.some((w) => w.name === WORKSHEET), `GET /analytics/worksheets does not list ${WORKSHEET}`);
  });

  await step('replication', async () => {
    await page.click('[data-test=nav-replication]');
    await page.locator('[data-test=page-replication]').waitFor();
    // The appliance replicates to itself: a credential made here, a target at its own address.
    await page.fill('[data-test=credential-name]', 'self');
    await page.click('[data-test=credential-create]');
    const token = (await page.locator('[data-test=credential-token]').textContent()).trim();
    assert(/^[0-9a-f]{64}$/.test(token), `the credential's token reads ${token}`);
    await page.click('[data-test=credential-done]');
    await page.fill('[data-test=target-name]', 'self');
    await page.fill('[data-test=target-address]', new globalThis.URL(URL).host);
    await page.fill('[data-test=target-credential]', token);
    await page.click('[data-test=target-add]');
    await page.locator('[data-test=target-row][data-name=self]').waitFor();
    await page.locator(`[data-test=repl-fs] option[value="${FS}"]`).waitFor({ state: 'attached' });
    await page.selectOption('[data-test=repl-fs]', FS);
    await page.selectOption('[data-test=repl-target]', 'self');
    await page.fill('[data-test=repl-remote]', REPLICA);
    await page.click('[data-test=repl-add]');
    const row = page.locator(`[data-test=repl-row][data-fs="${FS}"]`);
    await row.waitFor();
    await row.locator('[data-test=repl-run]').click();
    const state = row.locator('[data-test=repl-state]');
    await until(60, 'the replication run to succeed', async () => {
      const s = await state.getAttribute('data-state');
      if (s === 'failed') throw new StepFailure(`the run failed: ${await state.textContent()}`);
      return s === 'ok';
    });
    assert((await state.textContent()).includes('in full'), `the first run reads ${await state.textContent()}`);
    await page.locator(`[data-test=replica-row][data-name="${REPLICA}"]`).waitFor();
    const snaps = await apiGet(`/api/v1/snapshots?of=${encodeURIComponent(REPLICA)}`);
    assert(
      snaps.length === 1 && snaps[0].name.startsWith(`${REPLICA}@repl-`),
      `the replica holds ${snaps.map((s) => s.name).join(', ')}`,
    );
  });

  await step('replica-promoted', async () => {
    await page.locator(`[data-test=replica-row][data-name="${REPLICA}"] [data-test=replica-promote]`).click();
    await page.click('[data-test=confirm-dialog] [data-test=confirm]');
    await page.locator(`[data-test=replica-row][data-name="${REPLICA}"]`).waitFor({ state: 'detached' });
    const o = await apiGet('/api/v1/replication');
    assert(!(REPLICA in o.incoming), `${REPLICA} is still a replica: ${JSON.stringify(o.incoming)}`);
  });

  await step('alert-banner', async () => {
    // A target nobody answers at: the run fails, which is a warning alert.
    await page.fill('[data-test=target-name]', 'nowhere');
    await page.fill('[data-test=target-address]', '127.0.0.1:9');
    await page.fill('[data-test=target-credential]', 'not-a-token');
    await page.click('[data-test=target-add]');
    await page.locator('[data-test=target-row][data-name=nowhere]').waitFor();
    await page.selectOption('[data-test=repl-fs]', FS);
    await page.selectOption('[data-test=repl-target]', 'nowhere');
    await page.click('[data-test=repl-add]');
    const row = page.locator(`[data-test=repl-row][data-fs="${FS}"][data-target=nowhere]`);
    await row.waitFor();
    await row.locator('[data-test=repl-run]').click();
    await until(30, 'the run to fail', async () => (await row.locator('[data-test=repl-state]').getAttribute('data-state')) === 'failed');
    const banner = page.locator('[data-test=alert-banner]');
    await banner.waitFor({ state: 'visible', timeout: 15000 });
    assert((await banner.textContent()).includes('replication of'), `the banner reads ${await banner.textContent()}`);
    await banner.click();
    await page.locator('[data-test=page-alerts]').waitFor();
    const alertRow = page.locator('[data-test=alert-row][data-kind="replication.failed"]');
    await alertRow.first().waitFor();
    assert((await alertRow.first().getAttribute('data-severity')) === 'warning', 'the failed run is not a warning');
    await page.click('[data-test=alerts-ack-all]');
    await banner.waitFor({ state: 'hidden', timeout: 15000 });
    await until(10, 'the alert acknowledged', async () => (await alertRow.first().getAttribute('data-acknowledged')) === 'true');
  });

});
