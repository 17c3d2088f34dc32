/**
 * The agent's side of a transition (issue 40): run as the leashed account, for `ms` milliseconds it reads a file its
 * policy denies and asks a host its policy denies for a page over plain HTTP, one after the other, and prints what got
 * through: reads that succeeded, pages that came back from the upstream (an HTTP 200), with the first and last time
 * (ms from its start) each happened. A refused connection, a reset, a proxy's 403 or silence count as held.
 * Self-contained (node:* only) so the account can run a copy.
 */
export const AGENT_LOOP = `import fs from 'node:fs';
import net from 'node:net';
const [file, host, port, hostHeader, ms] = process.argv.slice(2);
const t0 = Date.now();
const c = { reads: 0, readsThrough: 0, readsDenied: 0, readsOther: 0, conns: 0, connsThrough: 0, refused: 0, reset: 0,
  connOther: 0, readFirst: null, readLast: null, connFirst: null, connLast: null };
const page = () => new Promise((res) => {
  const s = net.connect({ host, port: Number(port) });
  let buf = '';
  const done = (v) => { clearTimeout(t); s.destroy(); res(v); };
  const t = setTimeout(() => done('timeout'), 400);
  s.on('connect', () => s.write('GET / HTTP/1.1\\r\\nHost: ' + hostHeader + '\\r\\nConnection: close\\r\\n\\r\\n'));
  s.on('data', (d) => { buf += d; if (buf.startsWith('HTTP/1.1 200')) done('through'); });
  s.on('error', (e) => done(e.code ?? 'error'));
  s.on('close', () => done(buf.startsWith('HTTP/1.1 200') ? 'through' : 'closed'));
});
while (Date.now() - t0 < Number(ms)) {
  c.reads++;
  try {
    fs.readFileSync(file);
    c.readsThrough++;
    const at = Date.now() - t0;
    c.readFirst ??= at;
    c.readLast = at;
  } catch (e) {
    if (e.code === 'EPERM') c.readsDenied++;
    else c.readsOther++;
  }
  c.conns++;
  const r = await page();
  if (r === 'through') {
    c.connsThrough++;
    const at = Date.now() - t0;
    c.connFirst ??= at;
    c.connLast = at;
  } else if (r === 'ECONNREFUSED') c.refused++;
  else if (r === 'ECONNRESET' || r === 'closed') c.reset++;
  else c.connOther++;
}
process.stdout.write(JSON.stringify(c) + '\\n');
`;

export interface LoopCounts {
  reads: number;
  readsThrough: number;
  readsDenied: number;
  readsOther: number;
  conns: number;
  connsThrough: number;
  refused: number;
  reset: number;
  connOther: number;
  readFirst: number | null;
  readLast: number | null;
  connFirst: number | null;
  connLast: number | null;
}
