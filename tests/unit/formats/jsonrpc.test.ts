import { describe, expect, it } from 'vitest';
import { createLineSplitter, parseMessage } from '../../../src/formats/jsonrpc.js';

describe('strict JSON-RPC framing', () => {
  it.each([
    ['{"jsonrpc":"2.0","id":1,"method":"ping"}', 'request'],
    ['{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{}}', 'request'],
    ['{"jsonrpc":"2.0","method":"notifications/initialized"}', 'notification'],
    ['{"jsonrpc":"2.0","id":1,"result":{}}', 'response'],
  ])('accepts %s as %s', (line, kind) => expect(parseMessage(line).kind).toBe(kind));

  it.each([
    ['not json', -32700],
    ['[{"jsonrpc":"2.0","id":1,"method":"ping"}]', -32600],
    ['{"id":1,"method":"ping"}', -32600],
    ['{"jsonrpc":"1.0","id":1,"method":"ping"}', -32600],
    ['{"jsonrpc":"2.0","id":1.5,"method":"ping"}', -32600],
    ['{"jsonrpc":"2.0","id":null,"method":"ping"}', -32600],
    ['{"jsonrpc":"2.0","id":1,"method":7}', -32600],
    ['{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}', -32602],
    ['"str"', -32600],
    ['{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}', -32700],
    ['{"jsonrpc":"2.0","id":1,"method":"p\\ud800"}', -32700],
    ['{"jsonrpc":"2.0","id":18446744073709551617,"method":"ping"}', -32600],
  ])('refuses %s with %d', (line, code) => {
    const m = parseMessage(line);
    expect(m.kind).toBe('invalid');
    if (m.kind === 'invalid') expect(m.code).toBe(code);
  });

  it('refuses invalid UTF-8 instead of replacing it', () => {
    const line = Buffer.concat([
      Buffer.from('{"jsonrpc":"2.0","id":1,"method":"p'),
      Buffer.from([0xff]),
      Buffer.from('"}'),
    ]);
    expect(parseMessage(line)).toMatchObject({ kind: 'invalid', code: -32700 });
  });

  it('splits lines across chunks and refuses an oversized one once', () => {
    const got: (string | null)[] = [];
    const s = createLineSplitter((l) => got.push(l === null ? null : l.toString('utf8')), 10);
    s.push('{"a"');
    s.push(':1}\n{}\n');
    s.push('x'.repeat(30));
    s.push('yyy\n{"b":2}\n');
    expect(got).toEqual(['{"a":1}', '{}', null, '{"b":2}']);
  });
});
