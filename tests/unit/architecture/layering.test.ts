/**
 * The house rules of src/ (issue #11, docs/architecture.md "Layering"), read from the code with the
 * TypeScript API so they cannot silently regress:
 *   - no folder-level cycle of value imports (a type-only import is erased and cycles nothing; a
 *     folder is at most two levels deep, see folderOf);
 *   - arrows go down (the tables LAYERS and NEVER: cli -> control -> dataplane -> engine, tools -> engine; nothing
 *     in src/dataplane imports src/control, src/tools or src/cli; src/engine imports nothing);
 *   - no function in src/ is longer than 200 lines, and no source file outside tests longer than 500;
 *   - no call back up: nothing in src/dataplane takes a getter of a policy setting (a function with no argument
 *     that returns a fail mode, a policy or a config): the control plane pushes those down (src/dataplane/contract.ts).
 */
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = path.resolve(import.meta.dirname, '..', '..', '..');
const src = path.join(root, 'src');

function walk(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const p = path.join(dir, d.name);
    if (d.isDirectory()) return walk(p);
    return d.name.endsWith('.ts') && !d.name.endsWith('.d.ts') ? [p] : [];
  });
}

interface Import {
  from: string;
  /** The imported file, relative to src/ (".js" specifiers name their ".ts" source). */
  to: string;
  typeOnly: boolean;
}

function parse(file: string): ts.SourceFile {
  return ts.createSourceFile(file, fs.readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
}

/** Every relative import and re-export of `file` that lands in src/, value or type-only. */
function importsOf(file: string, sf: ts.SourceFile): Import[] {
  const out: Import[] = [];
  const add = (spec: string, typeOnly: boolean): void => {
    if (!spec.startsWith('.')) return;
    const abs = path.resolve(path.dirname(file), spec).replace(/\.js$/, '.ts');
    if (!abs.startsWith(src + path.sep)) return;
    out.push({ from: path.relative(src, file), to: path.relative(src, abs), typeOnly });
  };
  const visit = (n: ts.Node): void => {
    if (ts.isImportDeclaration(n) && ts.isStringLiteral(n.moduleSpecifier)) {
      const c = n.importClause;
      const named = c?.namedBindings && ts.isNamedImports(c.namedBindings) ? c.namedBindings.elements : null;
      const typeOnly =
        !!c && (c.isTypeOnly || (!c.name && !!named && named.length > 0 && named.every((e) => e.isTypeOnly)));
      add(n.moduleSpecifier.text, typeOnly);
    } else if (ts.isExportDeclaration(n) && n.moduleSpecifier && ts.isStringLiteral(n.moduleSpecifier)) {
      const named = n.exportClause && ts.isNamedExports(n.exportClause) ? n.exportClause.elements : null;
      add(n.moduleSpecifier.text, n.isTypeOnly || (!!named && named.length > 0 && named.every((e) => e.isTypeOnly)));
    } else if (
      ts.isCallExpression(n) &&
      n.expression.kind === ts.SyntaxKind.ImportKeyword &&
      n.arguments[0] &&
      ts.isStringLiteral(n.arguments[0])
    ) {
      add(n.arguments[0].text, false);
    } else if (ts.isImportTypeNode(n) && ts.isLiteralTypeNode(n.argument) && ts.isStringLiteral(n.argument.literal)) {
      add(n.argument.literal.text, true);
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return out;
}

/**
 * The folder a file of src/ belongs to: its directory relative to src/ ("." for src/ itself), at
 * most two levels deep. A deeper folder is a part of the one above it (dataplane/network/proxy is a part of the
 * network data plane; control/reconcile/surfaces the surfaces control/reconcile/execute.ts
 * loops over): a parent and its parts may import each other, two folders may not.
 */
export const folderOf = (rel: string): string => path.dirname(rel).split('/').slice(0, 2).join('/');
/** A folder and everything below it. */
const under = (rel: string, folder: string): boolean => rel === folder || rel.startsWith(folder + '/');

interface Fn {
  file: string;
  name: string;
  line: number;
  lines: number;
}

function functionsOf(rel: string, sf: ts.SourceFile): Fn[] {
  const out: Fn[] = [];
  const visit = (n: ts.Node): void => {
    if (ts.isFunctionLike(n) && 'body' in n && n.body) {
      const start = sf.getLineAndCharacterOfPosition(n.getStart(sf)).line;
      const end = sf.getLineAndCharacterOfPosition(n.getEnd()).line;
      const nm = (n as { name?: ts.Node }).name;
      out.push({ file: rel, name: nm ? nm.getText(sf) : '(anonymous)', line: start + 1, lines: end - start + 1 });
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return out;
}

const files = walk(src).sort();
const parsed = files.map((f) => ({ rel: path.relative(src, f), sf: parse(f), file: f }));
const imports = parsed.flatMap((p) => importsOf(p.file, p.sf));
const functions = parsed.flatMap((p) => functionsOf(p.rel, p.sf));

/** The folder-level graph of value imports (an edge per pair of different folders). */
export function folderGraph(edges: readonly Import[]): Map<string, Set<string>> {
  const g = new Map<string, Set<string>>();
  for (const e of edges) {
    if (e.typeOnly) continue;
    const a = folderOf(e.from);
    const b = folderOf(e.to);
    if (a === b) continue;
    if (!g.has(a)) g.set(a, new Set());
    g.get(a)!.add(b);
  }
  return g;
}

/** Strongly connected components with more than one folder (Tarjan). */
export function cycles(g: Map<string, Set<string>>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  const nodes = new Set([...g.keys(), ...[...g.values()].flatMap((s) => [...s])]);
  const strong = (v: string): void => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of g.get(v) ?? []) {
      if (!idx.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const c: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        c.push(w);
      } while (w !== v);
      if (c.length > 1) out.push(c.sort());
    }
  };
  for (const v of nodes) if (!idx.has(v)) strong(v);
  return out;
}

/**
 * What each layer may import (any import, type-only included), as folders of src/ (a folder
 * includes its subfolders) or single files. A file may always import its own layer.
 */
const LAYERS: { layer: string; may: string[] }[] = [
  { layer: 'engine', may: [] },
  { layer: 'formats', may: ['errors.ts'] },
  { layer: 'store', may: ['errors.ts'] },
  { layer: 'log', may: ['errors.ts', 'engine'] },
];

/**
 * Layers that must never import another (any import): arrows go down, cli -> control -> dataplane -> engine and
 * tools -> engine (docs/architecture.md). The data plane takes compiled policies and answers: it knows no profile,
 * binding, config file or CLI.
 */
const NEVER: { layer: string; not: string }[] = [
  { layer: 'dataplane', not: 'control' },
  { layer: 'dataplane', not: 'cli' },
  { layer: 'dataplane', not: 'tools' },
  { layer: 'tools', not: 'control' },
  { layer: 'tools', not: 'cli' },
  { layer: 'control', not: 'cli' },
  { layer: 'engine', not: 'dataplane' },
];

/**
 * A getter the data plane would call back up through: a function type with no parameter (an option, a hook, a
 * parameter) whose return type names a policy setting. What the control plane decides is pushed down instead.
 */
const SETTING = /\bFailMode\b|'closed' \| 'open'|'open' \| 'closed'|Policy\b|Config\b/;

export function settingGetters(rel: string, sf: ts.SourceFile): string[] {
  const out: string[] = [];
  const visit = (n: ts.Node): void => {
    if (ts.isFunctionTypeNode(n) && n.parameters.length === 0 && SETTING.test(n.type.getText(sf))) {
      const line = sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1;
      const owner = n.parent && 'name' in n.parent ? (n.parent.name as ts.Node | undefined)?.getText(sf) : undefined;
      out.push(`${rel}:${line} ${owner ?? '(type)'}: ${n.getText(sf)}`);
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return out;
}

export const MAX_FUNCTION_LINES = 200;
export const MAX_FILE_LINES = 500;

/** Every source file outside tests (src/, native/, bench/, scripts/, packaging/): what the file limit covers. */
function sourceFiles(): string[] {
  const out: string[] = [];
  const visit = (dir: string): void => {
    for (const d of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, d.name);
      if (d.isDirectory()) visit(p);
      else if (/\.(ts|cc|h|c|sh|mjs|js)$/.test(d.name) && !d.name.endsWith('.d.ts')) out.push(p);
    }
  };
  for (const top of ['src', 'native', 'bench', 'scripts', 'packaging']) visit(path.join(root, top));
  return out;
}

describe('the house rules of src/', () => {
  it('reads the tree (the scan is not empty)', () => {
    expect(files.length).toBeGreaterThan(100);
    expect(imports.filter((i) => !i.typeOnly).length).toBeGreaterThan(300);
    expect(functions.length).toBeGreaterThan(1000);
  });

  it('has no folder-level cycle of value imports', () => {
    expect(cycles(folderGraph(imports))).toEqual([]);
  });

  it.each(LAYERS)('src/$layer imports only its own layer and $may', ({ layer, may }) => {
    const bad = imports
      .filter((i) => under(i.from, layer) && !under(i.to, layer) && !may.some((m) => under(i.to, m)))
      .map((i) => `${i.from} -> ${i.to}`);
    expect(bad).toEqual([]);
  });

  it.each(NEVER)('nothing in src/$layer imports src/$not', ({ layer, not }) => {
    const bad = imports.filter((i) => under(i.from, layer) && under(i.to, not)).map((i) => `${i.from} -> ${i.to}`);
    expect(bad).toEqual([]);
  });

  it('has no call back up: nothing in src/dataplane takes a getter of a fail mode, a policy or a config', () => {
    const sample = ts.createSourceFile(
      'x.ts',
      'interface O { failMode?: () => FailMode }',
      ts.ScriptTarget.Latest,
      true,
    );
    // The check sees the shape it forbids (the proxy's option before the fail mode was pushed down).
    expect(settingGetters('x.ts', sample)).toEqual(['x.ts:1 failMode: () => FailMode']);
    const bad = parsed.filter((p) => under(p.rel, 'dataplane')).flatMap((p) => settingGetters(p.rel, p.sf));
    expect(bad).toEqual([]);
  });

  it(`has no source file over ${MAX_FILE_LINES} lines outside tests`, () => {
    const files = sourceFiles();
    expect(files.length).toBeGreaterThan(200);
    const long = files
      .map((f) => ({ f: path.relative(root, f), n: fs.readFileSync(f, 'utf8').split('\n').length - 1 }))
      .filter((x) => x.n > MAX_FILE_LINES)
      .map((x) => `${x.f} (${x.n} lines)`);
    expect(long).toEqual([]);
  });

  it(`has no function over ${MAX_FUNCTION_LINES} lines`, () => {
    const long = functions
      .filter((f) => f.lines > MAX_FUNCTION_LINES)
      .map((f) => `${f.file}:${f.line} ${f.name} (${f.lines} lines)`);
    expect(long).toEqual([]);
  });
});
