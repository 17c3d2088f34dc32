/**
 * deploy/ without kubeconform or vector on this machine (neither is in Debian 12 or on npm): the DaemonSet and
 * ConfigMap are checked against a schema of every Kubernetes field they use (types and allowed values as the
 * apps/v1 and v1 API define them; unknown fields refused, as kubeconform -strict does), and the ConfigMap is
 * checked as the directory `leash apply` reads; the Vector config is parsed and checked for the LEASH_* fields.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { SCOPE_RE } from '../../../src/control/policy/bindings.js';
import { parseProfileText } from '../../../src/control/policy/profiles.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const docs = YAML.parseAllDocuments(
  fs.readFileSync(path.join(root, 'deploy/kubernetes/leash-daemonset.yaml'), 'utf8'),
).map((d) => d.toJS() as Record<string, unknown>);

const name = z
  .string()
  .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/)
  .max(63);
const meta = z.strictObject({ name, namespace: name, labels: z.record(z.string(), z.string()).optional() });
const mount = z.strictObject({
  name,
  mountPath: z.string().startsWith('/'),
  readOnly: z.boolean().optional(),
  subPath: z.string().optional(),
});
const container = z.strictObject({
  name,
  image: z.string().min(1),
  command: z.array(z.string()).min(1),
  securityContext: z.strictObject({ privileged: z.boolean() }),
  resources: z
    .strictObject({
      requests: z.strictObject({ cpu: z.string().optional(), memory: z.string().optional() }).optional(),
      limits: z.strictObject({ cpu: z.string().optional(), memory: z.string().optional() }).optional(),
    })
    .optional(),
  volumeMounts: z.array(mount),
});
const volume = z.union([
  z.strictObject({
    name,
    configMap: z.strictObject({
      name,
      items: z.array(z.strictObject({ key: z.string(), path: z.string() })).optional(),
    }),
  }),
  z.strictObject({
    name,
    hostPath: z.strictObject({
      path: z.string().startsWith('/'),
      type: z.enum([
        '',
        'DirectoryOrCreate',
        'Directory',
        'FileOrCreate',
        'File',
        'Socket',
        'CharDevice',
        'BlockDevice',
      ]),
    }),
  }),
]);
const daemonSet = z.strictObject({
  apiVersion: z.literal('apps/v1'),
  kind: z.literal('DaemonSet'),
  metadata: meta,
  spec: z.strictObject({
    selector: z.strictObject({ matchLabels: z.record(z.string(), z.string()) }),
    updateStrategy: z.strictObject({ type: z.enum(['RollingUpdate', 'OnDelete']) }),
    template: z.strictObject({
      metadata: z.strictObject({ labels: z.record(z.string(), z.string()) }),
      spec: z.strictObject({
        hostPID: z.boolean(),
        hostNetwork: z.boolean(),
        dnsPolicy: z.enum(['ClusterFirst', 'ClusterFirstWithHostNet', 'Default', 'None']),
        priorityClassName: z.string(),
        terminationGracePeriodSeconds: z.number().int().nonnegative(),
        initContainers: z.array(container),
        containers: z.array(container).min(1),
        volumes: z.array(volume),
      }),
    }),
  }),
});
const configMap = z.strictObject({
  apiVersion: z.literal('v1'),
  kind: z.literal('ConfigMap'),
  metadata: meta,
  data: z.record(z.string(), z.string()),
});

describe('deploy/kubernetes: DaemonSet + ConfigMap (schema of the fields used)', () => {
  const cm = configMap.parse(docs.find((d) => d.kind === 'ConfigMap'));
  const ds = daemonSet.parse(docs.find((d) => d.kind === 'DaemonSet'));
  const pod = ds.spec.template.spec;

  it('is valid, with host PID and network, privileged, and its selector matching its pods', () => {
    expect(pod.hostPID).toBe(true);
    expect(pod.hostNetwork).toBe(true);
    for (const c of [...pod.initContainers, ...pod.containers]) expect(c.securityContext.privileged).toBe(true);
    expect(ds.spec.template.metadata.labels).toMatchObject(ds.spec.selector.matchLabels);
    const volumes = new Set(pod.volumes.map((v) => v.name));
    for (const c of [...pod.initContainers, ...pod.containers])
      for (const m of c.volumeMounts) expect(volumes, `${c.name} mounts ${m.name}`).toContain(m.name);
  });

  it('mounts the ConfigMap as the directory leash apply reads (bindings.yaml + profiles/<name>.yaml), every key used', () => {
    const v = pod.volumes.find((x) => 'configMap' in x)!;
    expect('configMap' in v && v.configMap.name).toBe(cm.metadata.name);
    const items = 'configMap' in v ? (v.configMap.items ?? []) : [];
    expect(items.map((i) => i.key).sort()).toEqual(Object.keys(cm.data).sort());
    for (const c of [...pod.initContainers, ...pod.containers]) {
      const m = c.volumeMounts.find((x) => x.name === v.name);
      if (m && c.command.join(' ') !== 'leash') expect(c.command.join(' ')).toContain(`leash apply -f ${m.mountPath}`);
    }
    expect(pod.initContainers.some((c) => c.command.join(' ').includes('leash apply'))).toBe(true);
    const files = new Map(items.map((i) => [i.path, cm.data[i.key]!]));
    const bindings = YAML.parse(files.get('bindings.yaml')!) as { bindings: Record<string, { profile: string }> };
    for (const [scope, b] of Object.entries(bindings.bindings)) {
      expect(scope).toMatch(SCOPE_RE);
      expect(files.has(`profiles/${b.profile}.yaml`), `${scope} -> ${b.profile}`).toBe(true);
    }
    for (const [p, text] of files) if (p.startsWith('profiles/')) expect(() => parseProfileText(text, p)).not.toThrow();
  });

  it('refuses a manifest with a field the API does not have (the schema is strict)', () => {
    const bad = structuredClone(docs.find((d) => d.kind === 'DaemonSet')) as {
      spec: { template: { spec: Record<string, unknown> } };
    };
    bad.spec.template.spec.hostPid = true;
    expect(daemonSet.safeParse(bad).success).toBe(false);
  });
});

describe('deploy/vector: the journal shipper', () => {
  const cfg = YAML.parse(fs.readFileSync(path.join(root, 'deploy/vector/leash.yaml'), 'utf8')) as {
    sources: Record<string, { type: string; include_units?: string[] }>;
    transforms: Record<string, { type: string; inputs: string[]; source?: string }>;
    sinks: Record<string, { type: string; inputs: string[] }>;
  };
  it('reads leash.service from the journal and maps every LEASH_* field the service sends', () => {
    const src = Object.values(cfg.sources);
    expect(src).toEqual([expect.objectContaining({ type: 'journald', include_units: ['leash.service'] })]);
    const remap = Object.values(cfg.transforms).find((t) => t.type === 'remap')!;
    for (const f of [
      'LEASH_UID',
      'LEASH_SURFACE',
      'LEASH_ACTION',
      'LEASH_REASON',
      'LEASH_REF',
      'LEASH_COMPONENT',
      'PRIORITY',
    ])
      expect(remap.source).toContain(`.${f}`);
  });
  it('wires every input to a component that exists', () => {
    const names = new Set([...Object.keys(cfg.sources), ...Object.keys(cfg.transforms)]);
    for (const c of [...Object.values(cfg.transforms), ...Object.values(cfg.sinks)])
      for (const i of c.inputs) expect(names).toContain(i);
  });
});
