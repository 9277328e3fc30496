// The browser acceptance test of the shoal console: headless Chromium (Debian's
// /usr/bin/chromium) driven by playwright-core through the embedded UI of a
// running daemon. Each step asserts what a person would check, writes a
// screenshot, and a failure exits 1 with the step and the reason.
//
//   SHOAL_URL=http://127.0.0.1:8080 SHOAL_PASSWORD=... SHOAL_POOL=tank \
//   SHOT_DIR=/tmp/shots node tests/browser.mjs
//
// Protocol with the harness: after making a volume and an iSCSI target in the
// iSCSI page the script prints "ISCSI URL INITIATOR"; the harness then asks that
// LUN with libiscsi's iscsi-inq as INITIATOR, over and over until the end, and the
// script waits until Analytics counts its commands. After sharing POOL/ui it prints
// "LOAD POOL/ui"; the harness then writes and reads files in that share from
// 127.0.0.1 and 127.0.0.2, and the script waits until the daemon sees both
// clients. The last line is "DONE".
//
// In Analytics it checks the default worksheet under that load, adds NFS
// operations by client and drills into one client by file, adds the latency
// heatmap and drills into its busiest band by file, selects a range, zooms the
// worksheet to it and goes back to Live, and saves the worksheet. On the
// Snapshots page it finds the promoted replica's held base, holds and releases a
// snapshot, and rolls back past two newer ones (refused while one is held). On the
// Filesystems page it adds a daily schedule of the pool's root, sees its first
// snapshot and next run, runs it once more and removes it.
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
const VOLUME = `${POOL}/ui-vol`;
const TARGET = 'iqn.2026-12.org.shoal:ui';
/** The name the harness's initiator (libiscsi's iscsi-inq) logs in with. */
const INITIATOR = 'iqn.2026-12.org.shoal:ui-host';
/** The unsaved worksheet's charts, in order (DEFAULT_DATASETS in src/analytics/worksheet.ts). */
const DEFAULTS = ['nfs3.ops[op]', 'nfs4.ops[op]', 'iscsi.ops[op]', 'cpu.utilization[mode]', 'io.ops[device]', 'net.interface.bytes[direction]', 'io.bytes[op]'];
/** Those the NFSv3 load and the iSCSI initiator must move (nfs4.ops stays idle; io.bytes may, with everything cached). */
const BUSY_DEFAULTS = ['nfs3.ops[op]', 'iscsi.ops[op]', 'cpu.utilization[mode]', 'io.ops[device]', 'net.interface.bytes[direction]'];

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

const dataUrl = (name, q) => `/api/v1/analytics/data?name=${encodeURIComponent(name)}&${q}`;
const shownDatasets = () => page.locator('[data-test=chart]').evaluateAll((els) => els.map((e) => e.getAttribute('data-dataset')));

/** Values the legend of `dataset` shows (what a person reads beside the chart). */
const legendValues = (dataset) =>
  chart(dataset)
    .locator('[data-test=legend-key] .legend-value')
    .evaluateAll((els) => els.map((e) => Number(e.getAttribute('data-value') || 0)));

/** Drags across the middle of a chart's plot, from 15 % to 97 % of its width. */
async function selectRange(dataset) {
  const c = chart(dataset);
  await c.scrollIntoViewIfNeeded();
  const box = await c.locator('.u-over').boundingBox();
  assert(box && box.width > 100, `the ${dataset} chart has no plot area`);
  const y = box.y + box.height / 2;
  await page.mouse.move(box.x + box.width * 0.15, y);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.6, y, { steps: 8 });
  await page.mouse.move(box.x + box.width * 0.97, y, { steps: 8 });
  await page.mouse.up();
  const summary = c.locator('[data-test=range-summary]');
  await until(15, `the range summary of ${dataset}`, async () => (await summary.getAttribute('data-state')) === 'ready');
  return summary;
}

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

  await step('iscsi', async () => {
    await page.click('[data-test=nav-iscsi]');
    await page.locator('[data-test=page-iscsi]').waitFor();
    // A bad size is refused with the daemon's reason, and nothing is made.
    await page.fill('[data-test=volume-name]', VOLUME);
    await page.fill('[data-test=volume-size]', 'lots');
    await page.click('[data-test=volume-create]');
    const volErr = page.locator('[data-test=volume-error]');
    await volErr.waitFor({ state: 'visible' });
    assert((await volErr.textContent()).includes('lots'), `a bad size says ${await volErr.textContent()}`);
    await page.fill('[data-test=volume-size]', '32M');
    await page.click('[data-test=volume-create]');
    const vrow = page.locator(`[data-test=volume-row][data-name="${VOLUME}"]`);
    await vrow.waitFor();
    assert((await vrow.textContent()).includes('32M') && (await vrow.textContent()).includes('thick'), `the volume row reads ${await vrow.textContent()}`);
    await page.locator(`[data-test=target-luns] option[value="${VOLUME}"]`).waitFor({ state: 'attached' });
    await page.fill('[data-test=target-name]', TARGET);
    await page.selectOption('[data-test=target-luns]', [VOLUME]);
    await page.fill('[data-test=target-allow]', INITIATOR);
    await page.click('[data-test=target-create]');
    const trow = page.locator(`[data-test=target-row][data-name="${TARGET}"]`);
    await trow.waitFor();
    assert((await trow.locator('[data-test=target-lun][data-lun="0"]').textContent()).includes(VOLUME), 'LUN 0 is not the volume');
    const portal = (await trow.locator('[data-test=target-portal]').first().textContent()).trim().split(',')[0];
    assert(/^127\.0\.0\.1:\d+$/.test(portal), `the target's portal reads ${portal}`);
    await until(10, 'the volume to show its target', async () =>
      (await page.locator(`[data-test=volume-row][data-name="${VOLUME}"] [data-test=volume-target]`).count()) === 1,
    );
    // An exported volume cannot be destroyed: the dialog says why and it stays.
    await page.locator(`[data-test=volume-row][data-name="${VOLUME}"] [data-test=volume-destroy]`).click();
    await page.click('[data-test=confirm]');
    const refusal = page.locator('[data-test=dialog-error]');
    await refusal.waitFor({ state: 'visible' });
    assert((await refusal.textContent()).includes(TARGET), `destroying an exported volume says ${await refusal.textContent()}`);
    await page.click('[data-test=cancel]');
    // A real initiator uses the target; its commands show in Analytics by initiator.
    const res = await page.request.post(`${URL}/api/v1/analytics/datasets`, { data: { name: 'iscsi.ops[initiator]' } });
    assert(res.ok(), `enabling iscsi.ops[initiator]: ${res.status()} ${await res.text()}`);
    process.stdout.write(`ISCSI iscsi://${portal}/${TARGET}/0 ${INITIATOR}\n`);
    await until(60, `iSCSI commands from ${INITIATOR}`, async () => {
      const d = await apiGet(`/api/v1/analytics/data?name=${encodeURIComponent('iscsi.ops[initiator]')}&seconds=60`);
      return d.points.some((p) => (p.breakdown ?? []).some((b) => b.key === INITIATOR));
    });
  });

  await step('load', async () => {
    // Record clients from now on, so there is something to wait for; and the
    // default worksheet's datasets, so the writes that start the load are on them.
    for (const name of ['nfs3.ops[client]', ...DEFAULTS]) {
      const res = await page.request.post(`${URL}/api/v1/analytics/datasets`, { data: { name } });
      assert(res.ok(), `enabling ${name}: ${res.status()} ${await res.text()}`);
    }
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

  await step('default-worksheet', async () => {
    await page.click('[data-test=nav-analytics]');
    await page.locator('[data-test=page-analytics]').waitFor();
    await chart(DEFAULTS[DEFAULTS.length - 1]).waitFor();
    const shown = await shownDatasets();
    assert(JSON.stringify(shown) === JSON.stringify(DEFAULTS), `the unsaved worksheet shows ${shown.join(', ')}, not ${DEFAULTS.join(', ')}`);
    for (const name of BUSY_DEFAULTS) {
      // The legend averages the last minute; device writes may be older, so the API is asked about the last ten.
      let why = '';
      await until(45, `${name} to show activity`, async () => {
        const values = await legendValues(name);
        if (values.some((v) => v > 0)) return true;
        const d = await apiGet(dataUrl(name, 'seconds=600'));
        why = `legend ${JSON.stringify(values)}, ${d.points.length} points, total ${d.summary.total}`;
        return d.summary.total > 0;
      }).catch((e) => {
        throw new StepFailure(`${e.message}; ${why}`);
      });
    }
    const modes = await legendKeys('cpu.utilization[mode]');
    assert(modes.some((m) => ['user', 'kernel', 'idle', 'iowait', 'steal'].includes(m)), `cpu.utilization[mode] lists ${modes.join(', ')}`);
    // Network bytes right above disk bytes, on the same time axis.
    const axes = await Promise.all(['net.interface.bytes[direction]', 'io.bytes[op]'].map(async (n) => [await chart(n).getAttribute('data-x-start'), await chart(n).getAttribute('data-x-end')].join('-')));
    assert(axes[0] === axes[1], `network bytes are drawn over ${axes[0]}, disk bytes over ${axes[1]}`);
    // Counts and CPU are stacked, other gauges not; a chart switches to lines and back.
    for (const n of ['nfs3.ops[op]', 'cpu.utilization[mode]', 'io.ops[device]']) {
      assert((await chart(n).getAttribute('data-stacked')) === 'true', `${n} is not stacked by default`);
    }
    const toggle = chart('net.interface.bytes[direction]').locator('[data-test=card-stacked]');
    await toggle.click();
    assert((await chart('net.interface.bytes[direction]').getAttribute('data-stacked')) === 'false', 'the stacked toggle does not switch to lines');
    await toggle.click();
    // Moving a chart changes the worksheet's order; moving it back restores it.
    await chart('io.bytes[op]').locator('[data-test=card-up]').click();
    const moved = await shownDatasets();
    assert(moved.indexOf('io.bytes[op]') === DEFAULTS.length - 2, `after moving io.bytes[op] up the order is ${moved.join(', ')}`);
    assert(await chart('io.bytes[op]').locator('[data-test=card-down]').isEnabled(), 'the moved chart cannot move down again');
    await chart('io.bytes[op]').locator('[data-test=card-down]').click();
    assert(JSON.stringify(await shownDatasets()) === JSON.stringify(DEFAULTS), `moving back gives ${(await shownDatasets()).join(', ')}`);
    assert(await chart('io.bytes[op]').locator('[data-test=card-down]').isDisabled(), 'the last chart can move down');
    // A gauge's range statistics are averages, never a total (over a few seconds of readings).
    await until(30, 'five seconds of CPU readings', async () => Number(await chart('cpu.utilization[mode]').getAttribute('data-points')) >= 5);
    const summary = await selectRange('cpu.utilization[mode]');
    const avg = Number(await summary.locator('[data-test=range-avg]').getAttribute('data-value'));
    assert(avg > 0, `the CPU's average over the selected range is ${avg}`);
    assert((await summary.locator('[data-test=range-total]').count()) === 0, 'a total of CPU utilisation is shown');
    await summary.locator('[data-test=range-clear]').click();
    await chart(DEFAULTS[0]).scrollIntoViewIfNeeded();
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

  await step('heatmap-drill', async () => {
    const heat = chart('nfs3.ops[latency]');
    const menu = heat.locator('[data-test=heatmap-band-menu]');
    let target = null;
    for (let attempt = 1; ; attempt++) {
      // The row with the most operations over the window, where the heatmap draws it.
      const rows = JSON.parse((await heat.getAttribute('data-rows')) || '[]');
      target = rows.reduce((a, r) => (!a || r.count > a.count ? r : a), null);
      assert(target, 'the heatmap lists no rows');
      const d = await apiGet(dataUrl('nfs3.ops[latency]', 'seconds=60'));
      const buckets = d.points.flatMap((p) => p.buckets ?? []);
      assert(
        buckets.some((b) => b.low === target.low && b.high === target.high),
        `the API has no bucket ${target.low}..${target.high}: ${JSON.stringify([...new Set(buckets.map((b) => `${b.low}..${b.high}`))])}`,
      );
      await heat.locator('.u-over').click({ position: { x: 200, y: (target.top + target.bottom) / 2 } });
      await menu.waitFor({ state: 'visible' });
      const [low, high] = [Number(await menu.getAttribute('data-low')), Number(await menu.getAttribute('data-high'))];
      if (low === target.low && high === target.high) break;
      // The axis moved between reading the rows and the click: read them again.
      assert(attempt < 3, `clicking the row ${target.low}..${target.high} selected ${low}..${high}`);
    }
    assert((await menu.locator('[data-test=band-title]').textContent()).startsWith('Drill down:'), 'the band menu has no title');
    assert((await menu.locator('[data-test=band-zoom]').count()) === 1, 'the band menu offers no zoom');
    assert((await heat.getAttribute('data-band-low')) === String(target.low), 'the selected band is not marked on the heatmap');
    await menu.locator('[data-test=band-drill][data-dim=file]').click();
    const banded = `nfs3.ops[latency=${target.low}..${target.high}][file]`;
    await chart(banded).waitFor();
    const files = await until(45, `a file of ${SHARE_PATH} in the legend of ${banded}`, async () => {
      const f = (await legendKeys(banded)).filter((k) => k.startsWith(`${SHARE_PATH}/`));
      return f.length ? f : false;
    });
    console.log(`band ${target.low}..${target.high}: ${files.join(', ')}`);
    // The band's operations are some of all NFSv3 operations over the same seconds.
    const since = (await apiGet(dataUrl(banded, 'seconds=60'))).since;
    const end = (await apiGet('/api/v1/analytics/status')).sealed_upto;
    assert(end >= since, `the band's dataset counts from ${since}, the newest second is ${end}`);
    const window = `start=${since}&end=${end}`;
    const part = (await apiGet(dataUrl(banded, window))).summary.total;
    const all = (await apiGet(dataUrl('nfs3.ops', window))).summary.total;
    assert(part > 0, `${banded} counted nothing over ${window}`);
    assert(part <= all, `${banded} counted ${part} operations over ${window}, more than all of nfs3.ops (${all})`);
    await chart(banded).scrollIntoViewIfNeeded();
  });

  await step('range-select', async () => {
    const summary = await selectRange('nfs3.ops[client]');
    const value = async (t) => Number(await summary.locator(`[data-test=${t}]`).getAttribute('data-value'));
    const [avg, min, max] = [await value('range-avg'), await value('range-min'), await value('range-max')];
    assert(avg > 0, `the selected range's average is ${avg}`);
    assert(min <= avg && avg <= max, `average ${avg} is not between minimum ${min} and maximum ${max}`);
    assert(await summary.isVisible(), 'the range summary is not visible');
    console.log(`range: average ${avg}, minimum ${min}, maximum ${max} ops/s`);
  });

  await step('zoom', async () => {
    const summary = chart('nfs3.ops[client]').locator('[data-test=range-summary]');
    if ((await summary.getAttribute('data-state')) !== 'ready' || !(await summary.isVisible())) await selectRange('nfs3.ops[client]');
    const [t0, t1] = [Number(await summary.getAttribute('data-start')), Number(await summary.getAttribute('data-end'))];
    await summary.locator('[data-test=range-zoom]').click();
    const controls = page.locator('[data-test=time-controls]');
    const attr = async (n) => controls.getAttribute(n);
    await until(10, `the window to become ${t0}..${t1}`, async () => {
      const [start, end, live] = [Number(await attr('data-start')), Number(await attr('data-end')), await attr('data-live')];
      return live === 'false' && Math.abs(start - t0) <= 2 && Math.abs(end - t1) <= 2;
    });
    const [start, end] = [Number(await attr('data-start')), Number(await attr('data-end'))];
    assert(await page.locator('[data-test=zoom-out]').isVisible(), 'there is no way to zoom out');
    // Every chart redraws over exactly that window, with points only inside it.
    let off = [];
    await until(20, 'every chart drawn over the zoomed window', async () => {
      const drawn = await page.locator('[data-test=chart]').evaluateAll((els) => els.map((e) => ({ ...e.dataset })));
      off = drawn.filter((d) => Number(d.xStart) !== start || Number(d.xEnd) !== end).map((d) => `${d.dataset} ${d.xStart}..${d.xEnd}`);
      if (off.length) return false;
      const outside = drawn.filter((d) => d.first && (Number(d.first) < start || Number(d.last) > end));
      assert(outside.length === 0, `points outside ${start}..${end}: ${outside.map((d) => `${d.dataset} ${d.first}..${d.last}`).join(', ')}`);
      return true;
    }).catch((e) => {
      throw e instanceof StepFailure && off.length ? new StepFailure(`${e.message}; still on another window: ${off.join(', ')}`) : e;
    });
    assert(Number(await chart('nfs3.ops[client]').getAttribute('data-points')) > 0, 'the zoomed ops-by-client chart has no points');
    // Paused: the window stays put while time passes.
    await page.waitForTimeout(2500);
    assert(Number(await attr('data-start')) === start && Number(await attr('data-end')) === end, 'the zoomed window moved');
    await shot('zoomed');
    await page.click('[data-test=time-live]');
    await until(10, 'the window to follow the newest data again', async () => (await attr('data-live')) === 'true' && (await attr('data-span')) === '60');
    assert(!(await page.locator('[data-test=zoom-out]').isVisible()), 'zoom out is still offered after going back to Live');
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
    // The page refreshes every 2 s; its selects must not be rebuilt when nothing changed
    // (a rebuilt select closes under the user's pointer). Mark their option elements,
    // let two refreshes pass, and find the same elements, still chosen.
    await page.evaluate(() => {
      for (const t of ['repl-fs', 'repl-target']) {
        for (const o of document.querySelector(`[data-test=${t}]`).options) o.shoalMark = true;
      }
    });
    for (let i = 0; i < 2; i++) {
      await page.waitForResponse((r) => new globalThis.URL(r.url()).pathname === '/api/v1/replication', { timeout: 15000 });
    }
    await page.locator('[data-test=target-row][data-name=self]').waitFor();
    const kept = await page.evaluate(() =>
      ['repl-fs', 'repl-target'].map((t) => {
        const sel = document.querySelector(`[data-test=${t}]`);
        return { t, value: sel.value, marked: Array.from(sel.options).every((o) => o.shoalMark === true) };
      }),
    );
    for (const k of kept) assert(k.marked, `the ${k.t} select was rebuilt by a refresh that changed nothing`);
    assert(kept[0].value === FS && kept[1].value === 'self', `after refreshes the selects read ${kept[0].value}, ${kept[1].value}`);
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

  await step('snapshots', async () => {
    // The promoted replica: its replication base keeps the replica's hold.
    await page.click('[data-test=nav-snapshots]');
    await page.locator('[data-test=page-snapshots]').waitFor();
    const rows = () => page.locator('[data-test=snap-row]').evaluateAll((els) => els.map((e) => e.getAttribute('data-name')));
    // The table loads after the page shows.
    let base;
    await until(15, `a replication snapshot of ${REPLICA} listed`, async () => {
      base = (await rows()).find((n) => n.startsWith(`${REPLICA}@repl-`));
      return Boolean(base);
    });
    const baseRow = page.locator(`[data-test=snap-row][data-name="${base}"]`);
    assert((await baseRow.locator('[data-test=snap-hold]').textContent()).includes('replication'), `${base} shows no replication hold`);
    assert(await baseRow.locator('[data-test=snap-destroy]').isDisabled(), `a held snapshot can be destroyed from the page`);
    await page.locator(`[data-test=snap-fs] option[value="${REPLICA}"]`).waitFor({ state: 'attached' });
    for (const name of ['ui-a', 'ui-b']) {
      await page.selectOption('[data-test=snap-fs]', REPLICA);
      await page.fill('[data-test=snap-name]', name);
      await page.click('[data-test=snap-create]');
      await page.locator(`[data-test=snap-row][data-name="${REPLICA}@${name}"]`).waitFor();
    }
    // Hold ui-a with a tag of the user's.
    const a = page.locator(`[data-test=snap-row][data-name="${REPLICA}@ui-a"]`);
    await a.locator('[data-test=snap-hold-add]').click();
    await page.fill('[data-test=hold-dialog] [data-test=hold-tag]', 'keep-ui');
    await page.click('[data-test=hold-dialog] [data-test=confirm]');
    await a.locator('[data-test=snap-hold]', { hasText: 'keep-ui' }).waitFor();
    // Rolling back to the base names both newer snapshots, and the hold refuses it.
    await baseRow.locator('[data-test=snap-rollback]').click();
    const newer = await page.locator('[data-test=confirm-dialog] [data-test=rollback-newer]').textContent();
    assert(newer === 'ui-a, ui-b', `the rollback dialog names ${newer} as newer`);
    await page.click('[data-test=confirm-dialog] [data-test=confirm]');
    const err = page.locator('[data-test=confirm-dialog] [data-test=dialog-error]');
    await err.waitFor({ state: 'visible' });
    assert((await err.textContent()).includes('is held (keep-ui)'), `the refused rollback reads ${await err.textContent()}`);
    await shot('rollback-refused-held');
    await page.click('[data-test=confirm-dialog] [data-test=cancel]');
    // Released (the badge), the rollback goes through and takes both with it.
    await a.locator('[data-test=snap-hold]', { hasText: 'keep-ui' }).click();
    await page.click('[data-test=confirm-dialog] [data-test=confirm]');
    await until(15, 'the hold badge to go', async () => (await a.locator('[data-test=snap-hold]').count()) === 0);
    await baseRow.locator('[data-test=snap-rollback]').click();
    await page.click('[data-test=confirm-dialog] [data-test=confirm]');
    await page.locator(`[data-test=snap-row][data-name="${REPLICA}@ui-a"]`).waitFor({ state: 'detached' });
    const left = (await apiGet(`/api/v1/snapshots?of=${encodeURIComponent(REPLICA)}`)).map((x) => x.name);
    assert(JSON.stringify(left) === JSON.stringify([base]), `after the rollback ${REPLICA} has ${left.join(', ')}`);
    const holds = await apiGet(`/api/v1/holds?of=${encodeURIComponent(REPLICA)}`);
    assert(holds.length === 1 && holds[0].tag === 'replication', `holds after: ${JSON.stringify(holds)}`);
  });
  await step('schedules', async () => {
    // A schedule of the pool's root dataset, made on the Filesystems page.
    await page.click('[data-test=nav-filesystems]');
    const panelEl = page.locator('[data-test=schedules-panel]');
    await panelEl.waitFor();
    await panelEl.locator(`[data-test=schedule-dataset] option[value="${POOL}"]`).waitFor({ state: 'attached' });
    await page.selectOption('[data-test=schedule-dataset]', POOL);
    await page.selectOption('[data-test=schedule-every]', '1d');
    assert((await page.inputValue('[data-test=schedule-keep]')) === '30', 'daily does not offer keep 30');
    await page.fill('[data-test=schedule-keep]', '3');
    await page.click('[data-test=schedule-add]');
    const row = page.locator(`[data-test=schedule-row][data-dataset="${POOL}"][data-every="1d"]`);
    await row.waitFor();
    // The first snapshot is taken at once; the next is due at the next UTC midnight.
    await until(30, 'the first scheduled snapshot', async () => {
      await page.click('[data-test=nav-snapshots]');
      await page.click('[data-test=nav-filesystems]');
      return (await row.locator('[data-test=schedule-last]').getAttribute('data-state')) === 'ok';
    });
    const next = await row.locator('[data-test=schedule-next]').textContent();
    assert(/^in \d/.test(next), `the next run reads ${next}`);
    await row.locator('[data-test=schedule-run]').click();
    await until(15, 'the second snapshot', async () => {
      const snaps = await apiGet(`/api/v1/snapshots?of=${encodeURIComponent(POOL)}`);
      return snaps.filter((x) => x.name.startsWith(`${POOL}@auto-1d-`)).length === 2;
    });
    await shot('schedule');
    await row.locator('[data-test=schedule-remove]').click();
    await page.click('[data-test=confirm-dialog] [data-test=confirm]');
    await row.waitFor({ state: 'detached' });
    const left = await apiGet('/api/v1/schedules');
    assert(!left.some((x) => x.dataset === POOL), `the schedule is still listed: ${JSON.stringify(left)}`);
  });
});
