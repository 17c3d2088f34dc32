import { describe, expect, it } from 'vitest';
import { releaseMemory, startSettler } from '../../../../src/dataplane/network/proxy/settle.js';

describe('the settler (memory back after a load peak)', () => {
  it('releases once a burst or a flood is over, never while the load holds', async () => {
    let active = 0;
    let opened = 0;
    let flooding = false;
    let ticks = 0;
    let released = 0;
    const stop = startSettler({
      active: () => (ticks++, active),
      // While flooding, 100 connections were opened since each look (never many open at once).
      opened: () => (flooding ? (opened += 100) : opened),
      release: () => released++,
      minWork: 500,
      quiet: 10,
      everyMs: 5,
    });
    const after = async (n: number) => {
      const end = ticks + n;
      while (ticks < end) await new Promise((r) => setTimeout(r, 5));
    };
    try {
      active = 1000;
      opened += 1000;
      await after(3);
      expect(released).toBe(0); // at the peak
      active = 800;
      await after(3);
      expect(released).toBe(0); // fallen, but more than a quarter of the peak is still open
      active = 100;
      await after(3);
      expect(released).toBe(1);
      await after(3);
      expect(released).toBe(1); // once: no work since
      active = 0;
      flooding = true;
      await after(10);
      expect(released).toBe(1); // not during the flood
      flooding = false;
      await after(3);
      expect(released).toBe(2); // after it
      opened += 50;
      await after(3);
      expect(released).toBe(2); // a little work is not worth a collection
    } finally {
      stop();
    }
  });

  it('gives memory back: the heap V8 grew under a load shrinks once it is garbage', () => {
    let keep: unknown[][] | null = [];
    for (let r = 0; r < 30; r++) {
      const batch = Array.from({ length: 10_000 }, (_, i) => ({ i, s: `x${i}`, b: Buffer.alloc(64) }));
      keep.push(batch.slice(0, 50));
    }
    const grown = process.memoryUsage().heapTotal;
    keep = null;
    releaseMemory();
    expect(keep).toBeNull();
    expect(process.memoryUsage().heapTotal).toBeLessThan(grown * 0.6);
  });
});
