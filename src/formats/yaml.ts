/**
 * The one reader of Leash's policy files (the floor, profiles, a `leash mcp --policy` file, a
 * `leash terminal --policy` file): YAML that means exactly what it says to a person reading it.
 *
 * Refused, each with its own code (docs/config.md "What the file may contain"):
 * - anchors, aliases and merge keys (`&a`, `*a`, `<<:`): an alias used as a key slips past the
 *   duplicate-key check, a merge key brings in keys out of sight (config_alias);
 * - explicit tags and `%TAG` (`!!python/object`, `!foo`, `!!str`): an unknown tag would be dropped
 *   silently, a known one changes a value's type away from what it reads as (config_tag);
 * - a `%YAML` directive other than 1.2: under 1.1 `n:` is the boolean false and `<<` merges
 *   (config_yaml_version);
 * - bytes that are not UTF-8, or a NUL (config_encoding): never turned into U+FFFD silently;
 * - a file over MAX_FILE_BYTES (config_too_large), a string over MAX_ENTRY_CHARS (entry_too_long),
 *   a list or mapping over MAX_LIST_ITEMS (list_too_long), nesting deeper than MAX_DEPTH
 *   (config_too_deep): the file is read with a bounded buffer, so memory and time stay bounded
 *   whatever it holds.
 * Only then is the document turned into plain values (so `toJS()` never meets an alias).
 */
import fs from 'node:fs';
import { isAlias, isMap, isPair, isScalar, isSeq, Lexer, parseDocument, type Document, type Node } from 'yaml';
import { LeashError, type ConfigIssue, type ErrorCode } from '../errors.js';

/** The largest policy file read (bytes). The shipped default is under 4 KiB. */
export const MAX_FILE_BYTES = 1024 * 1024;
/** The longest string (an entry, a key, a pattern), in UTF-16 code units; PATH_MAX is 4096. */
export const MAX_ENTRY_CHARS = 4096;
/** The most items in one list, or keys in one mapping. */
export const MAX_LIST_ITEMS = 10_000;
/** The deepest nesting of lists and mappings (the config itself needs 6). */
export const MAX_DEPTH = 32;
/**
 * The most YAML tokens in one file, counted by the lexer before anything is built: a document
 * costs about 1 KiB of memory per node, so this bounds memory and time whatever the text holds
 * (a 10,000-item block list is about 60,000 tokens).
 */
export const MAX_TOKENS = 250_000;

/** The size caps a text is read under: a policy file's (POLICY_LIMITS) by default, bindings.yaml's own. */
export interface TextLimits {
  maxBytes: number;
  maxListItems: number;
  maxTokens: number;
}
export const POLICY_LIMITS: TextLimits = {
  maxBytes: MAX_FILE_BYTES,
  maxListItems: MAX_LIST_ITEMS,
  maxTokens: MAX_TOKENS,
};

/**
 * Reads a policy file as UTF-8 with a bounded buffer; throws LeashError (config_missing, …). `missing`
 * says what the file is and how to make it, for the config_missing message (default: the floor).
 */
export function readPolicyFile(
  file: string,
  missing = { what: 'config file', hint: 'create it with: leash init --user NAME' },
): string {
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT')
      throw new LeashError('config_missing', `${missing.what} ${file} does not exist (${missing.hint})`, { file });
    // The floor is 0640 root:<user's group>: an operator who is neither reads it as root (docs/cli.md). The
    // policy is not widened for read-only commands; the refusal says how to run them instead.
    const hint =
      code === 'EACCES' && process.getuid?.() !== 0
        ? " (the policy is readable by root and the agent's group only: run it with sudo)"
        : '';
    throw new LeashError(
      'config_unreadable',
      `cannot read config file ${file}: ${code ?? (e as Error).message}${hint}`,
      { file, errno: code },
    );
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile())
      throw new LeashError('config_unreadable', `cannot read config file ${file}: not a regular file`, { file });
    if (st.size > MAX_FILE_BYTES) throw tooLarge(file, st.size);
    // A buffer of the file's size and one byte (a file that grew shows), grown by doubling to one byte past the
    // cap at most: a file that grows while it is read is still bounded. Not one of the cap's size each time: the
    // service reads every subject's profile on each reconcile, and zeroing 1 MiB a file was most of a pass at
    // 1,000 subjects (bench/reconcile). Only the bytes read are ever looked at, so the buffer need not be zeroed.
    let buf = Buffer.allocUnsafe(Math.min(st.size, MAX_FILE_BYTES) + 1);
    let n = 0;
    for (;;) {
      if (n === buf.length) {
        const bigger = Buffer.allocUnsafe(Math.min(buf.length * 2, MAX_FILE_BYTES + 1));
        buf.copy(bigger, 0, 0, n);
        buf = bigger;
      }
      const r = fs.readSync(fd, buf, n, buf.length - n, null);
      if (r === 0) break;
      n += r;
      if (n > MAX_FILE_BYTES) throw tooLarge(file, n);
    }
    return decodeUtf8(buf.subarray(0, n), file);
  } catch (e) {
    if (e instanceof LeashError) throw e;
    const code = (e as NodeJS.ErrnoException).code;
    throw new LeashError('config_unreadable', `cannot read config file ${file}: ${code ?? (e as Error).message}`, {
      file,
      errno: code,
    });
  } finally {
    fs.closeSync(fd);
  }
}

function tooLarge(file: string, size: number, limit = MAX_FILE_BYTES): LeashError {
  return new LeashError(
    'config_too_large',
    `config ${file} is ${size > limit ? 'over ' : ''}${limit} bytes; ${limit === MAX_FILE_BYTES ? 'a policy file' : 'this file'} is at most that`,
    { file, limit },
  );
}

/** Strict UTF-8: an invalid byte is config_encoding at its offset, never U+FFFD. */
export function decodeUtf8(bytes: Uint8Array, source: string): string {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    let offset = 0;
    // Find the first offending byte for the message (a prefix decodes until it).
    for (let lo = 0, hi = bytes.length; lo < hi;) {
      const mid = (lo + hi) >> 1;
      try {
        new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(0, mid + 1), { stream: true });
        lo = mid + 1;
        offset = lo;
      } catch {
        hi = mid;
      }
    }
    // Report the lead byte of a sequence cut short, not the byte that cut it.
    for (let k = 1; k <= 3 && offset - k >= 0; k++) {
      const b = bytes[offset - k]!;
      if (b >= 0xc0) {
        offset -= k;
        break;
      }
      if (b < 0x80) break;
    }
    throw new LeashError('config_encoding', `config ${source} is not UTF-8`, {
      file: source,
      issues: [
        {
          path: `byte ${offset}`,
          message: `0x${(bytes[offset] ?? 0).toString(16).padStart(2, '0')} is not valid UTF-8 (it would be read as U+FFFD)`,
        },
      ],
    });
  }
  return checkText(text, source);
}

/** Text given as a string (a write, a test): the same caps and the NUL check as a file. */
export function checkText(text: string, source: string, limits: TextLimits = POLICY_LIMITS): string {
  if (text.length > limits.maxBytes && Buffer.byteLength(text, 'utf8') > limits.maxBytes)
    throw tooLarge(source, Buffer.byteLength(text, 'utf8'), limits.maxBytes);
  const nul = text.indexOf('\0');
  if (nul >= 0) {
    const line = text.slice(0, nul).split('\n').length;
    throw new LeashError('config_encoding', `config ${source} holds a NUL character`, {
      file: source,
      issues: [{ path: `line ${line}`, message: 'U+0000 (NUL) is not allowed in a policy file' }],
    });
  }
  return text;
}

/**
 * What the reader would refuse before composing a document: the size, a NUL, the token budget, flow nesting.
 * A writer checks what it is about to write with it, so it never writes a file its reader refuses.
 */
export function checkLimits(text: string, source: string, limits: TextLimits): void {
  checkText(text, source, limits);
  if (text.length > limits.maxTokens / 4) preScan(text, source, limits.maxTokens);
}

/** Counts tokens and flow nesting with the lexer alone (cheap), before a document is composed. */
function preScan(text: string, source: string, maxTokens: number): void {
  let n = 0;
  let depth = 0;
  for (const tok of new Lexer().lex(text)) {
    if (++n > maxTokens)
      throw new LeashError('config_too_large', `config ${source} has more than ${maxTokens} YAML tokens`, {
        file: source,
        limit: maxTokens,
        issues: [{ path: '(document)', message: `more than ${maxTokens} YAML tokens (lists too long?)` }],
      });
    if (tok === '[' || tok === '{') {
      if (++depth > MAX_DEPTH)
        throw new LeashError('config_too_deep', `config ${source} ${MESSAGES.config_too_deep}`, {
          file: source,
          issues: [{ path: '(document)', message: `flow collections nested more than ${MAX_DEPTH} levels` }],
        });
    } else if (tok === ']' || tok === '}') depth--;
  }
}

const CODE_RANK: ErrorCode[] = [
  'config_yaml_version',
  'config_alias',
  'config_tag',
  'config_too_deep',
  'list_too_long',
  'entry_too_long',
];

/**
 * Parses policy text into a YAML document and plain values, refusing everything listed at the top.
 * Throws LeashError config_syntax (not YAML), or one of the codes above with every issue found.
 */
export function parseStrictYaml(
  text: string,
  source: string,
  opts: { uniqueKeys?: boolean; limits?: TextLimits } = {},
): { doc: Document; js: unknown } {
  const limits = opts.limits ?? POLICY_LIMITS;
  checkText(text, source, limits);
  // A token takes at least one character, so a short text cannot exceed the budget, and its flow
  // nesting is caught by the walk (the parser itself stops at ~1,000 levels): lex only long ones.
  if (text.length > limits.maxTokens / 4) preScan(text, source, limits.maxTokens);
  // uniqueKeys is off by default so the caller's duplicate walk can name the key by its path; merge
  // is off so `<<` is never special (it is refused below in any case). With uniqueKeys the check is
  // ours (duplicateKeys), not the parser's: the parser compares each key with every earlier one, and
  // a 20,000-key mapping (bindings.yaml) took 8.5 s instead of 1.2 s.
  const doc = parseDocument(text, {
    uniqueKeys: false,
    prettyErrors: true,
    merge: false,
    version: '1.2',
  });
  const found = new Map<ErrorCode, ConfigIssue[]>();
  const add = (code: ErrorCode, path: string, message: string) => {
    const l = found.get(code) ?? [];
    if (l.length < 20) l.push({ path, message });
    found.set(code, l);
  };
  const version = doc.directives?.yaml.explicit ? doc.directives.yaml.version : null;
  if (version !== null && version !== '1.2')
    add('config_yaml_version', '(document)', `%YAML ${version}: only YAML 1.2 is read (1.1 turns n: into false)`);
  if (doc.directives && Object.keys(doc.directives.tags).some((h) => h !== '!' && h !== '!!'))
    add('config_tag', '(document)', '%TAG directives are not allowed');
  if (doc.errors.some((e) => e.code === 'RESOURCE_EXHAUSTION'))
    add('config_too_deep', '(document)', `nested too deep to read (at most ${MAX_DEPTH} levels)`);
  if (doc.errors.length > 0 && found.size === 0) {
    // The parser's later errors follow from its first (one bad indent gives up to four): only the first
    // is the operator's to fix, said the way compilers do, file:line:col.
    const e = doc.errors[0]!;
    const message = e.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '');
    const where = e.linePos ? `${e.linePos[0].line}:${e.linePos[0].col}` : null;
    const issues = [
      { path: where ? `line ${e.linePos![0].line}, column ${e.linePos![0].col}` : '(document)', message },
    ];
    throw new LeashError('config_syntax', `${where ? `${source}:${where}` : source}: ${message} (not valid YAML)`, {
      file: source,
      issues,
      located: true,
    });
  }
  if (opts.uniqueKeys) {
    const dups = duplicateKeys(doc.contents, text);
    if (dups.length > 0)
      throw new LeashError('config_syntax', `config ${source} is not valid YAML`, { file: source, issues: dups });
  }
  if (found.size === 0) walk(doc.contents, [], 0, add, limits.maxListItems);
  for (const w of doc.warnings) {
    // An unresolved tag is the only warning the parser gives on a document that parsed.
    if (found.size === 0) add('config_tag', '(document)', w.message.split('\n')[0]!.replace(/ at line.*$/, ''));
  }
  if (found.size > 0) {
    const code = CODE_RANK.find((c) => found.has(c))!;
    const issues = CODE_RANK.flatMap((c) => found.get(c) ?? []);
    throw new LeashError(code, `config ${source} ${MESSAGES[code as keyof typeof MESSAGES]}`, { file: source, issues });
  }
  const js: unknown = doc.contents === null ? {} : doc.toJS({ maxAliasCount: 0 });
  return { doc, js };
}

/**
 * Keys given twice in one mapping, each as the parser's own uniqueKeys error reads (`Map keys must be unique`,
 * at the line and column of the second), found with one set per mapping. Only scalar keys are compared: any other
 * key is refused by the walk.
 */
function duplicateKeys(root: Node | unknown, text: string): ConfigIssue[] {
  const out: ConfigIssue[] = [];
  const stack: unknown[] = [root];
  while (stack.length > 0 && out.length < 20) {
    const node = stack.pop();
    if (isMap(node)) {
      const seen = new Set<unknown>();
      for (const item of node.items) {
        if (!isPair(item)) continue;
        const k = item.key;
        if (isScalar(k)) {
          if (seen.has(k.value)) {
            const at = k.range?.[0] ?? 0;
            const before = text.slice(0, at);
            const line = before.split('\n').length;
            const col = at - before.lastIndexOf('\n');
            out.push({ path: `line ${line}, column ${col}`, message: 'Map keys must be unique' });
          }
          seen.add(k.value);
        }
        stack.push(item.value);
      }
    } else if (isSeq(node)) for (const v of node.items) stack.push(v);
  }
  return out;
}

const MESSAGES = {
  config_yaml_version: 'is not YAML 1.2',
  config_alias: 'uses YAML anchors, aliases or merge keys (each value must be written out where it applies)',
  config_tag: 'uses YAML tags (write plain values; quote a string)',
  config_too_deep: `nests lists and mappings deeper than ${MAX_DEPTH} levels`,
  list_too_long: 'has a list or mapping with too many items',
  entry_too_long: `has a string longer than ${MAX_ENTRY_CHARS} characters`,
} as const;

function fmt(at: readonly (string | number)[]): string {
  let s = '';
  for (const seg of at) s += typeof seg === 'number' ? `[${seg}]` : s ? `.${seg}` : seg;
  return s || '(root)';
}

function clip(s: string): string {
  return s.length > 40 ? `${JSON.stringify(s.slice(0, 40))}…` : JSON.stringify(s);
}

function walk(
  node: Node | unknown,
  at: (string | number)[],
  depth: number,
  add: (code: ErrorCode, path: string, message: string) => void,
  maxItems: number,
): void {
  if (node === null || node === undefined) return;
  if (isAlias(node)) {
    add('config_alias', fmt(at), `alias *${node.source} (write the value out)`);
    return;
  }
  const n = node as { anchor?: string; tag?: string };
  if (n.anchor) add('config_alias', fmt(at), `anchor &${n.anchor} (anchors and aliases are not allowed)`);
  if (n.tag !== undefined)
    add('config_tag', fmt(at), `tag ${n.tag.replace(/^tag:yaml\.org,2002:/, '!!')} (write a plain value)`);
  if (depth > MAX_DEPTH) {
    add('config_too_deep', fmt(at), `nested more than ${MAX_DEPTH} levels`);
    return;
  }
  if (isScalar(node)) {
    if (typeof node.value === 'string' && node.value.length > MAX_ENTRY_CHARS)
      add('entry_too_long', fmt(at), `${node.value.length} characters (at most ${MAX_ENTRY_CHARS})`);
    return;
  }
  if (isMap(node)) {
    if (node.items.length > maxItems) add('list_too_long', fmt(at), `${node.items.length} keys (at most ${maxItems})`);
    for (const item of node.items) {
      if (!isPair(item)) continue;
      const k = item.key;
      if (isAlias(k)) {
        add('config_alias', fmt(at), `alias *${k.source} used as a key`);
        continue;
      }
      if (!isScalar(k) && k !== null) {
        add('config_alias', fmt(at), 'a key that is a list or a mapping');
        continue;
      }
      const key = isScalar(k) ? k.value : null;
      const keyStr = typeof key === 'string' ? key : String(key);
      if (keyStr === '<<' && isScalar(k) && k.type === 'PLAIN')
        add('config_alias', fmt(at), 'merge key << (write the keys out)');
      walk(k, [...at, keyStr.length > MAX_ENTRY_CHARS ? clip(keyStr) : keyStr], depth + 1, add, maxItems);
      walk(item.value, [...at, keyStr.length > MAX_ENTRY_CHARS ? clip(keyStr) : keyStr], depth + 1, add, maxItems);
    }
    return;
  }
  if (isSeq(node)) {
    if (node.items.length > maxItems) add('list_too_long', fmt(at), `${node.items.length} items (at most ${maxItems})`);
    node.items.forEach((v, i) => walk(v, [...at, i], depth + 1, add, maxItems));
  }
}

/** A strict-reader refusal as `path: message [code]` lines, for loaders with their own error types. */
export function strictProblems(e: LeashError, file: string): string[] {
  const issues = (e.details?.issues as ConfigIssue[] | undefined) ?? [];
  if (issues.length === 0) return [`${file}: ${e.message} [${e.code}]`];
  return issues.map((i) => `${file}: ${i.path}: ${i.message} [${e.code}]`);
}
