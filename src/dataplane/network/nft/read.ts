import { LeashError } from '../../../errors.js';
import { nativeProxy } from '../../../native.js';
import type { NftReadAsk, NftReadTable } from '../addon.js';
import {
  ALL_TABLES,
  chainName,
  FILTER_TABLE,
  GUARD_CHAIN,
  key,
  MAP,
  type RulesetState,
  type TableState,
} from './render.js';
import type { Runner } from './run.js';

/**
 * Reading the kernel's state of the leash tables: from the kernel itself (netlink, native/proxy/nftread.cc) where it
 * can, else through the nft program. What the reads return is what render.ts compares and renders against.
 */

interface NftJsonRule {
  family: string;
  table: string;
  chain: string;
  handle: number;
  comment?: string;
  expr: unknown[];
}

function isDispatch(rule: NftJsonRule): boolean {
  // Exactly: meta skuid vmap @agents. Anything else in the hooked chain is foreign.
  if (rule.expr.length !== 1) return false;
  const v = (rule.expr[0] as { vmap?: { key?: { meta?: { key?: string } }; data?: unknown } }).vmap;
  return v?.key?.meta?.key === 'skuid' && v.data === `@${MAP}`;
}

/** One map element as nft -j prints it: `[uid, {"jump": {"target": "agent_uid"}}]`. */
function element(e: unknown): [number, string] | null {
  if (!Array.isArray(e) || e.length !== 2) return null;
  const k = typeof e[0] === 'number' ? e[0] : (e[0] as { elem?: { val?: unknown } })?.elem?.val;
  const target = (e[1] as { jump?: { target?: unknown } })?.jump?.target;
  return typeof k === 'number' && typeof target === 'string' ? [k, target] : null;
}

function emptyState(): RulesetState {
  return new Map(
    ALL_TABLES.map((t) => [
      key(t),
      { exists: false, dispatch: [], elements: new Map(), foreign: [], chains: new Map() } as TableState,
    ]),
  );
}

/** Files the objects of one `nft -j` document under their tables. */
function absorb(state: RulesetState, doc: { nftables?: Record<string, unknown>[] }): void {
  for (const item of doc.nftables ?? []) {
    const obj = (item.table ?? item.chain ?? item.map ?? item.rule) as {
      family?: string;
      table?: string;
      name?: string;
    };
    if (!obj) continue;
    const st = state.get(key({ family: obj.family ?? '', table: item.table ? (obj.name ?? '') : (obj.table ?? '') }));
    if (!st) continue;
    st.exists = true;
    if (item.chain) {
      const name = (item.chain as { name: string }).name;
      if (name !== 'output' && !st.chains.has(name)) st.chains.set(name, []);
    } else if (item.map) {
      const m = item.map as { name: string; elem?: unknown[] };
      if (m.name !== MAP) continue;
      for (const e of m.elem ?? []) {
        const el = element(e);
        if (el) st.elements.set(el[0], el[1]);
      }
    } else if (item.rule) {
      const r = item.rule as NftJsonRule;
      if (r.chain === 'output') (isDispatch(r) ? st.dispatch : st.foreign).push(r.handle);
      else st.chains.set(r.chain, [...(st.chains.get(r.chain) ?? []), r.comment ?? null]);
    }
  }
}

export function nftError(what: string, stderr: string): LeashError {
  return new LeashError('nft_failed', `${what}: ${stderr.trim()}`, { stderr: stderr.trim() });
}

/** Every leash table listed whole (missing tables are reported as such, not as an error). */
async function readWhole(runner: Runner): Promise<RulesetState> {
  const out = emptyState();
  for (const t of ALL_TABLES) {
    const res = await runner(['nft', '-j', '-a', 'list', 'table', t.family, t.table]);
    if (res.code !== 0) {
      if (/No such file or directory|does not exist/i.test(res.stderr)) continue;
      throw nftError(`nft list table ${t.family} ${t.table}`, res.stderr);
    }
    absorb(out, JSON.parse(res.stdout) as { nftables: Record<string, unknown>[] });
  }
  return out;
}

/** The scoped read through the program: one `nft -i` run, a document a line. */
async function readScopedNft(runner: Runner, uids: readonly number[]): Promise<RulesetState> {
  const cmds: string[] = [];
  for (const t of ALL_TABLES) {
    const p = `${t.family} ${t.table}`;
    cmds.push(`list chain ${p} output`, `list map ${p} ${MAP}`);
    if (t === FILTER_TABLE) cmds.push(`list chain ${p} ${GUARD_CHAIN}`);
    for (const uid of uids) cmds.push(`list chain ${p} ${chainName(uid)}`);
  }
  const res = await runner(['nft', '-j', '-a', '-i'], cmds.join('\n') + '\n');
  if (res.code !== 0) return readWhole(runner);
  const errors = res.stderr.split('\n').filter((l) => /Error:/.test(l));
  const other = errors.find((l) => !/No such file or directory/.test(l));
  if (other !== undefined) throw nftError('nft -i (list)', res.stderr);
  const out = emptyState();
  for (const line of res.stdout.split('\n')) {
    if (!line.trim()) continue;
    try {
      absorb(out, JSON.parse(line) as { nftables: Record<string, unknown>[] });
    } catch {
      throw nftError('nft -i (list): not a JSON document', line.slice(0, 200));
    }
  }
  return out;
}

let onFallback: ((why: string) => void) | null = null;
const toldWhy = new Set<string>();

/**
 * Called once per distinct reason when the kernel read cannot be used and the state is read through nft instead
 * (the same answer, ~20x slower at 1,000 subjects): the service logs it, so a slow reconcile has a stated cause.
 */
export function onKernelReadFallback(fn: ((why: string) => void) | null): void {
  onFallback = fn;
}

function fellBack(why: string): null {
  if (!toldWhy.has(why) && toldWhy.size < 16) {
    toldWhy.add(why);
    onFallback?.(why);
  }
  return null;
}

/**
 * The kernel read (native/proxy/nftread.cc) for a runner that says which namespace it acts in, when the addon loads:
 * a few targeted netlink requests instead of an nft run, whose cache fetch (the whole verdict map again for every
 * `list`) made a scoped read cost ~45 ms at 1,000 subjects against ~2 ms here. Null where it cannot be used.
 */
function kernelRead(runner: Runner, chains: string[] | null): RulesetState | null {
  if (runner.netns === undefined) return null;
  let tables: NftReadTable[];
  try {
    const n = nativeProxy();
    if (typeof n.nftRead !== 'function') return fellBack('the native addon was built without nftRead');
    const asks: NftReadAsk[] = ALL_TABLES.map((t) => ({ family: t.family, table: t.table, map: MAP, chains }));
    tables = n.nftRead(runner.netns, asks);
  } catch (e) {
    // No addon, or the kernel refused the read: the program's read says what is wrong with the ruleset, if anything.
    return fellBack(e instanceof Error ? e.message : String(e));
  }
  const out = emptyState();
  ALL_TABLES.forEach((t, i) => {
    const r = tables[i]!;
    const st = out.get(key(t))!;
    if (!r.exists) return;
    st.exists = true;
    for (const c of r.chains) if (c !== 'output') st.chains.set(c, []);
    for (const rule of r.rules) {
      if (rule.chain === 'output') (rule.dispatch ? st.dispatch : st.foreign).push(rule.handle);
      else {
        const list = st.chains.get(rule.chain);
        if (list) list.push(rule.comment);
        else st.chains.set(rule.chain, [rule.comment]);
      }
    }
    for (const [u, c] of r.elements) st.elements.set(u, c);
  });
  return out;
}

/**
 * Reads the leash tables. With `uids`, only what applying or releasing those subjects needs: each table's hooked
 * chain and dispatch map, and those subjects' own chains. Without, every table whole. Both from the kernel when
 * the runner names its namespace and the addon loads; else through the program: a scoped read is one `nft -i` run
 * (a list of something absent is an ENOENT on stderr, which means "not there"), and an nft that cannot run `-i`
 * (built without its CLI) is read whole instead.
 */
export async function readState(runner: Runner, uids?: readonly number[]): Promise<RulesetState> {
  // The hooked chains (the guard's too: absent from the nat tables, which is no error) and each subject's own.
  const chains = uids ? ['output', GUARD_CHAIN, ...uids.map(chainName)] : null;
  return kernelRead(runner, chains) ?? readStateByProgram(runner, uids);
}

/** The same read through the program only (the tests compare it with the kernel read). */
export async function readStateByProgram(runner: Runner, uids?: readonly number[]): Promise<RulesetState> {
  return uids ? readScopedNft(runner, uids) : readWhole(runner);
}

/** The UIDs that have a chain or a map element in any leash table (of a whole read). */
export function appliedUids(state: RulesetState): number[] {
  const uids = new Set<number>();
  for (const st of state.values()) {
    for (const u of st.elements.keys()) uids.add(u);
    for (const c of st.chains.keys()) {
      const m = /^agent_(\d+)$/.exec(c);
      if (m) uids.add(Number(m[1]));
    }
  }
  return [...uids].sort((a, b) => a - b);
}
