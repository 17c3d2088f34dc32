/**
 * Listing answers (a mapping table's `listing`): what a directory listing, a tree or a search
 * returns names paths below the call's start, and each entry is judged as a read of its own path by
 * the same rules. An entry no allow would admit is taken out of the answer (with everything below
 * it) before the client sees it, in `content` text and `structuredContent.content` alike.
 *
 * Filtering, not refusing: whether a protected path lies below a start is known only by walking the
 * tree at judgment time, which costs a walk per call and still misses what is created between the
 * judgment and the server's own walk. The answer is what the server actually listed, so judging it
 * costs nothing for calls that list nothing, and leaves no window.
 */
import path from 'node:path';
import { isObject, type JsonObject, type JsonValue } from '../../../formats/json.js';
import type { Action } from './normalize.js';

export type ListingKind = 'lines' | 'tree' | 'paths';

/** Whether a read of this absolute path would be allowed. */
export type ReadAllowed = (p: string) => boolean;

/** `[DIR] name` / `[FILE] name   12 KB`: the name of one entry line, or null for other lines. */
function lineName(line: string): string | null {
  const m = /^\[(?:DIR|FILE)\] (.*)$/.exec(line);
  if (m === null) return null;
  // list_directory_with_sizes pads the name to 30 and adds a size column: both trimmed.
  return m[1]!.replace(/\s+(?:\d+(?:\.\d+)? [KMGT]?B)?\s*$/, '');
}

function filterLines(text: string, root: string, ok: ReadAllowed): string {
  return text
    .split('\n')
    .filter((l) => {
      const n = lineName(l);
      return n === null || ok(path.join(root, n));
    })
    .join('\n');
}

function filterPaths(text: string, root: string, ok: ReadAllowed): string {
  return text
    .split('\n')
    .filter((l) => l === '' || l === 'No matches found' || ok(path.resolve(root, l)))
    .join('\n');
}

function filterTree(text: string, root: string, ok: ReadAllowed): string {
  let tree: unknown;
  try {
    tree = JSON.parse(text);
  } catch {
    return '[]'; // not the tree the table says: nothing of it is passed on
  }
  const walk = (nodes: unknown, dir: string): unknown[] => {
    if (!Array.isArray(nodes)) return [];
    const out: unknown[] = [];
    for (const n of nodes) {
      if (n === null || typeof n !== 'object' || typeof (n as { name?: unknown }).name !== 'string') continue;
      const node = n as { name: string; children?: unknown };
      const p = path.join(dir, node.name);
      if (!ok(p)) continue;
      out.push(node.children === undefined ? node : { ...node, children: walk(node.children, p) });
    }
    return out;
  };
  return JSON.stringify(walk(tree, root), null, 2);
}

function filterText(kind: ListingKind, text: string, root: string, ok: ReadAllowed): string {
  if (kind === 'lines') return filterLines(text, root, ok);
  if (kind === 'paths') return filterPaths(text, root, ok);
  return filterTree(text, root, ok);
}

/**
 * filterListing with the answer for each entry from elsewhere (the service): the entries are
 * collected first, asked about at once, then taken out.
 */
export async function filterListingAsync(
  result: JsonValue | undefined,
  a: Pick<Action, 'listing' | 'paths'>,
  ask: (paths: string[]) => Promise<boolean[]>,
): Promise<boolean> {
  const seen: string[] = [];
  const probe = structuredClone(result);
  filterListing(probe, a, (p) => {
    seen.push(p);
    return true;
  });
  if (seen.length === 0) return false;
  const answers = await ask(seen);
  const allowed = new Map(seen.map((p, i) => [p, answers[i] === true]));
  return filterListing(result, a, (p) => allowed.get(p) === true);
}

/**
 * Takes the protected entries out of a tools/call result, in place; true when anything went. The
 * start is every reading of the call's path: an entry must be allowed under each.
 */
export function filterListing(
  result: JsonValue | undefined,
  a: Pick<Action, 'listing' | 'paths'>,
  ok: ReadAllowed,
): boolean {
  const kind = a.listing;
  if (kind === undefined || !isObject(result)) return false;
  const roots = a.paths;
  if (roots.length === 0) return false;
  const each = (text: string) => roots.reduce((t, r) => filterText(kind, t, r, ok), text);
  let changed = false;
  const content = result.content;
  if (Array.isArray(content))
    for (const item of content)
      if (isObject(item) && typeof item.text === 'string') {
        const t = each(item.text);
        if (t !== item.text) {
          item.text = t;
          changed = true;
        }
      }
  const sc = result.structuredContent;
  if (isObject(sc))
    for (const k of Object.keys(sc)) {
      const v = (sc as JsonObject)[k];
      if (typeof v !== 'string') continue;
      const t = each(v);
      if (t !== v) {
        (sc as JsonObject)[k] = t;
        changed = true;
      }
    }
  return changed;
}
