/**
 * Bench baseline: a minimal pass-through line relay between stdio and a child server. It splits
 * both streams into lines and forwards them untouched: the floor any stdio gate pays (two extra
 * pipe hops and a process), with no parsing, no policy and no re-serialisation.
 */
import { spawn } from 'node:child_process';

const [cmd, ...args] = process.argv.slice(2);
const child = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'inherit'] });

function relay(from: NodeJS.ReadableStream, to: NodeJS.WritableStream): void {
  let rest = '';
  from.on('data', (c: Buffer) => {
    const s = rest + c.toString('utf8');
    let start = 0;
    for (let nl = s.indexOf('\n'); nl >= 0; nl = s.indexOf('\n', start)) {
      to.write(s.slice(start, nl + 1));
      start = nl + 1;
    }
    rest = s.slice(start);
  });
}
relay(process.stdin, child.stdin);
relay(child.stdout, process.stdout);
process.stdin.on('end', () => child.stdin.end());
child.on('exit', (code) => process.exit(code ?? 0));
