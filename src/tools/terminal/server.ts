import { randomUUID } from 'node:crypto';
import type { Readable, Writable } from 'node:stream';
import {
  createLineSplitter,
  INVALID_PARAMS,
  INVALID_REQUEST,
  METHOD_NOT_FOUND,
  parseMessage,
  rpcError,
  type JsonRpcId,
} from '../../formats/jsonrpc.js';
import { LeashError } from '../../errors.js';
import { fromPlain, stringifyAscii } from '../../formats/json.js';
import { result, RESULT_CODES, type CommandResult } from './types.js';

export const SUPPORTED_PROTOCOL_VERSIONS = ['2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05'];

const RESULT_SCHEMA = {
  type: 'object',
  properties: {
    ok: { type: 'boolean' },
    code: {
      type: 'string',
      enum: [...RESULT_CODES],
    },
    stdout: { type: 'string' },
    stderr: { type: 'string' },
    exit_code: { type: ['integer', 'null'] },
    duration_ms: { type: 'integer' },
    policy_reason: { type: ['string', 'null'] },
  },
  required: ['ok', 'code', 'stdout', 'stderr', 'exit_code', 'duration_ms', 'policy_reason'],
};

export const TOOLS = [
  {
    name: 'run_command',
    description:
      'Run one allowlisted command without a shell (no pipes, redirection, chaining or substitution), ' +
      'in a directory inside the jail root, with a time limit, output caps and secret redaction. ' +
      'Denied commands are never executed; every call is audited.',
    inputSchema: {
      type: 'object',
      properties: {
        command: { type: 'string', description: 'One command line, e.g. "git status --short". Quotes group words.' },
        cwd: { type: 'string', description: 'Working directory, relative to the jail root or absolute inside it.' },
      },
      required: ['command'],
      additionalProperties: false,
    },
    outputSchema: RESULT_SCHEMA,
  },
  {
    name: 'explain_command',
    description:
      'Dry run: return the policy verdict run_command would reach, without executing anything ' +
      '(stdout/stderr empty, exit_code null).',
    inputSchema: {
      type: 'object',
      properties: { command: { type: 'string', description: 'The command line to judge.' } },
      required: ['command'],
      additionalProperties: false,
    },
    outputSchema: RESULT_SCHEMA,
  },
];

export interface TerminalHandlers {
  run(command: string, cwd: string | undefined): Promise<CommandResult>;
  explain(command: string): Promise<CommandResult>;
}

export interface TerminalServerOptions {
  input: Readable;
  output: Writable;
  handlers: TerminalHandlers;
  /** Operator-facing diagnostics (stderr). Messages only: stacks never leave the process. */
  warn: (msg: string) => void;
  version?: string;
}

/** A tools/call whose params are not what the tool takes: answered -32602 with the message. */
class ParamsError extends LeashError {
  constructor(message: string) {
    super('terminal_params_invalid', message);
  }
}

function toolArgs(params: Record<string, unknown> | undefined): { name: string; command: string; cwd?: string } {
  const name = params?.name;
  if (typeof name !== 'string') throw new ParamsError('tools/call: name must be a string');
  const args = params?.arguments ?? {};
  if (args === null || typeof args !== 'object' || Array.isArray(args))
    throw new ParamsError('arguments must be an object');
  const a = args as Record<string, unknown>;
  const allowed = name === 'run_command' ? ['command', 'cwd'] : ['command'];
  for (const k of Object.keys(a)) if (!allowed.includes(k)) throw new ParamsError(`unknown argument '${k}'`);
  if (typeof a.command !== 'string') throw new ParamsError('command must be a string');
  if (a.cwd !== undefined && typeof a.cwd !== 'string') throw new ParamsError('cwd must be a string');
  return { name, command: a.command, cwd: a.cwd as string | undefined };
}

/**
 * The MCP server over newline-delimited JSON-RPC: initialize, ping, tools/list, tools/call.
 * run_command calls run one at a time (2 cores, and a queue keeps one command's process group the
 * only one alive); explain_command and everything else are answered at once.
 * Resolves `done` when the input ends and every answer has been written.
 */
export function createTerminalServer(opts: TerminalServerOptions): { done: Promise<void> } {
  let initialized = false;
  let runQueue: Promise<unknown> = Promise.resolve();
  const pending = new Set<Promise<unknown>>();

  // Pure-ASCII output (the gate's writer): U+2028 and friends in command output cannot split a line.
  const send = (msg: Record<string, unknown>): void => {
    opts.output.write(stringifyAscii(fromPlain({ jsonrpc: '2.0', ...msg })) + '\n');
  };
  const reply = (id: JsonRpcId, res: unknown): void => send({ id, result: res });
  const fail = (id: JsonRpcId | null, code: number, message: string): void => send(rpcError(id, code, message));

  const callTool = async (name: string, command: string, cwd: string | undefined): Promise<CommandResult> => {
    try {
      if (name === 'explain_command') return await opts.handlers.explain(command);
      return await opts.handlers.run(command, cwd);
    } catch (e) {
      const ref = randomUUID().slice(0, 8);
      opts.warn(`internal error ${ref} in ${name}: ${(e as Error)?.message ?? String(e)}`);
      return result('INTERNAL_ERROR', `internal error (ref ${ref})`);
    }
  };

  const handle = (id: JsonRpcId, method: string, params: Record<string, unknown> | undefined): void => {
    switch (method) {
      case 'initialize': {
        const asked = params?.protocolVersion;
        const version =
          typeof asked === 'string' && SUPPORTED_PROTOCOL_VERSIONS.includes(asked)
            ? asked
            : SUPPORTED_PROTOCOL_VERSIONS[1];
        initialized = true;
        reply(id, {
          protocolVersion: version,
          capabilities: { tools: { listChanged: false } },
          serverInfo: { name: 'leash-terminal', version: opts.version ?? '0.1.0' },
        });
        return;
      }
      case 'ping':
        reply(id, {});
        return;
    }
    if (!initialized) return fail(id, INVALID_REQUEST, 'Server not initialized');
    switch (method) {
      case 'tools/list':
        reply(id, { tools: TOOLS });
        return;
      case 'tools/call': {
        let a: ReturnType<typeof toolArgs>;
        try {
          a = toolArgs(params);
        } catch (e) {
          return fail(id, INVALID_PARAMS, e instanceof ParamsError ? e.message : 'Invalid params');
        }
        if (a.name !== 'run_command' && a.name !== 'explain_command') {
          return fail(id, INVALID_PARAMS, `Unknown tool: ${a.name.slice(0, 64)}`);
        }
        const work =
          a.name === 'run_command'
            ? (runQueue = runQueue.then(() => callTool(a.name, a.command, a.cwd)))
            : callTool(a.name, a.command, undefined);
        const p = (work as Promise<CommandResult>).then((res) => {
          reply(id, {
            content: [{ type: 'text', text: JSON.stringify(res) }],
            structuredContent: res,
            isError: !res.ok,
          });
        });
        pending.add(p);
        void p.finally(() => pending.delete(p));
        return;
      }
      default:
        fail(id, METHOD_NOT_FOUND, 'Method not found');
    }
  };

  const onLine = (line: Buffer | null): void => {
    if (line === null) return fail(null, INVALID_REQUEST, 'Message too large');
    const m = parseMessage(line);
    switch (m.kind) {
      case 'invalid':
        return fail(m.id, m.code, m.message);
      case 'request':
        return handle(m.id, m.method, m.params);
      case 'notification':
      case 'response':
        // notifications/initialized, cancellations and stray responses need no answer.
        return;
    }
  };

  const splitter = createLineSplitter(onLine);
  const done = new Promise<void>((resolve) => {
    opts.input.on('data', (chunk: Buffer) => splitter.push(chunk));
    opts.input.on('end', () => {
      splitter.end();
      void (async () => {
        while (pending.size > 0) await Promise.allSettled([...pending]);
        resolve();
      })();
    });
  });
  return { done };
}
