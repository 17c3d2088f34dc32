/**
 * Bench server: the smallest MCP-ish stdio server. Answers every request at once with a small
 * tools/call result; ignores notifications. No MCP SDK, so the server costs as little as possible.
 */
let buf = '';
const reply = (id: unknown) =>
  `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"content":[{"type":"text","text":"ok"}],"isError":false}}\n`;
process.stdin.on('data', (c: Buffer) => {
  buf += c.toString('utf8');
  let out = '';
  let nl: number;
  while ((nl = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, nl);
    buf = buf.slice(nl + 1);
    if (!line) continue;
    const m = JSON.parse(line) as { id?: unknown };
    if (m.id !== undefined) out += reply(m.id);
  }
  if (out) process.stdout.write(out);
});
process.stdin.on('end', () => process.exit(0));
