// `filesystem.namespaces` as enforced (docs/policy.md): shared by the watcher, `leash status` and the loosening judge.

/**
 * `filesystem.namespaces` as enforced: absent means deny when the filesystem or the commands surface is a
 * whitelist (an agent's own namespace is where it can mount what no mark covers yet), allow otherwise.
 */
export function effectiveNamespaces(p: {
  filesystem: { mode: string; namespaces?: 'deny' | 'allow' };
  commands: { mode: string };
}): 'deny' | 'allow' {
  return (
    p.filesystem.namespaces ?? (p.filesystem.mode !== 'blacklist' || p.commands.mode !== 'blacklist' ? 'deny' : 'allow')
  );
}
