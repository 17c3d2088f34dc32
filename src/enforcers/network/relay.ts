/**
 * After an allow: connect upstream and move the bytes, with splice(2) on the addon's pump thread (the default) or a
 * Node pipe. Owns the upstream socket's lifetime and how an end or a reset on one side reaches the other; knows
 * nothing of policy. The first bytes the proxy peeked are written upstream before anything else.
 */
import net from 'node:net';
import { createSplicePump, stopReading } from './splice.js';

/** What a relay tracks for one subject's listener, so closing the subject can end its connections. */
export interface RelayOwner {
  uid: number;
  sockets: Set<net.Socket>;
  /** Spliced pairs: their sockets belong to the pump until it reports; closing means aborting them. */
  spliced: Set<number>;
}

export interface Relay {
  /** Connects to host:port, writes `head`, then relays both directions until both end (or either resets). */
  start(owner: RelayOwner, client: net.Socket, host: string, port: number, head: Buffer): void;
  /** Ends an owner's connections: spliced pairs are aborted (the pump's report destroys them), the rest destroyed. */
  end(owner: RelayOwner): void;
  /** Waits for aborted pairs to report, then stops the pump thread. */
  close(): Promise<void>;
}

export function createRelay(o: {
  splice: boolean;
  connectTimeoutMs: number;
  onError: (err: Error, ctx: { uid: number; stage: string }) => void;
}): Relay {
  const pump = o.splice ? createSplicePump() : null;
  const pumped = new WeakSet<net.Socket>();

  function spliced(e: RelayOwner, client: net.Socket, up: net.Socket, head: Buffer): void {
    // Nothing more is read by Node from here on: the pump thread owns both directions.
    up.pause();
    const rest = stopReading(client);
    const first = rest.length ? Buffer.concat([head, rest]) : head;
    const go = () => {
      if (client.destroyed || up.destroyed) {
        client.destroy();
        up.destroy();
        return;
      }
      stopReading(up);
      pumped.add(client);
      pumped.add(up);
      const { id, done } = pump!.start(client, up);
      e.spliced.add(id);
      void done.then((r) => {
        e.spliced.delete(id);
        pumped.delete(client);
        pumped.delete(up);
        // A reset on either side is passed on as a reset on both.
        if (r.error && r.error !== 'ECANCELED') {
          client.resetAndDestroy();
          up.resetAndDestroy();
        } else {
          client.destroy();
          up.destroy();
        }
      });
    };
    if (first.length) up.write(first, go);
    else go();
  }

  function piped(client: net.Socket, up: net.Socket, head: Buffer): void {
    if (head.length) up.write(head);
    // pipe() ends the destination when the source ends: a half-close is passed on, the other direction
    // keeps flowing (allowHalfOpen on both sockets).
    client.pipe(up);
    up.pipe(client);
    client.resume();
    let ended = 0;
    const both = () => {
      if (++ended === 2) {
        client.destroy();
        up.destroy();
      }
    };
    client.on('end', both);
    up.on('end', both);
    client.on('close', () => up.destroy());
    up.on('close', () => {
      if (!client.destroyed && !client.writableEnded) client.destroy();
    });
  }

  return {
    start(e, client, host, port, head) {
      const up = net.connect({ host, port, allowHalfOpen: true, noDelay: true });
      e.sockets.add(up);
      up.on('close', () => e.sockets.delete(up));
      const timer = setTimeout(() => up.destroy(new Error('connect timeout')), o.connectTimeoutMs);
      up.on('error', (err) => {
        clearTimeout(timer);
        o.onError(err, { uid: e.uid, stage: 'upstream' });
        if (!pumped.has(client)) client.resetAndDestroy();
      });
      client.on('error', () => {
        if (!pumped.has(up)) up.destroy();
      });
      up.once('connect', () => {
        clearTimeout(timer);
        if (client.destroyed) {
          up.destroy();
          return;
        }
        if (pump) spliced(e, client, up, head);
        else piped(client, up, head);
      });
    },
    end(e) {
      for (const id of e.spliced) pump?.abort(id);
      for (const s of e.sockets) if (!pumped.has(s)) s.destroy();
    },
    async close() {
      // Let the aborted pairs report (their sockets are destroyed then) before the pump thread stops.
      while (pump && pump.size() > 0) await new Promise((r) => setTimeout(r, 5));
      pump?.close();
    },
  };
}
