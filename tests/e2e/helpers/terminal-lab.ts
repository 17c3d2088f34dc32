import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { onTestFinished } from 'vitest';
import { stringify } from 'yaml';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const leashBin = path.join(root, 'dist', 'src', 'cli', 'main.js');

export function requireBuild(): void {
  if (!fs.existsSync(leashBin)) throw new Error(`${leashBin} missing: run "npm run build" before the e2e tests`);
}

export interface Envelope {
  ok: boolean;
  code: string;
  stdout: string;
  stderr: string;
  exit_code: number | null;
  duration_ms: number;
  policy_reason: string | null;
}

/** A temp directory with a jail inside and room for the audit and decision logs outside it. */
export interface Lab {
  base: string;
  jail: string;
  audit: string;
  decisions: string;
  policyFile: string;
  writePolicy(commands: Record<string, unknown>, extra?: Record<string, unknown>): string;
}

export function makeLab(): Lab {
  const base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'leash-term-e2e-')));
  onTestFinished(() => fs.rmSync(base, { recursive: true, force: true }));
  const jail = path.join(base, 'jail');
  fs.mkdirSync(jail);
  const lab: Lab = {
    base,
    jail,
    audit: path.join(base, 'audit.jsonl'),
    decisions: path.join(base, 'decisions.jsonl'),
    policyFile: path.join(base, 'policy.yaml'),
    writePolicy(commands, extra = {}) {
      fs.writeFileSync(lab.policyFile, stringify({ ...extra, commands }));
      return lab.policyFile;
    },
  };
  return lab;
}

export interface Terminal {
  client: Client;
  call(name: 'run_command' | 'explain_command', args: Record<string, unknown>): Promise<Envelope>;
  stderr(): string;
  pid: number | null;
}

/** Starts `leash terminal` as a child over stdio and connects a real MCP client to it. */
export async function startTerminal(
  lab: Lab,
  opts: { args?: string[]; env?: Record<string, string>; policy?: boolean; decisionLog?: boolean } = {},
): Promise<Terminal> {
  requireBuild();
  const args = [leashBin, 'terminal', '--jail', lab.jail, '--audit', lab.audit];
  if (opts.decisionLog !== false) args.push('--decision-log', lab.decisions);
  if (opts.policy !== false) args.push('--policy', lab.policyFile);
  args.push(...(opts.args ?? []));
  const transport = new StdioClientTransport({
    command: process.execPath,
    args,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: lab.base, ...opts.env },
    stderr: 'pipe',
    cwd: lab.base,
  });
  let err = '';
  transport.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  const client = new Client({ name: 'leash-e2e', version: '1.0.0' });
  await client.connect(transport);
  onTestFinished(() => client.close());
  return {
    client,
    pid: transport.pid,
    stderr: () => err,
    async call(name, a) {
      const r = await client.callTool({ name, arguments: a });
      const env = r.structuredContent as unknown as Envelope;
      // The text content carries the same envelope for clients that ignore structuredContent.
      const text = (r.content as Array<{ type: string; text: string }>)[0]!.text;
      if (JSON.stringify(JSON.parse(text)) !== JSON.stringify(env))
        throw new Error('content and structuredContent differ');
      if (r.isError !== !env.ok) throw new Error('isError disagrees with ok');
      return env;
    },
  };
}

export function readJsonl(file: string): Array<Record<string, unknown>> {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** True when the PID is gone or a zombie (killed, waiting to be reaped by whoever adopted it). */
export function deadOrZombie(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

export function writeScript(file: string, body: string): string {
  fs.writeFileSync(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
  return file;
}

/**
 * Teardown for tests that start background processes: kills, by PID, every process whose cwd lies
 * in this test's own mkdtemp jail (only this test's commands run there), so a failing test leaves
 * nothing running.
 */
export function killLeftovers(jail: string): void {
  onTestFinished(() => {
    for (const entry of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const cwd = fs.readlinkSync(`/proc/${entry}/cwd`);
        if (cwd === jail || cwd.startsWith(jail + '/') || cwd === `${jail} (deleted)`)
          process.kill(Number(entry), 'SIGKILL');
      } catch {
        // gone, or not ours to read
      }
    }
  });
}
