// Holds a chunk reader of the MCP gate (the native judge's `requests`, the answer reader) to the line-by-line path it
// stands for: lines are cut into chunks as a pipe might deliver them (runs of 1 to 90 lines, some ending in a partial
// line), each chunk is walked as the gate walks it (a run, then the line after it read one by one, then the next run),
// and every line of a run must be one the line-by-line path takes with the same answer, and the line that ends a run
// one it does not take.
import { mulberry32 } from '../lab/prng.js';

export interface ChunkReader {
  /** How many whole lines from byte `at` the reader takes. */
  read(chunk: Buffer, at: number): number;
  /** The k-th line's end (after its LF), and what the reader answered for it. */
  end(k: number): number;
  answer(k: number): unknown;
  /** Lines per call at most. */
  max: number;
}

/** Walks `lines` through `reader`: the count of lines it took and of runs of two or more; throws at a difference. */
export function walkChunks(
  seed: number,
  lines: Buffer[],
  reader: ChunkReader,
  /** The line-by-line answer for a line (without its LF), or null when that path would not take it. */
  expected: (line: Buffer) => unknown,
): { taken: number; runs: number } {
  const r = mulberry32(seed);
  let taken = 0;
  let runs = 0;
  for (let i = 0; i < lines.length;) {
    const n = 1 + Math.floor(r() * 90);
    const group = lines.slice(i, i + n);
    i += n;
    let chunk = Buffer.concat(group.flatMap((l) => [l, Buffer.from('\n')]));
    // Some chunks end inside their last line: a reader must never take a line without its LF.
    if (r() < 0.2) chunk = chunk.subarray(0, chunk.length - 1 - Math.floor(r() * 20));
    let at = 0;
    while (at < chunk.length) {
      const k = reader.read(chunk, at);
      if (k > 1) runs++;
      let start = at;
      for (let j = 0; j < k; j++) {
        const end = reader.end(j);
        const line = chunk.subarray(start, end - 1);
        if (chunk[end - 1] !== 0x0a) throw new Error(`a run's line does not end at a LF: ${line.toString()}`);
        const want = expected(line);
        if (want === null) throw new Error(`took a line the line-by-line path does not: ${line.toString()}`);
        const got = reader.answer(j);
        if (JSON.stringify(got) !== JSON.stringify(want))
          throw new Error(
            `answered ${JSON.stringify(got)} where the line-by-line path says ${JSON.stringify(want)}: ${line}`,
          );
        taken++;
        start = end;
      }
      at = start;
      if (k === reader.max) continue;
      const nl = chunk.indexOf(0x0a, at);
      if (nl < 0) break;
      const next = chunk.subarray(at, nl);
      if (expected(next) !== null) throw new Error(`a run ended before a line the line-by-line path takes: ${next}`);
      at = nl + 1;
    }
  }
  return { taken, runs };
}
