// From the config's plain data: the watcher, the loosening judge and `leash status` read it.
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
