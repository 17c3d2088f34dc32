import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { call, calledTools, CLI, FAKE, init, startGate, tmpdir } from './mcp-helpers.js';
import { ERROR_CODES } from '../../src/errors.js';

const built = fs.existsSync(CLI);

const POLICY = `
tools:
  mode: whitelist
  allow: [read_file, run_cmd, search, ask, slow, die, late, both_lists]
  deny: [delete_all, both_lists]
  hide_denied: true
  args:
    read_file:
      deny: { "**.path": ["^/etc/"] }
      allow: { path: ["^/srv/"], "opts.*": [{ type: boolean }] }
    run_cmd:
      deny: ["shred -u"]
  deny_methods: ["resources/*"]
`;

describe.skipIf(!built)('leash mcp: policy on the wire', () => {
  it('forwards an allowed call and answers a denied one itself; the server never sees it', async () => {
    const g = startGate({ policy: POLICY });
    g.send(init(0));
    await g.answer(0);
    g.send(call(1, 'read_file', { path: '/srv/a' }));
    g.send(call(2, 'delete_all'));
    const ok = await g.answer(1);
    const denied = await g.answer(2);
    expect(ok.result).toBeDefined();
    expect(denied.error).toMatchObject({ code: -32001, data: { reason: 'deny_entry' } });
    g.end();
    expect(await g.exited).toBe(0);
    expect(calledTools(g)).toEqual(['read_file']);
    const block = g.log().find((l) => l.action === 'block');
    expect(block).toMatchObject({ surface: 'tools', reason: 'deny_entry', subject: { name: 'delete_all' } });
    expect((denied.error as { data: { ref: string } }).data.ref).toBe(block!.ref);
    // Arguments are logged for denied calls only.
    const allow = g.log().find((l) => l.action === 'allow') as { subject: Record<string, unknown> };
    expect(allow.subject.inputs).toBeUndefined();
  });

  it('deny wins over allow', async () => {
    const g = startGate({ policy: POLICY });
    g.send(call(1, 'both_lists'));
    expect((await g.answer(1)).error).toMatchObject({ code: -32001 });
    g.end();
    expect(await g.exited).toBe(0);
    expect(calledTools(g)).toEqual([]);
  });

  it.each([
    ['full-width', 'ｄｅｌｅｔｅ＿ａｌｌ'],
    ['case', 'DELETE_ALL'],
    ['zero-width', 'delete\u200b_all'],
    ['soft hyphen and BOM', '\ufeffdelete\u00ad_all'],
    ['padding', '  delete_all '],
  ])('denies a %s spelling of a denied tool', async (_n, name) => {
    const g = startGate({ policy: POLICY });
    g.send(call(7, name));
    expect((await g.answer(7)).error).toMatchObject({ code: -32001, data: { reason: 'deny_entry' } });
    g.end();
    await g.exited;
    expect(calledTools(g)).toEqual([]);
  });

  it.each([
    ['nested $ref', { path: { $ref: '/etc/passwd' } }, 'arg_denied'],
    ['deeper', { files: [{ path: '/etc/shadow' }] }, 'arg_denied'],
    ['.. with /', { path: '/srv/../etc/passwd' }, 'arg_not_allowed'],
    ['.. with \\', { path: '/srv/..\\..\\x' }, 'arg_not_allowed'],
    ['an unlisted argument', { path: '/srv/a', mode: 'x' }, 'arg_not_allowed'],
    ['a wrong type', { path: '/srv/a', opts: { x: 'true' } }, 'arg_not_allowed'],
    ['an object where a string was expected', { path: { p: '/srv/a' } }, 'arg_not_allowed'],
  ])('argument path rules: refuses %s', async (_n, args, reason) => {
    const g = startGate({ policy: POLICY });
    g.send(call(3, 'read_file', args));
    const r = await g.answer(3);
    expect(r.error).toMatchObject({ code: -32001, data: { reason } });
    g.end();
    await g.exited;
    expect(calledTools(g)).toEqual([]);
    // Denied calls carry their (cut, masked) arguments in the log.
    expect(g.log().find((l) => l.action === 'block')).toMatchObject({ reason, subject: { inputs: expect.anything() } });
  });

  it('argument path rules: checks arrays of scalars joined, and admits the learned shape', async () => {
    const g = startGate({ policy: POLICY });
    g.send(call(1, 'run_cmd', { argv: ['shred', '-u', '/srv/x'] }));
    g.send(call(2, 'read_file', { path: '/srv/x/y.txt', opts: { a: true, b: false } }));
    expect((await g.answer(1)).error).toMatchObject({ data: { reason: 'arg_denied' } });
    expect((await g.answer(2)).result).toBeDefined();
    g.end();
    await g.exited;
    expect(calledTools(g)).toEqual(['read_file']);
  });

  it('inspects the arguments of an allowed tool and logs the secret masked', async () => {
    const g = startGate({ policy: POLICY });
    const key = 'AKIAIOSFODNN7EXAMPLE';
    g.send(call(1, 'search', { q: `use ${key} please` }));
    g.send(call(2, 'run_cmd', { cmd: 'sudo rm -rf /' }));
    expect((await g.answer(1)).error).toMatchObject({ code: -32001, data: { reason: 'inspect_secrets' } });
    expect((await g.answer(2)).error).toMatchObject({ code: -32001, data: { reason: 'inspect_priv_esc' } });
    g.end();
    expect(await g.exited).toBe(0);
    expect(calledTools(g)).toEqual([]);
    const text = fs.readFileSync(g.logFile, 'utf8');
    expect(text).toContain('inspect_secrets');
    expect(text).not.toContain(key);
  });

  it('hides denied tools (and entries with a second spelling of name) from tools/list', async () => {
    const g = startGate({ policy: POLICY });
    g.send({ jsonrpc: '2.0', id: 'L', method: 'tools/list' });
    const r = (await g.answer('L')) as { result: { tools: { name: string }[] } };
    const names = r.result.tools.map((t) => t.name);
    expect(names).toContain('read_file');
    expect(names).not.toContain('delete_all');
    expect(names).not.toContain('Delete_All');
    expect(names).not.toContain('sneaky');
    g.end();
    expect(await g.exited).toBe(0);
  });

  it('strict_args admits only empty arguments for a tool without allow rules', async () => {
    const g = startGate({ policy: 'tools: { allow: [search], strict_args: true }\n' });
    g.send(call(1, 'search', {}));
    g.send(call(2, 'search', { q: {} }));
    expect((await g.answer(1)).result).toBeDefined();
    expect((await g.answer(2)).error).toMatchObject({ data: { reason: 'strict_args' } });
    g.end();
    await g.exited;
    expect(calledTools(g)).toEqual(['search']);
  });

  it('deny_methods refuses with -32601 (case-insensitive globs) and drops matching notifications', async () => {
    const g = startGate({ policy: POLICY });
    g.send({ jsonrpc: '2.0', id: 1, method: 'RESOURCES/read', params: { uri: 'file:///x' } });
    g.send({ jsonrpc: '2.0', method: 'resources/updated', params: {} });
    g.send({ jsonrpc: '2.0', id: 2, method: 'ping' });
    expect((await g.answer(1)).error).toMatchObject({ code: -32601 });
    expect((await g.answer(2)).result).toEqual({});
    g.end();
    await g.exited;
    const methods = g.received().map((m) => (m as { method: string }).method);
    expect(methods).toEqual(['ping']);
  });

  it('polices other methods by the selector that really names what they touch', async () => {
    const g = startGate({
      policy: `
tools:
  mode: blacklist
  deny: ["file:///etc/passwd", secret_prompt]
  policed_methods: [resources/read, prompts/get, completion/complete]
`,
    });
    const send = (id: number, method: string, params: unknown) => g.send({ jsonrpc: '2.0', id, method, params });
    send(1, 'resources/read', { uri: 'FILE:///etc/passwd' });
    send(2, 'resources/read', { uri: 'file:///srv/ok' });
    send(3, 'resources/read', { uri: 'file:///srv/ok', name: 'x' });
    send(4, 'prompts/get', { name: 'Secret_Prompt' });
    send(5, 'completion/complete', {
      ref: { type: 'ref/prompt', name: 'secret_prompt' },
      argument: { name: 'a', value: 'b' },
    });
    send(6, 'completion/complete', { ref: { type: 'ref/resource', uri: 'file:///x', name: 'y' } });
    send(7, 'completion/complete', {
      ref: { type: 'ref/resource', uri: 'file:///srv/ok' },
      argument: { name: 'a', value: 'b' },
    });
    expect((await g.answer(1)).error).toMatchObject({ code: -32001, data: { reason: 'deny_entry' } });
    expect((await g.answer(2)).error).toMatchObject({ code: -32601 }); // reached the fake server, which has no resources
    expect((await g.answer(3)).error).toMatchObject({ code: -32602, data: { reason: 'bad_selector' } });
    expect((await g.answer(4)).error).toMatchObject({ code: -32001 });
    expect((await g.answer(5)).error).toMatchObject({ code: -32001 });
    expect((await g.answer(6)).error).toMatchObject({ code: -32602 });
    expect((await g.answer(7)).error).toMatchObject({ code: -32601 });
    g.end();
    expect(await g.exited).toBe(0);
    expect(g.received().map((m) => (m as { id: number }).id)).toEqual([2, 7]);
  });

  it('polices Tools/Call like tools/call', async () => {
    const g = startGate({ policy: POLICY });
    g.send({ jsonrpc: '2.0', id: 1, method: 'Tools/Call', params: { name: 'delete_all' } });
    expect((await g.answer(1)).error).toMatchObject({ code: -32001 });
    g.end();
    await g.exited;
    expect(g.received()).toEqual([]);
  });
});

describe.skipIf(!built)('leash mcp: strict protocol handling', () => {
  const lineRefusals: [string, string | Buffer, number, unknown][] = [
    [
      'a raw TAB in a string',
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read\tfile"}}',
      -32700,
      null,
    ],
    [
      'a bare CR',
      '{"jsonrpc":"2.0","id":1,"method":"ping"}\r{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_all"}}',
      -32700,
      null,
    ],
    [
      'a duplicate key at depth',
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{"a":{"b":1,"b":2}}}}',
      -32700,
      null,
    ],
    [
      'a duplicate name',
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_all","name":"read_file"}}',
      -32700,
      null,
    ],
    [
      'NaN',
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"n":NaN}}}',
      -32700,
      null,
    ],
    ['Infinity', '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":Infinity}}', -32700, null],
    ['1e400', '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":1e400}}', -32700, null],
    [
      'invalid UTF-8',
      Buffer.concat([
        Buffer.from('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"s":"'),
        Buffer.from([0xc0, 0xaf]),
        Buffer.from('"}}'),
      ]),
      -32700,
      null,
    ],
    ['a lone surrogate', '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"s":"\\ud800"}}', -32700, null],
    ['a member spelled Method', '{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call"}', -32600, 1],
    [
      'a member spelled with an accent',
      '{"jsonrpc":"2.0","id":1,"method":"ping","m\u00e9thod":"tools/call"}',
      -32600,
      1,
    ],
    [
      'a full-width member',
      '{"jsonrpc":"2.0","id":1,"method":"ping","\uff4d\uff45\uff54\uff48\uff4f\uff44":"tools/call"}',
      -32600,
      1,
    ],
    ['a long-s params', '{"jsonrpc":"2.0","id":1,"method":"ping","paramſ":{}}', -32600, 1],
    ['an ID member', '{"jsonrpc":"2.0","id":1,"ID":2,"method":"ping"}', -32600, 1],
    ['id null', '{"jsonrpc":"2.0","id":null,"method":"ping"}', -32600, null],
    ['no jsonrpc', '{"id":1,"method":"ping"}', -32600, 1],
    ['a method that is not a string', '{"jsonrpc":"2.0","id":1,"method":5}', -32600, 1],
    ['a request that is also a response', '{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}', -32600, 1],
    [
      'a client response with both result and error',
      '{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}',
      -32600,
      1,
    ],
    ['JSON nested 100000 levels', '['.repeat(100000), -32700, null],
    ['an empty batch', '[]', -32600, null],
  ];
  it.each(lineRefusals)('refuses %s and never forwards it', async (_n, line, code, id) => {
    const g = startGate({ policy: POLICY });
    g.send(line);
    g.send({ jsonrpc: '2.0', id: 'after', method: 'ping' });
    const r = (await g.next()) as { id: unknown; error: { code: number } };
    expect(r.error.code).toBe(code);
    expect(r.id).toEqual(id);
    await g.answer('after');
    g.end();
    expect(await g.exited).toBe(0);
    // Only the trailing ping reached the server: the refused line never did, nor any part of it.
    expect(g.received()).toEqual([{ jsonrpc: '2.0', id: 'after', method: 'ping' }]);
    expect(g.log().some((l) => l.reason === 'protocol_client')).toBe(true);
  });

  it.each([
    ['a second spelling of name in params', { name: 'read_file', Name: 'delete_all' }],
    ['a uri beside name', { name: 'read_file', uri: 'file:///etc/passwd' }],
    ['a name that is not a string', { name: ['delete_all'] }],
    ['arguments that are not an object', { name: 'search', arguments: ['rm'] }],
  ])('refuses tools/call with %s (-32602)', async (_n, params) => {
    const g = startGate({ policy: POLICY });
    g.send({ jsonrpc: '2.0', id: 9, method: 'tools/call', params });
    expect((await g.answer(9)).error).toMatchObject({ code: -32602 });
    g.end();
    await g.exited;
    expect(g.received()).toEqual([]);
  });

  it('re-serialises what it forwards as compact ASCII JSON', async () => {
    const g = startGate({ policy: POLICY });
    g.send(
      '{ "jsonrpc" : "2.0", "id" : 1, "method" : "tools/call", "params" : { "name" : "search", "arguments" : { "q" : "caf\u00e9 \u2028", "n" : 1.0 } } }',
    );
    await g.answer(1);
    g.end();
    await g.exited;
    const raw = fs.readFileSync(g.record, 'utf8').trim();
    expect(raw).toBe(
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"q":"caf\\u00e9 \\u2028","n":1.0}}}',
    );
  });

  it('forwards a line already in compact ASCII form unchanged, and re-writes a reply that is not', async () => {
    const g = startGate({ policy: POLICY });
    const sent =
      '{"jsonrpc":"2.0","id":"r-1","method":"tools/call","params":{"name":"search","arguments":{"q":"caf\\u00e9"}}}';
    g.send(sent);
    await g.answer('r-1');
    g.end();
    expect(await g.exited).toBe(0);
    expect(fs.readFileSync(g.record, 'utf8')).toBe(`${sent}\n`);
    // The fake server answers with JSON.stringify, which leaves the é raw: the gate escapes it.
    const reply = g.stdoutRaw().find((l) => l.includes('"r-1"'))!;
    expect(JSON.parse(reply)).toMatchObject({ id: 'r-1', result: { content: [{ text: 'ran search {"q":"café"}' }] } });
    expect(reply).toBe(
      '{"jsonrpc":"2.0","id":"r-1","result":{"content":[{"type":"text","text":"ran search {\\"q\\":\\"caf\\u00e9\\"}"}]}}',
    );
  });

  it('matches ids exactly by type: 1 and "1" are different requests', async () => {
    const g = startGate({ policy: POLICY, mode: 'late:late' });
    g.send(call(1, 'late'));
    g.send({ jsonrpc: '2.0', id: '1', method: 'ping' });
    const s = await g.answer('1');
    expect(s.result).toEqual({});
    const n = await g.answer(1);
    expect(n.result).toBeDefined();
    expect(g.stdout().filter((l) => (l as { id: unknown }).id === 1)).toHaveLength(1);
    g.end();
    expect(await g.exited).toBe(0);
  });

  it('refuses a request whose id is still pending', async () => {
    const g = startGate({ policy: POLICY, mode: 'late:late' });
    g.send(call(5, 'late'));
    g.send(call(5, 'search'));
    const first = (await g.next()) as { id: number; error: { code: number } };
    expect(first).toMatchObject({ id: 5, error: { code: -32600 } });
    await g.next(3000);
    g.end();
    await g.exited;
    expect(calledTools(g)).toEqual(['late']);
  });

  it('splits a client batch and judges each element', async () => {
    const g = startGate({ policy: POLICY });
    g.send([
      { jsonrpc: '2.0', id: 1, method: 'ping' },
      call(2, 'delete_all'),
      call(3, 'search'),
      { jsonrpc: '2.0', id: null, method: 'ping' },
    ]);
    expect((await g.answer(1)).result).toEqual({});
    expect((await g.answer(2)).error).toMatchObject({ code: -32001 });
    expect((await g.answer(3)).result).toBeDefined();
    g.end();
    await g.exited;
    // The server received the allowed elements one by one, never an array.
    expect(g.received().map((m) => (m as { id: unknown }).id)).toEqual([1, 3]);
  });

  it('relays server notifications, server-to-client requests, and the client answer back', async () => {
    const g = startGate({ policy: POLICY, mode: 'notify' });
    g.send(call(1, 'ask'));
    const note = (await g.next()) as { method: string };
    expect(note.method).toBe('notifications/message');
    const req = (await g.next()) as { id: number; method: string };
    expect(req.method).toBe('sampling/createMessage');
    g.send({ jsonrpc: '2.0', id: req.id, result: { role: 'assistant', content: { type: 'text', text: 'hi' } } });
    const r = (await g.answer(1)) as { result: { content: { text: string }[] } };
    expect(r.result.content[0]!.text).toContain('client said');
    // A response to an id the server never asked is not forwarded.
    g.send({ jsonrpc: '2.0', id: 424242, result: {} });
    g.end();
    expect(await g.exited).toBe(0);
    expect(g.received().some((m) => (m as { id: unknown }).id === 424242)).toBe(false);
  });

  it('delivers a server batch once, as one array', async () => {
    const g = startGate({ policy: POLICY });
    g.send({ jsonrpc: '2.0', id: 8, method: 'batchme' });
    const b = (await g.next()) as unknown[];
    expect(Array.isArray(b)).toBe(true);
    expect(b).toHaveLength(2);
    g.end();
    expect(await g.exited).toBe(0);
  });

  it.each([
    ['both result and error', 'both'],
    ['a second spelling of result', 'spelled'],
  ])('fails the request when the server answers with %s', async (_n, mode) => {
    const g = startGate({ policy: POLICY, mode });
    g.send({ jsonrpc: '2.0', id: 4, method: 'ping' });
    const r = (await g.answer(4)) as { error: { code: number; message: string } };
    expect(r.error.code).toBe(-32603);
    expect(r.error.message).toMatch(/bad response from server/);
    g.end();
    await g.exited;
    expect(g.log().some((l) => l.reason === 'protocol_server')).toBe(true);
  });

  it('fails a tools/list page with a duplicate key closed', async () => {
    const g = startGate({ policy: POLICY, mode: 'dupkey' });
    g.send({ jsonrpc: '2.0', id: 4, method: 'tools/list' });
    expect((await g.answer(4)).error).toMatchObject({ code: -32603 });
    g.end();
    await g.exited;
  });

  it('skips banners on the server stdout with a line on stderr', async () => {
    const g = startGate({ policy: POLICY, mode: 'banner' });
    g.send({ jsonrpc: '2.0', id: 1, method: 'ping' });
    expect((await g.answer(1)).result).toEqual({});
    g.end();
    expect(await g.exited).toBe(0);
    expect(g.stderr()).toMatch(/skipped a non-JSON line from the server: Server starting/);
  });
});

describe.skipIf(!built)('leash mcp: time-outs, cancellation, failures, signals', () => {
  it('answers a request the server never answers with -32603 and exits 3', async () => {
    // The server is up (initialize answered) before the clock matters: on a loaded machine a Node server's start
    // alone outlasts a short time-out, and the ping must be answered in time.
    const g = startGate({ policy: POLICY, mode: 'slow:slow', cliArgs: ['--timeout', '1500'] });
    g.send(init(0));
    await g.answer(0);
    g.send(call(1, 'slow'));
    g.send({ jsonrpc: '2.0', id: 2, method: 'ping' });
    expect((await g.answer(2)).result).toEqual({});
    expect((await g.answer(1)).error).toMatchObject({ code: -32603, message: 'server timed out' });
    g.end();
    expect(await g.exited).toBe(3);
    expect(g.stderr()).toMatch(/did not answer 1 request within 1500 ms/);
  });

  it('drops an answer that arrives after the time-out, so the client never sees two', async () => {
    const g = startGate({ policy: POLICY, mode: 'late:late', cliArgs: ['--timeout', '200'] });
    g.send(call(1, 'late'));
    expect((await g.answer(1)).error).toMatchObject({ code: -32603 });
    await new Promise((r) => setTimeout(r, 700));
    g.end();
    expect(await g.exited).toBe(3);
    expect(g.stdout().filter((l) => (l as { id: unknown }).id === 1)).toHaveLength(1);
  });

  it('stops waiting for a cancelled request: no time-out, exit 0', async () => {
    const g = startGate({ policy: POLICY, mode: 'slow:slow', cliArgs: ['--timeout', '400'] });
    g.send(call(1, 'slow'));
    g.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1 } });
    g.end();
    expect(await g.exited).toBe(0);
    expect(g.stdout()).toEqual([]);
    expect(g.received().map((m) => (m as { method: string }).method)).toEqual([
      'tools/call',
      'notifications/cancelled',
    ]);
  });

  it('does not pass on a cancel of initialize', async () => {
    const g = startGate({ policy: POLICY });
    g.send(init(0));
    g.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 0 } });
    await g.answer(0);
    g.end();
    await g.exited;
    expect(g.received().map((m) => (m as { method: string }).method)).toEqual(['initialize']);
    // A notification is never answered, not even when refused.
    expect(g.stdout()).toHaveLength(1);
    expect(g.log().some((l) => (l.subject as { code?: string }).code === 'cancel_initialize')).toBe(true);
  });

  it('fails pending calls with -32603 and exits 3 when the server dies mid-call', async () => {
    const g = startGate({ policy: POLICY, mode: 'die:die' });
    g.send(init(0));
    await g.answer(0);
    g.send(call(1, 'die'));
    expect((await g.answer(1)).error).toMatchObject({ code: -32603, message: 'server closed' });
    expect(await g.exited).toBe(3);
  });

  it('exits 3 when the server stops reading its input', async () => {
    const g = startGate({ policy: POLICY, mode: 'noread', cliArgs: ['--timeout', '500'] });
    g.send(init(0));
    await g.answer(0);
    const big = 'x'.repeat(60_000);
    for (let i = 1; i <= 8; i++) g.send(call(i, 'search', { q: big }));
    expect(await g.exited).toBe(3);
    const messages = g.stdout().map((l) => (l as { error?: { message: string } }).error?.message);
    expect(messages).toContain('server stopped reading its input');
    // Every request was answered exactly once.
    expect(g.stdout().filter((l) => (l as { id: unknown }).id !== 0)).toHaveLength(8);
    expect(g.stderr()).toMatch(/stopped reading its input/);
  });

  it.each([
    ['SIGTERM', 143],
    ['SIGHUP', 129],
    ['SIGINT', 0],
  ] as const)('%s ends the session with status %i', async (sig, code) => {
    const g = startGate({ policy: POLICY });
    g.send(init(0));
    await g.answer(0);
    g.proc.kill(sig);
    expect(await g.exited).toBe(code);
  });

  it('a second SIGTERM does not wait out --grace', async () => {
    const g = startGate({ policy: POLICY, mode: 'ignoreterm', cliArgs: ['--grace', '20000'] });
    g.send(init(0));
    await g.answer(0);
    const t0 = Date.now();
    g.proc.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    expect(g.proc.exitCode).toBeNull(); // still winding down: the server ignores SIGTERM
    g.proc.kill('SIGTERM');
    expect(await g.exited).toBe(143);
    expect(Date.now() - t0).toBeLessThan(5000);
  });

  it('stops a server that outlives --grace and still exits 0', async () => {
    const g = startGate({ policy: POLICY, mode: 'ignoreterm', cliArgs: ['--grace', '100'] });
    g.send(init(0));
    await g.answer(0);
    const t0 = Date.now();
    g.end();
    expect(await g.exited).toBe(0);
    expect(Date.now() - t0).toBeGreaterThan(90);
    expect(g.stderr()).toMatch(/did not exit within 100 ms/);
  }, 15_000);

  it('exits quietly when the reader of its output goes away', async () => {
    const g = startGate({ policy: POLICY });
    g.proc.stdout!.destroy();
    g.send({ jsonrpc: '2.0', id: 1, method: 'ping' });
    g.send({ jsonrpc: '2.0', id: 2, method: 'ping' });
    expect(await g.exited).toBe(0);
  });

  it('a client that sends nothing is a clean session', async () => {
    const g = startGate({ policy: POLICY });
    g.end();
    expect(await g.exited).toBe(0);
  });
});

describe.skipIf(!built)('leash mcp: unusable input is exit 2 and starts nothing', () => {
  it.each([
    ['an unknown policy key', 'tools: { alow: [x] }\n', /unknown key 'alow' \(did you mean 'allow'\?\)/],
    ['a duplicate policy key', 'tools:\n  deny: [a]\n  deny: [b]\n', /policy refused/],
    ['a bad regex', 'tools: { args: { t: { deny: ["("] } } }\n', /bad regex/],
    ['a glob args key', 'tools: { args: { "delete_*": { deny: ["x"] } } }\n', /names exactly one tool/],
  ])('refuses %s', async (_n, policy, msg) => {
    const g = startGate({ policy });
    g.end();
    expect(await g.exited).toBe(2);
    expect(g.stderr()).toMatch(msg);
    expect(fs.existsSync(g.record)).toBe(false);
  });

  it('refuses a server that cannot be run', async () => {
    const d = tmpdir();
    const noexec = path.join(d, 'noexec.sh');
    fs.writeFileSync(noexec, 'echo hi\n', { mode: 0o755 });
    for (const server of [['no-such-server-xyz'], [d], [noexec]]) {
      const g = startGate({ policy: POLICY, server });
      g.end();
      expect(await g.exited).toBe(2);
      expect(g.stderr()).toMatch(/cannot run the server/);
    }
  });

  it.each([['nan'], ['-1'], ['inf']])('refuses --timeout %s', async (v) => {
    const g = startGate({ policy: POLICY, cliArgs: ['--timeout', v] });
    g.end();
    expect(await g.exited).toBe(2);
  });

  it('refuses a closed standard input', async () => {
    const { spawnSync } = await import('node:child_process');
    const d = tmpdir();
    fs.writeFileSync(path.join(d, 'p.yaml'), POLICY);
    const r = spawnSync(
      '/bin/sh',
      ['-c', `"${process.execPath}" "${CLI}" mcp --policy p.yaml -- "${process.execPath}" "${FAKE}" <&-`],
      {
        cwd: d,
        encoding: 'utf8',
      },
    );
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/standard input is closed/);
  });

  it('every refusal is one `leash: <message> [<code>]` line with a catalogue code, as the other commands', async () => {
    const d = tmpdir();
    const cases: [string, Parameters<typeof startGate>[0]][] = [
      ['config_invalid', { policy: 'tools: { mode: maybe }\n' }],
      ['mcp_server_unrunnable', { policy: POLICY, server: ['no-such-server-xyz'] }],
      ['usage', { policy: POLICY, cliArgs: ['--timeout', 'nan'] }],
      ['mcp_service_unreachable', { policy: null, cliArgs: ['--socket', path.join(d, 'none.sock')] }],
    ];
    for (const [code, opts] of cases) {
      const g = startGate(opts);
      g.end();
      expect(await g.exited, code).toBe(ERROR_CODES[code as keyof typeof ERROR_CODES]);
      expect(g.stderr(), code).toMatch(new RegExp(`^leash: .+ \\[${code}\\]$`, 'm'));
      expect(g.stderr(), code).not.toMatch(/^leash mcp:/m);
    }
  });

  it('refuses to start without --policy when the service is not running', async () => {
    const d = tmpdir();
    const g = startGate({ policy: null, cliArgs: ['--socket', path.join(d, 'none.sock')] });
    g.end();
    expect(await g.exited).toBe(2);
    expect(g.stderr()).toMatch(/cannot reach the leash service/);
  });
});
