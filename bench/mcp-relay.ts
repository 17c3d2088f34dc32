/**
 * Bench baseline: a minimal pass-through line relay between stdio and a child server. It splits
 * both streams into lines and forwards them untouched: the floor any stdio gate pays (two extra
 * pipe hops and a process), with no parsing, no policy and no re-serialisation.
 *   node mcp-relay.js [--parse] <server command...>
 * --parse: each request line is also read with JSON.parse and a tools/call's name looked up in a set of 500 names
 * (and still forwarded untouched): about the least a gate that judges calls by name pays, with no log line, no
 * argument rules and no look at the answers.
 */
import { spawn } from 'node:child_process';

const argv = process.argv.slice(2);
const parse = argv[0] === '--parse';
const [cmd, ...args] = parse ? argv.slice(1) : argv;
const child = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'inherit'] });
const names = new Set(['read_file', ...Array.from({ length: 499 }, (_, i) => `tool_${i}`)]);
let judged = 0;

function relay(from: NodeJS.ReadableStream, to: NodeJS.WritableStream, judge: boolean): void {
  let rest = '';
  from.on('data', (c: Buffer) => {
    const s = rest + c.toString('utf8');
    let start = 0;
    for (let nl = s.indexOf('\n'); nl >= 0; nl = s.indexOf('\n', start)) {
      const line = s.slice(start, nl + 1);
      if (judge) {
        const m = JSON.parse(line) as { method?: string; params?: { name?: string } };
        if (m.method === 'tools/call' && names.has(String(m.params?.name))) judged++;
      }
      to.write(line);
      start = nl + 1;
    }
    rest = s.slice(start);
  });
}
relay(process.stdin, child.stdin, parse);
relay(child.stdout, process.stdout, false);
process.on('exit', () => parse && judged === 0 && process.stderr.write('mcp-relay --parse: no call judged\n'));
process.stdin.on('end', () => child.stdin.end());
child.on('exit', (code) => process.exit(code ?? 0));
