/**
 * Issue #38: a listing answer (directory_tree, search_files, list_directory*) has what a rule protects
 * taken out, by the local judge and through the service's socket alike.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GATE_DEFAULTS } from '../../../src/tools/judge/fields.js';
import { fromPlain, toPlain } from '../../../src/formats/json.js';
import { compileGatePolicy } from '../../../src/tools/judge/compile.js';
import { createLocalJudge, type GateJudgment } from '../../../src/tools/judge/judge.js';
import { connectToolsJudge, createToolsSocketServer } from '../../../src/tools/remote/socket.js';
import { ServerModel } from '../../../src/tools/judge/operations/model.js';
import { GATE_ENGINE } from '../../../src/tools/judge/compile.js';

const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'l38-listing-')));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
const ws = path.join(dir, 'ws');

const policy = compileGatePolicy(
  {
    mode: 'whitelist',
    allow: [],
    deny: [],
    inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' },
    ...GATE_DEFAULTS,
    mapping: 'filesystem',
    default: 'deny',
    rules: [
      { id: 'no-ssh', effect: 'deny', operations: ['fs.*'], resources: ['**/.ssh'] },
      { id: 'ws', effect: 'allow', operations: ['fs.read'], resources: ['${workspace}/**'] },
    ],
  },
  'closed',
  GATE_ENGINE,
  { workspace: ws, home: '/h' },
);

const tree = JSON.stringify(
  [
    { name: 'a.txt', type: 'file' },
    { name: '.ssh', type: 'directory', children: [{ name: 'id_ed25519', type: 'file' }] },
    { name: 'src', type: 'directory', children: [{ name: '.ssh', type: 'directory', children: [] }] },
  ],
  null,
  2,
);
const answers = {
  directory_tree: tree,
  search_files: [`${ws}/a.txt`, `${ws}/.ssh/id_ed25519`, `${ws}/src`].join('\n'),
  list_directory: ['[FILE] a.txt', '[DIR] .ssh', '[DIR] src'].join('\n'),
  list_directory_with_sizes: ['[FILE] a.txt                             12 B', '[DIR] .ssh', '', 'Total: 1 files'].join(
    '\n',
  ),
};

const call = (name: string) => fromPlain({ name, arguments: { path: ws } });
const result = (text: string) => fromPlain({ content: [{ type: 'text', text }], structuredContent: { content: text } });

async function check(j: GateJudgment, name: keyof typeof answers) {
  expect(j.action, name).toBe('allow');
  expect(j.filter, name).toBeDefined();
  const r = result(answers[name]);
  expect(await j.filter!(r), name).toBe(true);
  const out = JSON.stringify(toPlain(r));
  expect(out, name).toContain('a.txt');
  expect(out, name).not.toContain('.ssh');
  expect(out, name).not.toContain('id_ed25519');
}

describe('listing answers', () => {
  it('the local judge takes protected entries out of every listing form', async () => {
    const judge = createLocalJudge({ policy, log: { write: () => 'ref' }, uid: 0 });
    judge.attachModel?.(ServerModel.rootedAt(ws));
    for (const name of Object.keys(answers) as (keyof typeof answers)[])
      await check((await judge.judge('tools/call', call(name), false)) as GateJudgment, name);
    judge.close?.();
  });

  it('through the service socket too: the gate asks about the entries it was given', async () => {
    const sock = path.join(dir, 'tools.sock');
    const srv = await createToolsSocketServer({
      path: sock,
      policyForUid: () => policy,
      log: { write: () => 'ref' },
      peerUid: () => 4242,
    });
    try {
      const judge = await connectToolsJudge(sock);
      judge.attachModel?.(ServerModel.rootedAt(ws));
      for (const name of Object.keys(answers) as (keyof typeof answers)[])
        await check(await judge.judge('tools/call', call(name), false), name);
      judge.close?.();
    } finally {
      await srv.close();
    }
  });
});
