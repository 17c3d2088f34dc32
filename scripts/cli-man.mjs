#!/usr/bin/env node
// leash(1) from docs/cli.md: the man page and the CLI reference are one text, so they cannot drift.
// Usage: node scripts/cli-man.mjs [docs/cli.md] [VERSION] > leash.1
// Handles the Markdown docs/cli.md uses: headings, paragraphs, fenced code, tables, lists, inline
// `code`, **bold**, *emphasis* and [links](target). A `## \`leash …\`` heading is a command.
import fs from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const src = process.argv[2] ?? path.join(root, 'docs', 'cli.md');
const version = process.argv[3] ?? JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')).version ?? '';
// A fixed date (the source's, or SOURCE_DATE_EPOCH): the same input gives the same page.
const epoch = process.env.SOURCE_DATE_EPOCH ? Number(process.env.SOURCE_DATE_EPOCH) * 1000 : fs.statSync(src).mtimeMs;
const date = new Date(epoch).toISOString().slice(0, 10);

/** Escapes text for roff: backslashes, and a line-leading . or ' that would read as a request. */
function esc(t) {
  return t
    .replace(/\\/g, '\\e')
    .replace(/-/g, '\\-')
    .replace(/[^\x00-\x7f]/gu, (c) => `\\[u${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}]`);
}

/** Inline Markdown -> roff fonts. */
function inline(t) {
  let out = '';
  const re = /`([^`]+)`|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*|\[([^\]]+)\]\(([^)]+)\)/g;
  let last = 0;
  for (let m; (m = re.exec(t));) {
    out += esc(t.slice(last, m.index));
    if (m[1] !== undefined) out += `\\fB${esc(m[1])}\\fR`;
    else if (m[2] !== undefined) out += `\\fB${inline(m[2])}\\fR`;
    else if (m[3] !== undefined) out += `\\fI${inline(m[3])}\\fR`;
    else out += inline(m[4]);
    last = re.lastIndex;
  }
  return out + esc(t.slice(last));
}

/** A text line as roff input: never starting with a control character. */
function line(t) {
  const s = inline(t.trim());
  return /^[.']/.test(s) ? `\\&${s}` : s;
}

const lines = fs.readFileSync(src, 'utf8').split('\n');
const out = [
  `.\\" Generated from docs/cli.md by scripts/cli-man.mjs; edit that file, not this one.`,
  `.TH LEASH 1 "${date}" "leash ${esc(version)}" "Leash"`,
  '.SH NAME',
  'leash \\- per\\-UID enforcement for local AI agents: network, filesystem, commands and tools',
  '.SH DESCRIPTION',
];
let inCommands = false;
let para = [];
const flush = () => {
  if (para.length) out.push('.PP', ...para.map(line));
  para = [];
};
for (let i = 0; i < lines.length; i++) {
  const l = lines[i];
  if (/^# /.test(l)) continue; // the document title: NAME says it
  if (l.startsWith('```')) {
    flush();
    out.push('.PP', '.RS 4', '.nf');
    for (i++; i < lines.length && !lines[i].startsWith('```'); i++) {
      const s = esc(lines[i]);
      out.push(/^[.']/.test(s) ? `\\&${s}` : s);
    }
    out.push('.fi', '.RE');
    continue;
  }
  const h = /^(#{2,4}) (.*)$/.exec(l);
  if (h) {
    flush();
    const text = h[2].trim();
    if (h[1] === '##' && /^`leash/.test(text)) {
      if (!inCommands) out.push('.SH COMMANDS');
      inCommands = true;
      out.push(`.SS ${line(text)}`);
    } else if (h[1] === '##') {
      inCommands = false;
      out.push(`.SH ${line(text.toUpperCase())}`);
    } else out.push(`.SS ${line(text)}`);
    continue;
  }
  if (/^\|/.test(l)) {
    flush();
    // A table: the header row and the separator are dropped; each row becomes a tagged paragraph.
    const rows = [];
    for (; i < lines.length && /^\|/.test(lines[i]); i++) rows.push(lines[i]);
    i--;
    for (const r of rows.slice(2)) {
      const cells = r
        .replace(/^\|/, '')
        .replace(/\|\s*$/, '')
        .split(/(?<!\\)\|/)
        .map((c) => c.trim().replace(/\\\|/g, '|'));
      out.push('.TP', line(cells[0] ?? ''), line(cells.slice(1).join(' \u2014 ')));
    }
    continue;
  }
  const li = /^(\s*)[-*] (.*)$/.exec(l);
  if (li) {
    flush();
    const item = [li[2]];
    for (; i + 1 < lines.length && /^\s{2,}\S/.test(lines[i + 1]) && !/^\s*[-*] /.test(lines[i + 1]); i++)
      item.push(lines[i + 1]);
    out.push('.IP \\(bu 2', ...item.map(line));
    continue;
  }
  if (l.trim() === '') {
    flush();
    continue;
  }
  para.push(l);
}
flush();
out.push(
  '.SH FILES',
  '.TP',
  '\\fI/etc/leash/leash.yaml\\fR',
  'the policy (the floor); 0640 root:<the leashed user\\(aqs group>',
  '.TP',
  '\\fI/var/lib/leash/\\fR',
  'profiles, bindings, the port map',
  '.TP',
  '\\fI/var/log/leash/decisions.jsonl\\fR',
  'the decision log (rotated by \\fI/etc/logrotate.d/leash\\fR)',
  '.SH SEE ALSO',
  '\\fBsystemctl\\fR(1), \\fBnft\\fR(8), \\fBfanotify\\fR(7); /usr/share/doc/leash/',
);
process.stdout.write(`${out.join('\n')}\n`);
