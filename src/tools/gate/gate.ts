/**
 * The MCP stdio gate: spawns the server, relays newline-delimited JSON-RPC both ways, parses every
 * message strictly and forwards only its own re-serialisation, polices tool calls through a judge,
 * and ends with an exit status a supervisor can rely on (0 clean, 3 the server failed, 143/129
 * stopped by a signal).
 *
 * This file starts the server and wires the pipes to the parts in gate/: state.ts (the one
 * per-gate state object: its line readers and sequencers), lines.ts (line limit, output queue),
 * output.ts (flushing, back-pressure), client.ts (client → server: parsed, judged, forwarded or
 * answered), server.ts (server → client, tools/list filtering), deadlines.ts (per-request
 * time-outs), lifecycle.ts (shutdown, exit status, signals). A whole `leash mcp` run is ./run.ts.
 */
import { spawn } from 'node:child_process';
import { nativeLineScanner } from './scan.js';
import {
  interrupt,
  onClientEnd,
  onClientError,
  onOutputError,
  onServerExit,
  onServerOutEnd,
  onSpawnError,
  terminate,
} from './lifecycle.js';
import { GateState } from './state.js';
import type { McpGate, McpGateOptions } from './types.js';

export { MAX_LINE } from './lines.js';
export type { GateObserver, McpGate, McpGateOptions } from './types.js';

/** Starts the server and the relay. */
export function createMcpGate(o: McpGateOptions): McpGate {
  const scanner = o.scanner === undefined ? nativeLineScanner() : o.scanner;
  const [cmd, ...args] = o.command;
  const child = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'inherit'], env: o.env ?? process.env });
  const g = new GateState(o, child, scanner);
  child.on('error', (e: NodeJS.ErrnoException) => onSpawnError(g, e));
  g.sin.on('error', () => {
    /* EPIPE: the server is gone; 'exit' tells the rest */
  });
  o.output.on('error', () => onOutputError(g));
  child.on('exit', () => onServerExit(g));
  g.sout.on('data', (c: Buffer) => g.serverLines.push(c));
  g.sout.on('end', () => onServerOutEnd(g));
  g.sout.on('error', () => undefined);
  o.input.on('data', g.onInput);
  o.input.on('end', () => onClientEnd(g));
  o.input.on('error', () => onClientError(g));
  return {
    done: g.done,
    terminate: (code: number) => terminate(g, code),
    interrupt: () => interrupt(g),
  };
}
