/**
 * The console's live stream: one producer (the decision log follower, the approvals socket), many
 * browsers, server-sent events. Nothing is buffered per client beyond its socket's own send buffer:
 * a client whose buffer holds more than `highWater` bytes is *sampled* — from then on it gets at
 * most one decision per `sampleMs` and every line it did not get is counted (`dropped`, sent with
 * each sample and shown by the page) — until its buffer drains below `highWater / 4`. Approval
 * events are never sampled (the queue itself is bounded: approvals.max_pending). So the memory held
 * for a client is at most about 2 × highWater whatever the rate and however slow the browser.
 */

/** What the hub writes to: an http.ServerResponse is one. */
export interface StreamSink {
  write(chunk: string): boolean;
  readonly writableLength: number;
  on(ev: 'drain' | 'close', fn: () => void): unknown;
  end(): unknown;
}

/** Which decisions a client asked for (the page's filters); an empty field matches everything. */
export interface StreamFilter {
  uid?: number;
  surface?: string;
  action?: string;
  reason?: string;
}

export interface HubClientStats {
  id: number;
  mode: 'full' | 'sampled';
  delivered: number;
  dropped: number;
  buffered: number;
}

export interface HubStats {
  clients: number;
  published: number;
  delivered: number;
  dropped: number;
  sampledClients: number;
  maxBuffered: number;
}

export interface Hub {
  /** Adds a client; returns its id. It is removed when the sink closes. */
  add(sink: StreamSink, filter: StreamFilter): number;
  /** One decision line (its JSON text and the fields the filters read). */
  publishDecision(text: string, fields: { uid: number; surface: string; action: string; reason: string }): void;
  /** An event every client gets, never sampled (approvals). */
  publishAlways(event: string, json: string): void;
  stats(): HubStats;
  clients(): HubClientStats[];
  /** Called when the client count goes 0 → 1 and 1 → 0 (the console subscribes to approvals meanwhile). */
  onCount(fn: (n: number) => void): void;
  close(): void;
}

interface Client {
  id: number;
  sink: StreamSink;
  filter: StreamFilter;
  sampled: boolean;
  lastSample: number;
  delivered: number;
  dropped: number;
}

/** Whether `x` is an item of the comma-separated `list` (no allocation: this runs per line per browser). */
function inList(list: string, x: string): boolean {
  for (let i = list.indexOf(x); i >= 0; i = list.indexOf(x, i + 1)) {
    const end = i + x.length;
    if ((i === 0 || list.charCodeAt(i - 1) === 44) && (end === list.length || list.charCodeAt(end) === 44)) return true;
  }
  return false;
}

export function matches(f: StreamFilter, d: { uid: number; surface: string; action: string; reason: string }): boolean {
  return (
    (f.uid === undefined || f.uid === d.uid) &&
    (!f.surface || f.surface === d.surface) &&
    (!f.action || f.action === d.action || inList(f.action, d.action)) &&
    (!f.reason || f.reason === d.reason)
  );
}

export function createHub(o: { highWater?: number; sampleMs?: number; now?: () => number } = {}): Hub {
  const highWater = o.highWater ?? 1024 * 1024;
  const low = Math.floor(highWater / 4);
  const sampleMs = o.sampleMs ?? 250;
  const now = o.now ?? Date.now;
  const clients = new Map<number, Client>();
  const countFns: ((n: number) => void)[] = [];
  let nextId = 1;
  let published = 0;
  let delivered = 0;
  let dropped = 0;
  const status = (c: Client) =>
    `event: status\ndata: {"mode":"${c.sampled ? 'sampled' : 'full'}","dropped":${c.dropped},"delivered":${c.delivered}}\n\n`;
  const heartbeat = setInterval(() => {
    for (const c of clients.values()) c.sink.write(': ping\n\n');
  }, 15_000);
  heartbeat.unref();

  return {
    add(sink, filter) {
      const c: Client = { id: nextId++, sink, filter, sampled: false, lastSample: 0, delivered: 0, dropped: 0 };
      clients.set(c.id, c);
      sink.on('drain', () => {
        if (c.sampled && sink.writableLength <= low) {
          c.sampled = false;
          sink.write(status(c));
        }
      });
      sink.on('close', () => {
        if (clients.delete(c.id)) for (const f of countFns) f(clients.size);
      });
      sink.write(status(c));
      for (const f of countFns) f(clients.size);
      return c.id;
    },
    publishDecision(text, fields) {
      published++;
      const t = now();
      for (const c of clients.values()) {
        if (!matches(c.filter, fields)) continue;
        if (!c.sampled && c.sink.writableLength > highWater) c.sampled = true;
        if (c.sampled) {
          // One line per sampleMs, and never past twice the high-water mark: the bound holds.
          if (t - c.lastSample >= sampleMs && c.sink.writableLength <= 2 * highWater) {
            c.lastSample = t;
            c.delivered++;
            delivered++;
            c.sink.write(`event: decision\ndata: ${text}\n\n${status(c)}`);
          } else {
            c.dropped++;
            dropped++;
          }
          continue;
        }
        c.delivered++;
        delivered++;
        c.sink.write(`event: decision\ndata: ${text}\n\n`);
      }
    },
    publishAlways(event, json) {
      for (const c of clients.values()) c.sink.write(`event: ${event}\ndata: ${json}\n\n`);
    },
    stats() {
      let sampledClients = 0;
      let maxBuffered = 0;
      for (const c of clients.values()) {
        if (c.sampled) sampledClients++;
        maxBuffered = Math.max(maxBuffered, c.sink.writableLength);
      }
      return { clients: clients.size, published, delivered, dropped, sampledClients, maxBuffered };
    },
    clients() {
      return [...clients.values()].map((c) => ({
        id: c.id,
        mode: c.sampled ? 'sampled' : 'full',
        delivered: c.delivered,
        dropped: c.dropped,
        buffered: c.sink.writableLength,
      }));
    },
    onCount(fn) {
      countFns.push(fn);
    },
    close() {
      clearInterval(heartbeat);
      for (const c of clients.values()) c.sink.end();
      clients.clear();
    },
  };
}
