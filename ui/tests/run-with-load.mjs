// Runs the browser test by hand against a running daemon, playing the harness:
// when the test prints "LOAD POOL/FS" this starts tests/nfs-load.mjs reading
// files in that share from 127.0.0.1 and 127.0.0.2, and stops it at the end.
//
//   SHOAL_URL=... SHOAL_PASSWORD=... SHOAL_POOL=tank SHOT_DIR=/tmp/shots \
//   SHOAL_NFS=127.0.0.1:2049 node tests/run-with-load.mjs
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const nfs = process.env.SHOAL_NFS ?? '127.0.0.1:2049';
const test = spawn(process.execPath, [join(here, 'browser.mjs')], { stdio: ['ignore', 'pipe', 'inherit'] });
let load = null;

createInterface({ input: test.stdout }).on('line', (line) => {
  console.log(line);
  const m = /^LOAD (\S+)$/.exec(line);
  if (m && !load) {
    load = spawn(process.execPath, [join(here, 'nfs-load.mjs'), '--server', nfs, '--export', `/${m[1]}`, '--from', '127.0.0.1,127.0.0.2', '--seconds', '300', '--rate', '40'], { stdio: 'inherit' });
  }
});

test.on('exit', (code) => {
  load?.kill();
  process.exit(code ?? 1);
});
