/**
 * What one SQL text does, as far as its words tell: `db.read` for a single statement that starts
 * with a reading keyword and names no writing keyword or side-effecting function; `db.write` for
 * a single statement that writes; ambiguous for anything else — several statements (the way
 * `COMMIT; DROP TABLE …` escapes a read-only transaction), comments, dollar quoting, a function
 * that reads or writes the server's files or other sessions. Words inside '…' literals and "…"
 * identifiers are not read as keywords. This is a classifier over text, not a SQL parser: an
 * ambiguous query never passes as a read (rules.ts).
 */
export interface SqlClass {
  operation: 'db.read' | 'db.write';
  ambiguous: boolean;
  why?: string;
}

const READ_START = new Set(['select', 'with', 'values', 'show', 'explain', 'table', 'describe']);
const WRITE_WORDS = new Set([
  'insert',
  'update',
  'delete',
  'merge',
  'upsert',
  'replace',
  'drop',
  'create',
  'alter',
  'truncate',
  'rename',
  'grant',
  'revoke',
  'copy',
  'call',
  'do',
  'execute',
  'exec',
  'attach',
  'detach',
  'vacuum',
  'reindex',
  'analyze',
  'analyse',
  'cluster',
  'lock',
  'set',
  'reset',
  'commit',
  'rollback',
  'begin',
  'start',
  'end',
  'savepoint',
  'release',
  'prepare',
  'deallocate',
  'listen',
  'notify',
  'load',
  'import',
  'refresh',
  'comment',
  'security',
  'into',
  'pragma',
  'checkpoint',
  'discard',
]);
/** Functions with effects beyond reading the tables (files, other sessions, extensions, settings). */
const EFFECT_FUNCTIONS =
  /\b(lo_import|lo_export|lo_unlink|pg_read_file|pg_read_binary_file|pg_ls_dir|pg_stat_file|pg_terminate_backend|pg_cancel_backend|pg_reload_conf|pg_rotate_logfile|pg_sleep\w*|set_config|dblink\w*|nextval|setval|load_extension|readfile|writefile|edit|fts3_tokenizer)\s*\(/i;

/** The text with '…' literals and "…"/`…`/[…] identifiers blanked (doubled quotes are escapes). */
function blankQuoted(sql: string): string | null {
  let out = '';
  for (let i = 0; i < sql.length; i++) {
    const c = sql[i]!;
    const close = c === "'" ? "'" : c === '"' ? '"' : c === '`' ? '`' : c === '[' ? ']' : null;
    if (close === null) {
      out += c;
      continue;
    }
    let j = i + 1;
    for (;;) {
      const k = sql.indexOf(close, j);
      if (k < 0) return null; // unterminated
      if (close !== ']' && sql[k + 1] === close) {
        j = k + 2;
        continue;
      }
      j = k;
      break;
    }
    out += c === "'" ? "''" : ' x ';
    i = j;
  }
  return out;
}

export function classifySql(sql: string): SqlClass {
  const amb = (why: string): SqlClass => ({ operation: 'db.write', ambiguous: true, why });
  const text = blankQuoted(sql);
  if (text === null) return amb('an unterminated quote');
  if (/--|\/\*|#/.test(text)) return amb('a comment in the SQL');
  if (text.includes('$')) return amb('dollar quoting or a parameter in the SQL');
  const body = text.trim().replace(/;\s*$/, '');
  if (body.includes(';')) return amb('several SQL statements');
  if (body.length === 0) return amb('an empty SQL text');
  if (EFFECT_FUNCTIONS.test(body)) return amb('a function with effects beyond reading');
  const words = body.toLowerCase().match(/[a-z_][a-z0-9_]*/g) ?? [];
  const first = words[0] ?? '';
  if (WRITE_WORDS.has(first)) return { operation: 'db.write', ambiguous: false };
  // `WITH d AS (DELETE …) SELECT`, `SELECT … INTO t`, or a column named like a keyword: a write
  // that the first word hides, or a read that looks like one — either way not a sure read.
  if (words.some((w) => WRITE_WORDS.has(w))) return amb('a writing keyword inside a reading statement');
  if (READ_START.has(first)) return { operation: 'db.read', ambiguous: false };
  return amb(`a statement starting with '${first}'`);
}
