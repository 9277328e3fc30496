// Development server for the UI: serves dist/ at the paths the daemon uses
// (/ -> index.html, /ui/app.js, /ui/app.css) and proxies /api/ and /metrics to a
// running daemon, so the built UI can be tried without rebuilding the daemon.
//
//   SHOAL_API=http://127.0.0.1:18080 PORT=5173 node dev-server.mjs
import { createServer, request } from 'node:http';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(fileURLToPath(import.meta.url));
const api = new URL(process.env.SHOAL_API ?? 'http://127.0.0.1:8080');
const port = Number(process.env.PORT ?? 5173);
const host = process.env.HOST ?? '127.0.0.1';

const files = {
  '/': ['index.html', 'text/html; charset=utf-8'],
  '/index.html': ['index.html', 'text/html; charset=utf-8'],
  '/ui/app.js': ['app.js', 'text/javascript; charset=utf-8'],
  '/ui/app.css': ['app.css', 'text/css; charset=utf-8'],
};

function proxy(req, res) {
  const upstream = request(
    {
      host: api.hostname,
      port: api.port || 80,
      method: req.method,
      path: req.url,
      headers: { ...req.headers, host: api.host },
    },
    (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    },
  );
  upstream.on('error', (e) => {
    res.writeHead(502, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: `dev server: daemon at ${api.host} unreachable: ${e.message}` }));
  });
  req.pipe(upstream);
}

createServer(async (req, res) => {
  const path = (req.url ?? '/').split('?')[0];
  if (path.startsWith('/api/') || path === '/metrics') return proxy(req, res);
  const file = files[path];
  if (!file || req.method !== 'GET') {
    res.writeHead(404, { 'content-type': 'text/plain' });
    return res.end('not found\n');
  }
  try {
    const body = await readFile(join(root, 'dist', file[0]));
    res.writeHead(200, { 'content-type': file[1], 'cache-control': 'no-store' });
    res.end(body);
  } catch {
    res.writeHead(500, { 'content-type': 'text/plain' });
    res.end('dist/ not built: run npm run build\n');
  }
}).listen(port, host, () => {
  console.log(`shoal UI on http://${host}:${port}/ (API proxied to ${api.origin})`);
});
