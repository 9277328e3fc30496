// Build of the browser UI: bundles src/main.ts into dist/app.js and src/app.css
// (with uPlot's stylesheet folded in) into dist/app.css, and copies index.html.
// The output is deterministic: no timestamps, no source maps, fixed targets, so a
// rebuild of the same sources is byte-identical (CI checks `git diff ui/dist`).
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(fileURLToPath(import.meta.url));
const dist = join(root, 'dist');
const outputs = ['index.html', 'app.js', 'app.css'];

mkdirSync(dist, { recursive: true });
// Only the three served files live in dist/.
for (const f of readdirSync(dist)) {
  if (!outputs.includes(f)) rmSync(join(dist, f), { recursive: true });
}

const common = {
  absWorkingDir: root,
  bundle: true,
  minify: true,
  sourcemap: false,
  legalComments: 'eof',
  logLevel: 'warning',
  target: ['es2020'],
};

await esbuild.build({
  ...common,
  entryPoints: ['src/main.ts'],
  outfile: 'dist/app.js',
  format: 'iife',
  platform: 'browser',
});

await esbuild.build({
  ...common,
  entryPoints: ['src/app.css'],
  outfile: 'dist/app.css',
  loader: { '.css': 'css' },
});

copyFileSync(join(root, 'index.html'), join(dist, 'index.html'));

for (const f of outputs) {
  const { size } = await import('node:fs').then((fs) => fs.statSync(join(dist, f)));
  console.log(`dist/${f.padEnd(10)} ${String(size).padStart(8)} bytes`);
}
