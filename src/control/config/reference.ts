import { z } from 'zod';
import { configSchema } from './schema.js';

interface JsonNode {
  type?: string | string[];
  enum?: unknown[];
  default?: unknown;
  description?: string;
  properties?: Record<string, JsonNode>;
  items?: JsonNode;
  anyOf?: JsonNode[];
}

function typeOf(n: JsonNode): string {
  if (n.enum) return n.enum.map((v) => `\`${String(v)}\``).join(' | ');
  if (n.anyOf) return n.anyOf.map(typeOf).join(' or ');
  if (Array.isArray(n.type)) return n.type.join(' or '); // a nullable field: ['string', 'null']
  if (n.type === 'array') return `list of ${n.items ? typeOf(n.items) : 'any'}`;
  return n.type ?? 'any';
}

function cell(s: string): string {
  return s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
}

/**
 * The field table of docs/config.md, generated from the schema (so the descriptions and defaults
 * in the docs are the ones the loader applies; a unit test keeps the file in step).
 */
export function configReferenceTable(): string {
  const root = z.toJSONSchema(configSchema, { io: 'input' }) as JsonNode;
  const rows: string[] = ['| field | type | default | meaning |', '|---|---|---|---|'];
  const walk = (node: JsonNode, at: string) => {
    for (const [k, v] of Object.entries(node.properties ?? {})) {
      const p = at ? `${at}.${k}` : k;
      if (v.properties) {
        rows.push(`| \`${p}\` | mapping | | ${cell(v.description ?? '')} |`);
        walk(v, p);
      } else {
        const d = v.default === undefined ? '' : `\`${JSON.stringify(v.default)}\``;
        rows.push(`| \`${p}\` | ${cell(typeOf(v))} | ${d} | ${cell(v.description ?? '')} |`);
      }
    }
  };
  walk(root, '');
  return rows.join('\n');
}
