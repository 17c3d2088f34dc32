import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { runDemo, type DemoSetup } from '../../src/cli/demo.js';
import { hostRunner } from '../../src/dataplane/network/nft/run.js';
import { canRunLab } from '../lab/index.js';

interface DemoRow {
  surface: string;
  title: string;
  expect: string;
  result: string;
  detail: string;
  decision?: {
    uid: number;
    action: string;
    reason: string;
    rule: string | null;
    ref?: string;
    subject: Record<string, string>;
  };
  decisions: {
    surface: string;
    action: string;
    reason: string;
    rule: string | null;
    subject: Record<string, string>;
  }[];
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe.skipIf(!canRunLab)('leash demo', () => {
  it('runs every step as the default policy says, then leaves no namespace, account, mount or process behind', async () => {
    let text = '';
    let setup: DemoSetup | undefined;
    const code = await runDemo({
      id: 'netdm',
      account: 'leash-demo',
      json: true,
      out: (s) => (text += s),
      onSetup: (s) => (setup = s),
    });
    const json = text.slice(text.indexOf('['));
    const rows = JSON.parse(json) as DemoRow[];
    expect(rows.length).toBeGreaterThanOrEqual(21);
    for (const r of rows) expect({ title: r.title, result: r.result }).toEqual({ title: r.title, result: r.expect });
    expect(rows.find((r) => r.title.startsWith('HTTPS to pastebin'))?.decisions[0]?.reason).toBe('not_allowed');
    // The forged-SNI row says where the allowed connection went (github.com's own address), not just "allowed".
    expect(rows.find((r) => r.title.startsWith('Forged SNI'))?.detail).toMatch(
      /^allowed as github\.com, and sent to github\.com's own address 198\.18\.1\.10: pastebin\.com \(198\.18\.1\.20\) never reached$/,
    );
    // A DNS query to another server is answered by the subject's forwarder: REFUSED, with its decision line.
    const dnsRow = rows.find((r) => r.title.startsWith('DNS query for pastebin.com'));
    expect(dnsRow?.detail).toMatch(/^REFUSED after /);
    expect(dnsRow?.decisions[0]).toMatchObject({ reason: 'not_allowed', subject: { dns: 'pastebin.com', qtype: 'A' } });
    // A dropped datagram is reported with the errno the agent's sendto really got.
    expect(rows.find((r) => r.title.startsWith('UDP/443'))?.detail).toMatch(/^EPERM after /);
    expect(code).toBe(0);

    // The watcher marked the demo's own tmpfs and nothing else.
    const root = setup?.fsRoot;
    expect(root).toMatch(/^\/tmp\/leash-lab-netdm-[^/]+\/fs$/);
    expect(setup!.marks!.length).toBe(1);
    expect(setup!.marks![0]!.startsWith(`${root}/`) || setup!.marks![0] === root).toBe(true);

    // Filesystem and commands rows: EPERM and a block line for the denied, success and an allow line for the rest.
    const fsRows = rows.filter(
      (r) => (r.surface === 'filesystem' || r.surface === 'commands') && !r.title.startsWith('Whitelist:'),
    );
    expect(fsRows.filter((r) => r.surface === 'filesystem').length).toBeGreaterThanOrEqual(4);
    expect(fsRows.filter((r) => r.surface === 'commands').length).toBeGreaterThanOrEqual(3);
    for (const r of fsRows) {
      if (r.expect === 'blocked') {
        expect(r.detail, r.title).toMatch(/^EPERM: .*Operation not permitted/);
        expect(r.decision, r.title).toMatchObject({ action: 'block', reason: 'deny_entry' });
      } else {
        expect(r.detail, r.title).toMatch(/^exit 0: /);
        expect(r.decision, r.title).toMatchObject({ action: 'allow' });
      }
      expect(r.decision?.ref, r.title).toMatch(/^[a-z2-7]{8}$/);
    }
    const row = (prefix: string) => fsRows.find((r) => r.title.startsWith(prefix))!;
    expect(row('Read its own ~/work/notes.txt').detail).toContain('demo notes');
    expect(row('Read <t>/etc/shadow (deny').decision).toMatchObject({
      rule: `${root}/etc/shadow`,
      subject: { path: `${root}/etc/shadow` },
    });
    expect(row('Read <t>/etc/shadow from its own user+mount').decision?.rule).toBe(`${root}/etc/shadow`);
    expect(row('List <t>/etc/sudoers.d').detail).toMatch(/cannot open directory/);
    expect(row('Run <t>/bin/nc').decision).toMatchObject({ rule: 'nc', subject: { binary: `${root}/bin/nc` } });
    expect(row('Run <t>/bin/sudo').decision?.rule).toBe('sudo');
    expect(row('Run <t>/bin/ls').detail).toContain('notes.txt');

    // The commands whitelist on the tmpfs root (chrooted there): the program, its real loader and libc are all on
    // the marked tmpfs. The loader is the host's, copied at its real path; its exec-open for an allowed program is
    // interpreter_of, the loader run directly is interpreter_direct, and a program off the whitelist is not_allowed.
    const loader = `${root}${fs.realpathSync('/lib64/ld-linux-x86-64.so.2')}`;
    const wl = (prefix: string) => rows.find((r) => r.title.startsWith(`Whitelist: ${prefix}`))!;
    const uid = row('Read its own ~/work/notes.txt').decision!.uid;
    const ls = wl('run <t>/bin/ls');
    expect(ls).toMatchObject({ expect: 'allowed', result: 'allowed' });
    expect(ls.detail).toMatch(/^exit 0: notes\.txt/);
    expect(ls.decision).toMatchObject({
      uid,
      action: 'allow',
      reason: 'interpreter_of',
      rule: loader,
      subject: { binary: loader, interpreterOf: `${root}/bin/ls` },
    });
    expect(ls.decisions).toContainEqual(
      expect.objectContaining({
        surface: 'commands',
        action: 'allow',
        reason: 'allow_entry',
        subject: { binary: `${root}/bin/ls` },
      }),
    );
    // The loader's libraries are opened from the tmpfs too (plain opens, judged by the filesystem policy).
    expect(ls.decisions).toContainEqual(
      expect.objectContaining({
        surface: 'filesystem',
        action: 'allow',
        subject: { path: `${root}${fs.realpathSync('/lib/x86_64-linux-gnu/libc.so.6')}` },
      }),
    );
    const trick = wl('<t>/lib64/ld-linux-x86-64.so.2 <t>/bin/nc');
    expect(trick).toMatchObject({ expect: 'blocked', result: 'blocked' });
    expect(trick.detail).toMatch(/^EPERM: .*Operation not permitted/);
    expect(trick.decision).toMatchObject({
      uid,
      action: 'block',
      reason: 'interpreter_direct',
      rule: loader,
      subject: { binary: loader },
    });
    const nc = wl('run <t>/bin/nc');
    expect(nc).toMatchObject({ expect: 'blocked', result: 'blocked' });
    expect(nc.detail).toMatch(/^EPERM: .*Operation not permitted/);
    expect(nc.decision).toMatchObject({
      uid,
      action: 'block',
      reason: 'not_allowed',
      rule: null,
      subject: { binary: `${root}/bin/nc` },
    });
    for (const r of [ls, trick, nc]) expect(r.decision?.ref, r.title).toMatch(/^[a-z2-7]{8}$/);

    // Teardown: nothing left.
    const host = hostRunner();
    expect((await host(['ip', 'netns', 'list'])).stdout).not.toMatch(/lt-netdm-/);
    expect((await host(['id', 'leash-demo'])).code).not.toBe(0);
    expect(fs.readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(root!);
    expect(fs.existsSync(root!)).toBe(false);
    expect(alive(setup!.watcherPid!)).toBe(false);
    expect(alive(setup!.enforcerPid)).toBe(false);
  });
});
