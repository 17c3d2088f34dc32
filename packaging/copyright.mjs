#!/usr/bin/env node
// debian/copyright (machine-readable format 1.0) for the .deb: Leash itself, then one paragraph per
// bundled npm module, with the license its package.json names and the text of its own LICENSE file.
// Usage: node packaging/copyright.mjs <the staged node_modules directory> [<where the bundled Node runtime's LICENSE is shipped>]
import fs from 'node:fs';
import path from 'node:path';
import process from 'node:process';

const MIT = `Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.`;

/** A text as the continuation lines of a field: indented, an empty line as " .". */
const body = (t) =>
  t
    .replace(/\r/g, '')
    .trim()
    .split('\n')
    .map((l) => (l.trim() === '' ? ' .' : ` ${l.trimEnd()}`))
    .join('\n');

/** The holder as the license text states it (`Copyright (c) 2025 X`), else the package author. */
function holder(text, author, name) {
  const line = text && /^\s*copyright\s+(?:\(c\)|©)?\s*(.+)$/im.exec(text);
  if (line && !/holders|notice/i.test(line[1])) return line[1].trim();
  const a = author ? author.replace(/\s*[<(][^>)]*[>)]/g, '').trim() : '';
  return a || `the ${name} authors`;
}

const root = process.argv[2];
if (!root) {
  process.stderr.write('usage: copyright.mjs NODE_MODULES_DIR\n');
  process.exit(2);
}
const modules = [];
const visit = (dir, prefix) => {
  for (const name of fs.readdirSync(dir).sort()) {
    if (name.startsWith('.')) continue;
    const p = path.join(dir, name);
    if (name.startsWith('@')) visit(p, `${name}/`);
    else if (fs.existsSync(path.join(p, 'package.json'))) {
      modules.push({ name: prefix + name, dir: p });
      if (fs.existsSync(path.join(p, 'node_modules'))) visit(path.join(p, 'node_modules'), '');
    }
  }
};
visit(root, '');

const out = [
  'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/',
  'Upstream-Name: leash',
  '',
  'Files: *',
  'Copyright: the Leash authors',
  'License: MIT',
];
// The runtime the package carries (usr/lib/leash/bin/node): Node itself is MIT; the notices and licenses of what it
// bundles (V8, OpenSSL, libuv, ICU, zlib, ...) are Node's own LICENSE file, shipped beside this one as it is
// (named here, not copied: it holds full Apache-2.0 and GPL texts that a copyright file names instead).
if (process.argv[3]) {
  out.push(
    '',
    'Files: usr/lib/leash/bin/node',
    'Copyright: Node.js contributors',
    'License: MIT',
    `Comment: Node.js bundles third-party components under their own licenses: their notices, as Node's LICENSE\n file states them, are in ${process.argv[3]}.`,
  );
}
const seen = new Set();
/** SPDX name -> the file under /usr/share/common-licenses (base-files). */
const COMMON = { 'Apache-2.0': 'Apache-2.0' };
const commonUsed = new Set();
for (const m of modules) {
  const pkg = JSON.parse(fs.readFileSync(path.join(m.dir, 'package.json'), 'utf8'));
  const license = typeof pkg.license === 'string' ? pkg.license : (pkg.license?.type ?? 'UNKNOWN');
  const author = typeof pkg.author === 'string' ? pkg.author : pkg.author?.name;
  const file = fs.readdirSync(m.dir).find((f) => /^(licen[cs]e|copying)(\.|$)/i.test(f));
  const text = file ? fs.readFileSync(path.join(m.dir, file), 'utf8') : null;
  const rel = path.relative(path.dirname(root), m.dir);
  if (seen.has(rel)) continue;
  seen.add(rel);
  out.push('', `Files: usr/lib/leash/${rel.split(path.sep).join('/')}/*`, `Copyright: ${holder(text, author, m.name)}`);
  // A license Debian ships in /usr/share/common-licenses is named, not copied (lintian: the
  // copyright-file-contains-full-* tags); otherwise the module's own text, else the short name.
  if (COMMON[license]) {
    commonUsed.add(license);
    out.push(`License: ${license}`);
  } else out.push(text ? `License: ${license}\n${body(text)}` : `License: ${license}`);
}
out.push('', 'License: MIT', body(MIT), '');
for (const l of [...commonUsed].sort()) {
  out.push(
    `License: ${l}`,
    body(`On Debian systems, the full text of the ${l} license is in\n/usr/share/common-licenses/${COMMON[l]}.`),
    '',
  );
}
process.stdout.write(out.join('\n'));
