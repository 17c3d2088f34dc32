/**
 * After an allow: connect upstream and move the bytes, with splice(2) on the addon's pump thread (the default) or a
 * Node pipe; plain HTTP through the request gate (http-gate.ts). Owns the upstream socket's lifetime and how an end
 * or a reset on one side reaches the other; knows nothing of policy. The first bytes the proxy peeked are written
 * upstream before anything else; anything the upstream already sent (a server that speaks first) reaches the agent
 * before the pump takes over.
 */
import fs from 'node:fs';
import net from 'node:net';
import { HttpRequestGate, refusalResponse, upgradeAgreed, type GateRefusal, type GateStep } from './http-gate.js';
import { createSplicePump, stopReading, type SplicePump, type SpliceResult } from './splice.js';
import { createForgetter, type Forgetter } from './forget.js';
import type { SplicerInstance } from '../addon.js';

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
  /**
   * Starts connecting upstream for `client` (tracked under `owner`); a failure resets the client. Until `splice` or
   * `http` takes over, what the upstream sends is passed to the client at once (a server that speaks first).
   */
  connect(owner: RelayOwner, client: net.Socket, host: string, port: number): net.Socket;
  /** Once `up` is connected (waits for it): writes `head`, then splices (or pipes) both directions. */
  splice(owner: RelayOwner, client: net.Socket, up: net.Socket, head: Buffer): void;
  /**
   * Plain HTTP: every request from the client goes through `gate` (its own Host judged); a refused one is answered
   * (403/400) after the responses before it, and the connection closed. `onRefused` writes the decision line.
   */
  http(
    owner: RelayOwner,
    client: net.Socket,
    up: net.Socket,
    head: Buffer,
    gate: HttpRequestGate,
    onRefused: (r: GateRefusal) => void,
  ): void;
  /**
   * The native acceptor's path: the pump connects to host:port and splices the client descriptor `fd`
   * (what it still holds, the peeked first bytes, goes first) with it. Both descriptors are closed here when the
   * pair ends (reset both ways after a reset, the client reset when the upstream never connected); `onEnd` then.
   * False when there is no pump (the caller keeps the descriptor).
   */
  spliceFd(owner: RelayOwner, fd: number, host: string, port: number, onEnd: () => void): boolean;
  /** Ends an owner's connections: spliced pairs are aborted (the pump's report destroys them), the rest destroyed. */
  end(owner: RelayOwner): void;
  /** The pump when it runs inline on this loop (the native verdict path uses it), else null. */
  splicer(): SplicerInstance | null;
  /** Waits for aborted pairs to report, then stops the pump thread. */
  close(): Promise<void>;
}

export function createRelay(o: {
  splice: boolean;
  connectTimeoutMs: number;
  onError: (err: Error, ctx: { uid: number; stage: string }) => void;
  /** How a reset is given (and the connection's conntrack entry deleted); one of its own by default. */
  forget?: Forgetter;
}): Relay {
  const forget = o.forget ?? createForgetter(o.onError);
  const pump = o.splice ? createSplicePump() : null;
  const pumped = new WeakSet<net.Socket>();
  /** Upstream sockets still in their early phase (bytes passed straight to the client), with that listener. */
  const early = new WeakMap<net.Socket, (d: Buffer) => void>();

  /** Ends the early phase: no more bytes are passed by the early listener. */
  function endEarly(up: net.Socket): void {
    const l = early.get(up);
    if (l) {
      up.off('data', l);
      early.delete(up);
    }
    up.pause();
  }

  function spliced(e: RelayOwner, client: net.Socket, up: net.Socket, head: Buffer): void {
    // Nothing more is read by Node from here on: the pump thread owns both directions.
    endEarly(up);
    const rest = stopReading(client);
    const first = rest.length ? Buffer.concat([head, rest]) : head;
    const go = () => {
      if (client.destroyed || up.destroyed) {
        client.destroy();
        up.destroy();
        return;
      }
      // What the upstream sent that Node already read goes to the client before the pump writes after it.
      const back = stopReading(up);
      const start = () => {
        if (client.destroyed || up.destroyed) {
          client.destroy();
          up.destroy();
          return;
        }
        let started: ReturnType<SplicePump['start']>;
        try {
          started = pump!.start(client, up);
        } catch (err) {
          // Out of descriptors or memory for this one (epoll_ctl ENOMEM, ...): it is refused, the rest go on.
          o.onError(err as Error, { uid: e.uid, stage: 'splice' });
          forget.reset(client, 'reply', e.uid);
          forget.reset(up, 'orig', e.uid);
          return;
        }
        pumped.add(client);
        pumped.add(up);
        const { id, done } = started;
        e.spliced.add(id);
        void done.then((r) => {
          e.spliced.delete(id);
          pumped.delete(client);
          pumped.delete(up);
          // A reset on either side is passed on as a reset on both.
          if (r.error && r.error !== 'ECANCELED') {
            if (r.error === 'EMFILE' || r.error === 'ENFILE' || r.error === 'ENOMEM')
              o.onError(Object.assign(new Error(`splice: ${r.error}`), { code: r.error }), {
                uid: e.uid,
                stage: 'splice',
              });
            forget.reset(client, 'reply', e.uid);
            forget.reset(up, 'orig', e.uid);
          } else {
            client.destroy();
            up.destroy();
          }
        });
      };
      if (back.length) client.write(back, start);
      else start();
    };
    if (first.length) up.write(first, go);
    else go();
  }

  function connect(e: RelayOwner, client: net.Socket, host: string, port: number): net.Socket {
    const up = net.connect({ host, port, allowHalfOpen: true, noDelay: true });
    e.sockets.add(up);
    up.on('close', () => e.sockets.delete(up));
    const timer = setTimeout(() => up.destroy(new Error('connect timeout')), o.connectTimeoutMs);
    up.on('error', (err) => {
      clearTimeout(timer);
      o.onError(err, { uid: e.uid, stage: 'upstream' });
      if (!pumped.has(client)) forget.reset(client, 'reply', e.uid);
    });
    client.on('error', () => {
      if (!pumped.has(up)) up.destroy();
    });
    client.on('close', () => {
      if (!pumped.has(up) && early.has(up)) up.destroy();
    });
    up.once('connect', () => {
      clearTimeout(timer);
      if (client.destroyed) up.destroy();
    });
    // Early phase: a server that speaks first reaches the agent at once (with back-pressure).
    const onData = (d: Buffer) => {
      if (!client.write(d)) {
        up.pause();
        client.once('drain', () => {
          if (early.has(up)) up.resume();
        });
      }
    };
    early.set(up, onData);
    up.on('data', onData);
    up.once('end', () => {
      if (early.has(up) && !client.destroyed) client.end();
    });
    return up;
  }

  function relayBoth(e: RelayOwner, client: net.Socket, up: net.Socket, head: Buffer): void {
    whenConnected(up, () => {
      if (client.destroyed) return;
      if (pump) return spliced(e, client, up, head);
      endEarly(up);
      piped(client, up, head);
    });
  }

  return {
    start: (e, client, host, port, head) => relayBoth(e, client, connect(e, client, host, port), head),
    connect,
    splice: relayBoth,
    http(_e, client, up, head, gate, onRefused) {
      whenConnected(up, () => {
        endEarly(up);
        if (client.destroyed) return void up.destroy();
        gateHttp(client, up, head, gate, onRefused);
      });
    },
    spliceFd(e, fd, host, port, onEnd) {
      if (!pump) return false;
      let started: ReturnType<SplicePump['connect']>;
      try {
        // closeOnClean: a connection that ends cleanly is closed by the pump (nothing of it left to reset here).
        started = pump.connect(fd, host, port, o.connectTimeoutMs, true);
      } catch (err) {
        // No socket for the upstream (EMFILE, ENFILE, ENOMEM): this connection is refused, the rest go on.
        o.onError(err as Error, { uid: e.uid, stage: 'splice' });
        forget.resetFd(fd, 'reply', e.uid);
        onEnd();
        return true;
      }
      const { id, upFd, done } = started;
      e.spliced.add(id);
      void done.then((r) => {
        e.spliced.delete(id);
        endSplicedFds(r, fd, upFd, `${host}:${port}`, e.uid, o.onError, forget);
        onEnd();
      });
      return true;
    },
    splicer: () => pump?.native ?? null,
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

/** What a paused socket's stream buffer holds (libuv keeps reading; the bytes are returned, not lost). */
function stopReadingSoft(s: net.Socket): Buffer {
  const parts: Buffer[] = [];
  for (let chunk = s.read() as Buffer | null; chunk !== null; chunk = s.read() as Buffer | null) parts.push(chunk);
  return Buffer.concat(parts);
}

function whenConnected(up: net.Socket, fn: () => void): void {
  if (up.connecting) up.once('connect', fn);
  else if (!up.destroyed) fn();
}

function piped(client: net.Socket, up: net.Socket, head: Buffer): void {
  if (head.length) up.write(head);
  // pipe() ends the destination when the source ends: a half-close is passed on, the other direction
  // keeps flowing (allowHalfOpen on both sockets).
  client.pipe(up);
  up.pipe(client);
  client.resume();
  up.resume();
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

/** Plain HTTP, once `up` is connected: every request of the client through `gate`, a refused one answered last. */
function gateHttp(
  client: net.Socket,
  up: net.Socket,
  head: Buffer,
  gate: HttpRequestGate,
  onRefused: (r: GateRefusal) => void,
): void {
  // Anything the client sent that Node already read (its stream buffer) follows the head; read before a
  // 'data' listener is attached (read() would emit it there too).
  const rest = stopReadingSoft(client);
  let refusal: GateRefusal | null = null;
  let upEnded = false;
  let waitingUpgrade = false;
  let firstBack = Buffer.alloc(0);
  let timer: NodeJS.Timeout | null = null;
  const finishRefusal = () => {
    if (timer) clearTimeout(timer);
    if (!client.destroyed) client.end(refusalResponse(refusal!), () => client.destroy());
    up.destroy();
  };
  const apply = (step: GateStep) => {
    for (const b of step.forward) if (b.length && !up.write(b)) client.pause();
    if (step.awaitUpgrade) waitingUpgrade = true;
    if (step.refused && !refusal) {
      refusal = step.refused;
      onRefused(refusal);
      client.pause();
      // The responses to the requests before it come first: the server finishes them after our FIN, then
      // closes; the refusal is the last response. A server that lingers gets two seconds.
      if (upEnded) finishRefusal();
      else {
        up.end();
        timer = setTimeout(finishRefusal, 2000);
      }
    }
  };
  up.on('drain', () => {
    if (!refusal) client.resume();
  });
  client.on('drain', () => up.resume());
  client.on('data', (d: Buffer) => {
    if (!refusal) apply(gate.push(d));
  });
  client.on('end', () => {
    if (!refusal) up.end();
  });
  up.on('data', (d: Buffer) => {
    if (waitingUpgrade) {
      firstBack = Buffer.concat([firstBack, d]);
      const agreed = upgradeAgreed(firstBack, gate.connect);
      if (agreed !== null) {
        waitingUpgrade = false;
        apply(gate.upgraded(agreed));
      }
    }
    if (!client.write(d)) up.pause();
  });
  up.on('end', () => {
    upEnded = true;
    if (refusal) finishRefusal();
    else client.end();
  });
  up.on('close', () => {
    if (!refusal) client.destroy();
  });
  client.on('close', () => up.destroy());
  apply(gate.push(head));
  if (rest.length && !refusal) apply(gate.push(rest));
  // A half-close that came with the request was read during the peek: its 'end' is gone, the server still gets it.
  if (client.readableEnded && !refusal) up.end();
  client.resume();
  up.resume();
}

/** Closes (or, after a failure, resets) a native pair's two descriptors once the pump reported its end. */
export function endSplicedFds(
  r: SpliceResult,
  fd: number,
  upFd: number,
  to: string,
  uid: number,
  onError: (err: Error, ctx: { uid: number; stage: string }) => void,
  forget: Forgetter,
): void {
  if (!r.connected) {
    if (r.error !== 'ECANCELED')
      onError(Object.assign(new Error(`connect ${r.error} ${to}`), { code: r.error }), {
        uid,
        stage: 'upstream',
      });
    if (r.error === 'ECANCELED') fs.closeSync(fd);
    else forget.resetFd(fd, 'reply', uid);
    fs.closeSync(upFd);
  } else if (r.error && r.error !== 'ECANCELED') {
    if (r.error === 'EMFILE' || r.error === 'ENFILE' || r.error === 'ENOMEM')
      onError(Object.assign(new Error(`splice: ${r.error}`), { code: r.error }), {
        uid,
        stage: 'splice',
      });
    // A reset on either side is passed on as a reset on both.
    forget.resetFd(fd, 'reply', uid);
    forget.resetFd(upFd, 'orig', uid);
  } else if (!r.closed) {
    fs.closeSync(fd);
    fs.closeSync(upFd);
  }
}
