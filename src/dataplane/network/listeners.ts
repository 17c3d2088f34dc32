/**
 * The per-UID listener table the proxy and the DNS forwarder share: one entry per subject, on the
 * subject's own port. The same port again updates the entry in place (a new policy, no listener
 * touched); a new port closes the old listeners before the new ones open; an entry whose listeners
 * cannot open is closed and removed before the error reaches the caller.
 */
export interface ListenerEntry {
  uid: number;
  port: number;
}

export interface ListenerTableHooks<E extends ListenerEntry, S extends ListenerEntry> {
  /** A new entry for a subject (nothing open yet). */
  create(s: S): E;
  /** The same port again: take the subject's new policy (and whatever else it carries). */
  update(cur: E, s: S): void;
  open(e: E): Promise<void>;
  close(e: E): Promise<void>;
}

export interface ListenerTable<E extends ListenerEntry, S extends ListenerEntry> {
  readonly entries: Map<number, E>;
  set(s: S): Promise<void>;
  remove(uid: number): Promise<void>;
}

export function createListenerTable<E extends ListenerEntry, S extends ListenerEntry>(
  hooks: ListenerTableHooks<E, S>,
): ListenerTable<E, S> {
  const entries = new Map<number, E>();
  return {
    entries,
    async set(s) {
      const cur = entries.get(s.uid);
      if (cur && cur.port === s.port) {
        hooks.update(cur, s);
        return;
      }
      if (cur) {
        entries.delete(s.uid);
        await hooks.close(cur);
      }
      const e = hooks.create(s);
      entries.set(s.uid, e);
      try {
        await hooks.open(e);
      } catch (err) {
        entries.delete(s.uid);
        await hooks.close(e);
        throw err;
      }
    },
    async remove(uid) {
      const e = entries.get(uid);
      if (!e) return;
      entries.delete(uid);
      await hooks.close(e);
    },
  };
}
