import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createTerminalServer } from '../../../../src/tools/terminal/server.js';
import { result } from '../../../../src/tools/terminal/types.js';

function harness(handlers: Parameters<typeof createTerminalServer>[0]['handlers']) {
  const input = new PassThrough();
  const output = new PassThrough();
  const warnings: string[] = [];
  const replies: Array<{
    id: unknown;
    result?: { structuredContent?: { code: string; stdout: string } };
    error?: { code: number };
  }> = [];
  let buf = '';
  let raw = '';
  output.setEncoding('utf8');
  output.on('data', (d: string) => {
    raw += d;
    buf += d;
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      replies.push(JSON.parse(buf.slice(0, nl)));
      buf = buf.slice(nl + 1);
    }
  });
  const server = createTerminalServer({ input, output, handlers, warn: (m) => warnings.push(m) });
  const send = (msg: object) => input.write(JSON.stringify({ jsonrpc: '2.0', ...msg }) + '\n');
  send({ id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {} } });
  return { input, replies, warnings, send, done: server.done, raw: () => raw };
}

const call = (id: number, name: string, command: string) => ({
  id,
  method: 'tools/call',
  params: { name, arguments: { command } },
});

describe('terminal MCP server', () => {
  it('runs run_command calls one at a time and answers explain while a run is in flight', async () => {
    const events: string[] = [];
    const h = harness({
      run: async (command) => {
        events.push(`start ${command}`);
        await new Promise((r) => setTimeout(r, 50));
        events.push(`end ${command}`);
        return result('OK', 'ok', { stdout: command });
      },
      explain: async (command) => result('OK', `explained ${command}`),
    });
    h.send(call(1, 'run_command', 'a'));
    h.send(call(2, 'run_command', 'b'));
    h.send(call(3, 'explain_command', 'c'));
    h.input.end();
    await h.done;
    expect(events).toEqual(['start a', 'end a', 'start b', 'end b']);
    expect(h.replies.map((r) => r.id)).toEqual([0, 3, 1, 2]);
    expect(h.replies[2]!.result!.structuredContent).toMatchObject({ code: 'OK', stdout: 'a' });
  });

  it('turns a throwing handler into INTERNAL_ERROR with a ref, the message only on the operator side', async () => {
    const h = harness({
      run: async () => {
        throw new Error('secret detail /etc/shadow');
      },
      explain: async () => result('OK', null),
    });
    h.send(call(1, 'run_command', 'x'));
    h.input.end();
    await h.done;
    const env = h.replies[1]!.result!.structuredContent!;
    expect(env.code).toBe('INTERNAL_ERROR');
    expect(JSON.stringify(h.replies[1])).not.toContain('shadow');
    expect(h.warnings.join('\n')).toContain('secret detail');
  });

  it('writes pure ASCII: a U+2028 in output cannot split the line', async () => {
    const h = harness({
      run: async () => result('OK', null, { stdout: 'a\u2028b\u00e9' }),
      explain: async () => result('OK', null),
    });
    h.send(call(1, 'run_command', 'x'));
    h.input.end();
    await h.done;
    expect(h.replies[1]!.result!.structuredContent!.stdout).toBe('a\u2028b\u00e9');
    expect(h.raw()).toMatch(/^[\x00-\x7f]*$/);
  });
});
