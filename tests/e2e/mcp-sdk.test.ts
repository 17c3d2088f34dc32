import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { call, CLI, init, ROOT, startGate } from './mcp-helpers.js';

const SDK_SERVER = path.join(ROOT, 'tests', 'fixtures', 'mcp', 'sdk-server.mjs');
const sdkInstalled = fs.existsSync(path.join(ROOT, 'node_modules', '@modelcontextprotocol', 'sdk'));

describe.skipIf(!fs.existsSync(CLI) || !sdkInstalled)(
  'leash mcp in front of a real @modelcontextprotocol/sdk server',
  () => {
    it('hides, denies and relays against the SDK server, which never runs a denied tool', async () => {
      const g = startGate({
        policy: `
tools:
  allow: [echo, read_file]
  deny: [delete_all]
  hide_denied: true
  args:
    read_file: { allow: { path: ["^/srv/[a-z]+$"] } }
`,
        server: [process.execPath, SDK_SERVER],
      });
      g.send(init(1));
      const i = (await g.answer(1, 15_000)) as { result: { protocolVersion: string; serverInfo: { name: string } } };
      expect(i.result.serverInfo.name).toBe('sdk-fixture');
      g.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
      g.send({ jsonrpc: '2.0', id: 2, method: 'tools/list' });
      const list = (await g.answer(2)) as { result: { tools: { name: string }[] } };
      expect(list.result.tools.map((t) => t.name).sort()).toEqual(['echo', 'read_file']);
      g.send(call(3, 'echo', { text: 'héllo' }));
      g.send(call(4, 'delete_all'));
      g.send(call(5, 'read_file', { path: '/srv/../etc/passwd' }));
      g.send(call(6, 'read_file', { path: '/srv/data' }));
      g.send(call('7', 'Delete_ALL\u200b'));
      const echo = (await g.answer(3)) as { result: { content: { text: string }[] } };
      expect(echo.result.content[0]!.text).toBe('héllo');
      expect((await g.answer(4)).error).toMatchObject({ code: -32001 });
      expect((await g.answer(5)).error).toMatchObject({ code: -32001, data: { reason: 'arg_not_allowed' } });
      expect((await g.answer(6)).result).toBeDefined();
      expect((await g.answer('7')).error).toMatchObject({ code: -32001 });
      g.end();
      expect(await g.exited).toBe(0);
      const ran = fs
        .readFileSync(g.record, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { tool: string });
      expect(ran.map((r) => r.tool)).toEqual(['echo', 'read_file']);
    });
  },
);
