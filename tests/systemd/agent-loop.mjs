// The agent of tests/systemd: run inside the container as a leash-* account (by the package's own node), it loops
// over a denied read, a denied exec and a denied connection and prints what got through, with the monotonic time
// of each (CLOCK_MONOTONIC, the clock systemd's *TimestampMonotonic properties use), as one JSON line.
//   node agent-loop.mjs --read PATH[,PATH] --exec PROGRAM --connect HOST:PORT --ms MAX [--stop FILE] [--out FILE]
// It stops after MAX ms, or as soon as FILE exists.
// A read gets through when it returns the file's bytes, an exec when the program exits 0, a connection when the
// listener's greeting arrives (a reset, a refusal or silence is not through).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import process from 'node:process';
import { setTimeout, clearTimeout } from 'node:timers';
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({
  options: {
    read: { type: 'string', default: '' },
    exec: { type: 'string', default: '' },
    connect: { type: 'string', default: '' },
    ms: { type: 'string', default: '2000' },
    out: { type: 'string' },
    stop: { type: 'string' },
  },
});
const now = () => Number(process.hrtime.bigint()) / 1e6;
const reads = a.read ? a.read.split(',') : [];
const [host, port] = a.connect
  ? [a.connect.slice(0, a.connect.lastIndexOf(':')), Number(a.connect.split(':').pop())]
  : [];
const result = {
  start: now(),
  end: 0,
  attempts: { read: 0, exec: 0, connect: 0 },
  through: { read: [], exec: [], connect: [] },
};

const greeted = () =>
  new Promise((resolve) => {
    const s = net.connect({ host, port });
    const done = (v) => {
      clearTimeout(timer);
      s.destroy();
      resolve(v);
    };
    const timer = setTimeout(() => done(false), 300);
    s.on('data', (d) => done(d.toString().startsWith('hello')));
    s.on('error', () => done(false));
    s.on('close', () => done(false));
  });

const flush = () => {
  result.end = now();
  const line = JSON.stringify(result) + '\n';
  if (a.out) fs.appendFileSync(a.out, line);
  else process.stdout.write(line);
};
process.on('SIGTERM', () => {
  flush();
  process.exit(0);
});

const until = result.start + Number(a.ms);
while (now() < until && !(a.stop && fs.existsSync(a.stop))) {
  for (let i = 0; i < 10; i++)
    for (const p of reads) {
      result.attempts.read++;
      try {
        fs.readFileSync(p);
        result.through.read.push([now(), p]);
      } catch {
        /* denied (EPERM) or absent: not through */
      }
    }
  if (a.exec) {
    result.attempts.exec++;
    const r = spawnSync(a.exec, ['--version'], { stdio: 'ignore' });
    if (r.status === 0) result.through.exec.push(now());
  }
  if (a.connect) {
    result.attempts.connect++;
    if (await greeted()) result.through.connect.push(now());
  }
}
flush();
