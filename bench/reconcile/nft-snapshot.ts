/** bench/reconcile's view of nft: `nft -a -j list ruleset` as objects attributed to a UID, and what changed. */
// Snapshots: every chain and rule, identified by family/table/chain/handle, and every dispatch map element
// (by its UID and the chain it jumps to), attributed to a UID.
export interface NftObj {
  id: string;
  uid: number | null;
}
export function parseSnapshot(json: string): Map<string, NftObj> {
  const doc = JSON.parse(json) as { nftables: Record<string, Record<string, unknown>>[] };
  const out = new Map<string, NftObj>();
  const uidOfChain = (c: string) => {
    const m = /^agent_(\d+)$/.exec(c);
    return m ? Number(m[1]) : null;
  };
  for (const item of doc.nftables) {
    if (item.chain) {
      const c = item.chain as { family: string; table: string; name: string; handle: number };
      const id = `chain ${c.family} ${c.table} ${c.name} #${c.handle}`;
      out.set(id, { id, uid: uidOfChain(c.name) });
    } else if (item.rule) {
      const rl = item.rule as { family: string; table: string; chain: string; handle: number; comment?: string };
      const id = `rule ${rl.family} ${rl.table} ${rl.chain} #${rl.handle}`;
      const m = /^leash:(\d+)/.exec(rl.comment ?? '');
      out.set(id, { id, uid: uidOfChain(rl.chain) ?? (m ? Number(m[1]) : null) });
    } else if (item.map) {
      const mp = item.map as { family: string; table: string; name: string; elem?: [unknown, unknown][] };
      for (const [k, v] of mp.elem ?? []) {
        const id = `element ${mp.family} ${mp.table} ${mp.name} ${JSON.stringify(k)}:${JSON.stringify(v)}`;
        out.set(id, { id, uid: typeof k === 'number' ? k : null });
      }
    }
  }
  return out;
}
export interface Touch {
  added: number;
  removed: number;
  uids: Set<number | 'shared'>;
}
export function diff(before: Map<string, NftObj>, after: Map<string, NftObj>): Touch {
  const t: Touch = { added: 0, removed: 0, uids: new Set() };
  for (const [id, o] of after)
    if (!before.has(id)) {
      t.added++;
      t.uids.add(o.uid ?? 'shared');
    }
  for (const [id, o] of before)
    if (!after.has(id)) {
      t.removed++;
      t.uids.add(o.uid ?? 'shared');
    }
  return t;
}
