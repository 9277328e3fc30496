// The browser acceptance test of storage configuration: a pool with a hot spare
// built from device files on the Pools page (the layout's predicted figures checked
// against `shoal plan --json`), a filesystem and a share made through their pages,
// then, while an NFS client writes, a device failed by fault injection: the alert
// shows in the banner, the spare takes its place and is resilvered by itself; then a
// second device failed and replaced from the Pools page by hand; then, still while
// the client writes, a log device added, failed by fault injection and cleared, a
// mirror side taken offline and brought back online, a third side attached and
// detached again, and the log device removed, each from the page. Every device ends
// ONLINE.
//
//   SHOAL_URL=http://127.0.0.1:8080 SHOT_DIR=/tmp/shots DEVICE_DIR=/srv/devs \
//   EXPECT_PLAN='{"...": ...}' node tests/storage.mjs
//
// Protocol with the harness: after sharing POOL/data the script prints
// "LOAD POOL/data" and waits until the harness's writer has written ("WRITING" is not
// needed: the script watches the pool's write counters); the last line is "DONE",
// after which the harness stops its writer and reads every file back.
import { assert, required, startBrowser } from './harness.mjs';

const URL = required('SHOAL_URL').replace(/\/$/, '');
const SHOT_DIR = required('SHOT_DIR');
const DEVICE_DIR = required('DEVICE_DIR');
const EXPECT = JSON.parse(required('EXPECT_PLAN'));
const POOL = 'vault';
const FS = `${POOL}/data`;
const LAYOUT = '2x2mirror';
const DATA = ['a', 'b', 'c', 'd'].map((d) => `${DEVICE_DIR}/${d}`);
const SPARE = `${DEVICE_DIR}/e`;
const FREE = `${DEVICE_DIR}/f`;
const LOG = `${DEVICE_DIR}/g`;
const THIRD = `${DEVICE_DIR}/h`;
const FAILED = DATA[0];
const FAILED_TOO = DATA[1];

const { page, step, until, run } = await startBrowser(SHOT_DIR);

async function api(method, path, data) {
  const res = await page.request.fetch(`${URL}${path}`, { method, data });
  assert(res.ok(), `${method} ${path}: ${res.status()} ${await res.text()}`);
  return res.json();
}

const deviceRow = (path) => page.locator(`[data-test=pool][data-pool=${POOL}] [data-test=device]`, { has: page.locator(`code:text-is("${path}")`) });

await run(async () => {
  await step('candidates', async () => {
    await page.goto(`${URL}/#/pools`);
    await page.locator('[data-test=page-pools]').waitFor();
    for (const path of [...DATA, SPARE, FREE]) {
      await page.locator(`[data-test=candidate][data-path="${path}"]`).waitFor();
    }
  });

  await step('layouts', async () => {
    await page.fill('[data-test=new-pool-name]', POOL);
    await page.fill('[data-test=disk-mbps]', String(EXPECT.mbps));
    await page.fill('[data-test=disk-iops]', String(EXPECT.iops));
    for (const path of [...DATA, SPARE]) {
      await page.locator(`[data-test=candidate][data-path="${path}"] [data-test=candidate-use]`).check();
    }
    await page.selectOption(`[data-test=candidate][data-path="${SPARE}"] [data-test=candidate-role]`, 'spare');
    const row = page.locator(`[data-test=layout-option][data-layout="${LAYOUT}"]`);
    await row.waitFor();
    // Every layout four devices allow is offered.
    const offered = await page.locator('[data-test=layout-option]').evaluateAll((els) => els.map((e) => e.getAttribute('data-layout')));
    for (const l of ['4stripe', '2x2mirror', '1x(3+1)raidz', '1x(2+2)raidz2']) {
      assert(offered.includes(l), `layout ${l} is not offered (offered: ${offered.join(', ')})`);
    }
    // The figures shown are shoal plan's, for this layout and these disks.
    const shown = {
      usable: Number(await row.getAttribute('data-usable')),
      read: Number(await row.getAttribute('data-read')),
      write: Number(await row.getAttribute('data-write')),
      iops: Number(await row.getAttribute('data-iops')),
    };
    const want = EXPECT.plan;
    assert(
      shown.usable === want.usable_bytes &&
        shown.read === want.streaming_read_mb_per_s &&
        shown.write === want.streaming_write_mb_per_s &&
        shown.iops === want.random_read_iops,
      `the page shows ${JSON.stringify(shown)}, shoal plan says ${JSON.stringify(want)}`,
    );
    await row.locator('[data-test=layout-choose]').check();
  });

  await step('pool-created', async () => {
    await page.click('[data-test=create-pool]');
    await page.locator('[data-test=confirm-dialog]').waitFor();
    await page.click('[data-test=confirm]');
    await page.locator('[data-test=confirm-dialog]').waitFor({ state: 'detached' });
    await page.locator(`[data-test=pool][data-pool=${POOL}]`).waitFor();
    for (const path of [...DATA, SPARE]) await deviceRow(path).waitFor();
    const p = await api('GET', `/api/v1/pools/${POOL}`);
    assert(p.spares.length === 1 && p.spares[0].path === SPARE, `the pool's spares: ${JSON.stringify(p.spares)}`);
    // Devices now in the pool are no longer candidates.
    await page.locator(`[data-test=candidate][data-path="${DATA[0]}"]`).waitFor({ state: 'detached' });
  });

  await step('filesystem-and-share', async () => {
    await page.click('[data-test=nav-filesystems]');
    await page.fill('[data-test=fs-name]', FS);
    await page.click('[data-test=fs-create]');
    await page.locator(`[data-test=fs-row][data-name="${FS}"]`).waitFor();
    await page.click('[data-test=nav-shares]');
    await page.locator(`[data-test=share-dataset] option[value="${FS}"]`).waitFor({ state: 'attached' });
    await page.selectOption('[data-test=share-dataset]', FS);
    await page.fill('[data-test=share-rules]', '127.0.0.1(rw,no_root_squash,insecure)');
    await page.click('[data-test=share-submit]');
    await page.locator(`[data-test=share-row][data-dataset="${FS}"]`).waitFor();
  });

  await step('client-writing', async () => {
    process.stdout.write(`LOAD ${FS}\n`);
    await until(60, 'the client to write', async () => {
      const p = await api('GET', `/api/v1/pools/${POOL}`);
      return p.allocated_bytes > 8 << 20;
    });
  });

  await step('device-failed-alert', async () => {
    await api('POST', `/api/v1/pools/${POOL}/inject`, { device: FAILED, fault: 'fail' });
    await page.click('[data-test=nav-pools]');
    const banner = page.locator('[data-test=alert-banner]');
    await banner.waitFor({ state: 'visible', timeout: 60000 });
    await until(60, 'a critical alert in the banner', async () => (await banner.getAttribute('class')).includes('critical'));
    await banner.click();
    await page.locator('[data-test=page-alerts]').waitFor();
    const row = page.locator('[data-test=alert-row][data-kind="device.faulted"]');
    await row.first().waitFor();
    assert((await row.first().textContent()).includes(FAILED), `the device alert reads ${await row.first().textContent()}`);
  });

  /** Waits until no operation runs, `gone` is out of the pool, `now` in it, all ONLINE. */
  const resilvered = (gone, now) =>
    until(120, `${now} resilvered in place of ${gone}`, async () => {
      const ops = await api('GET', '/api/v1/operations');
      const p = await api('GET', `/api/v1/pools/${POOL}`);
      const devices = p.vdevs.flatMap((v) => v.children);
      return ops.length === 0 && p.health === 'ONLINE' && devices.every((d) => d.health === 'ONLINE') && devices.some((d) => d.path === now) && !devices.some((d) => d.path === gone);
    });

  await step('spare-took-over', async () => {
    await resilvered(FAILED, SPARE);
    const alerts = await api('GET', '/api/v1/alerts');
    assert(alerts.alerts.some((a) => a.kind === 'spare.activated' && a.message.includes(SPARE)), 'no spare.activated alert');
    await page.goto(`${URL}/#/pools`);
    await deviceRow(SPARE).waitFor();
    assert((await deviceRow(SPARE).textContent()).includes('ONLINE'), 'the spare is not ONLINE in its vdev');
    const p = await api('GET', `/api/v1/pools/${POOL}`);
    assert(p.spares.length === 0, 'the spare is still listed as a spare');
  });

  await step('replaced-by-hand', async () => {
    await api('POST', `/api/v1/pools/${POOL}/inject`, { device: FAILED_TOO, fault: 'fail' });
    // The page open since the last step shows the failure by itself, without a reload.
    await until(60, `${FAILED_TOO} shown FAULTED`, async () => (await deviceRow(FAILED_TOO).textContent()).includes('FAULTED'));
    await deviceRow(FAILED_TOO).locator('[data-test=replace]').click();
    await page.locator('[data-test=replace-dialog]').waitFor();
    await page.selectOption('[data-test=replace-with]', FREE);
    await page.click('[data-test=replace-go]');
    await resilvered(FAILED_TOO, FREE);
    await page.goto(`${URL}/#/pools`);
    await deviceRow(FREE).waitFor();
    assert((await deviceRow(FREE).textContent()).includes('ONLINE'), 'the new device is not ONLINE');
  });

  const pool = () => api('GET', `/api/v1/pools/${POOL}`);
  const confirm = async () => {
    await page.locator('[data-test=confirm-dialog]').waitFor();
    await page.click('[data-test=confirm]');
    await page.locator('[data-test=confirm-dialog]').waitFor({ state: 'detached' });
  };
  const health = async (path) => {
    const p = await pool();
    const all = [...p.vdevs.flatMap((v) => v.children), ...p.log, ...p.cache, ...p.spares];
    return all.find((d) => d.path === path)?.health ?? null;
  };

  await step('log-device-added', async () => {
    await page.click(`[data-test=add-devices][data-pool=${POOL}]`);
    await page.locator('[data-test=add-dialog]').waitFor();
    await page.locator(`[data-test=add-candidate][data-path="${LOG}"] [data-test=add-use]`).check();
    await page.selectOption('[data-test=add-kind]', 'log');
    await page.click('[data-test=add-go]');
    await page.locator('[data-test=add-dialog]').waitFor({ state: 'detached' });
    await deviceRow(LOG).waitFor();
    const p = await pool();
    assert(p.log.length === 1 && p.log[0].path === LOG, `the pool's log devices: ${JSON.stringify(p.log)}`);
    assert(p.intent_log.ring === 'log devices', `the intent log is on ${p.intent_log.ring}`);
  });

  await step('log-device-cleared', async () => {
    await api('POST', `/api/v1/pools/${POOL}/inject`, { device: LOG, fault: 'fail' });
    await until(60, `${LOG} FAULTED by the client's commits`, async () => (await health(LOG)) === 'FAULTED');
    await api('POST', `/api/v1/pools/${POOL}/inject`, { device: LOG, fault: 'none' });
    // No reload: the page offers Clear once it shows the device FAULTED.
    await deviceRow(LOG).locator('[data-test=clear]').click({ timeout: 60000 });
    await until(60, `${LOG} back ONLINE with the intent log on it`, async () => {
      const p = await pool();
      return (await health(LOG)) === 'ONLINE' && p.intent_log.ring === 'log devices';
    });
  });

  await step('offline-online', async () => {
    const side = DATA[2];
    await deviceRow(side).locator('[data-test=offline]').click();
    await confirm();
    await until(30, `${side} shown OFFLINE`, async () => (await deviceRow(side).textContent()).includes('OFFLINE'));
    assert((await pool()).health === 'DEGRADED', 'the pool is not DEGRADED with a side offline');
    await deviceRow(side).locator('[data-test=online]').click();
    await until(120, `${side} back ONLINE`, async () => (await health(side)) === 'ONLINE' && (await pool()).health === 'ONLINE');
  });

  await step('attach-detach', async () => {
    const beside = DATA[3];
    await page.goto(`${URL}/#/pools`);
    await deviceRow(beside).locator('[data-test=attach]').click();
    await page.locator('[data-test=attach-dialog]').waitFor();
    await page.selectOption('[data-test=attach-with]', THIRD);
    await page.click('[data-test=attach-go]');
    await until(120, `${THIRD} attached and resilvered`, async () => (await health(THIRD)) === 'ONLINE' && (await api('GET', '/api/v1/operations')).length === 0);
    const p = await pool();
    const vdev = p.vdevs.find((v) => v.children.some((d) => d.path === THIRD));
    assert(vdev.layout === 'mirror' && vdev.children.length === 3, `the vdev after attach: ${JSON.stringify(vdev)}`);
    await page.goto(`${URL}/#/pools`);
    await deviceRow(THIRD).locator('[data-test=detach]').click();
    await confirm();
    await deviceRow(THIRD).waitFor({ state: 'detached' });
    assert((await health(THIRD)) === null, `${THIRD} is still in the pool`);
  });

  await step('log-device-removed', async () => {
    await deviceRow(LOG).locator('[data-test=remove]').click();
    await confirm();
    await deviceRow(LOG).waitFor({ state: 'detached' });
    const p = await pool();
    assert(p.log.length === 0 && p.intent_log.ring === 'pool', `after removing the log device: ${JSON.stringify(p.log)}, ring ${p.intent_log.ring}`);
    assert(p.health === 'ONLINE', `the pool ends ${p.health}`);
  });
});
