/**
 * Allocation-free string hashing for the indexes. Lookups hash a slice of the subject in place
 * (no substring, no split), then verify the candidate with `startsWith` at an offset, so a
 * decision allocates nothing however long the lists are.
 */

/** FNV-1a offset basis (32-bit). */
export const FNV_INIT = 0x811c9dc5 | 0;

/** Folds one UTF-16 code unit into a running FNV-1a hash; the result stays an int32 (a small integer in V8). */
export function fnvStep(h: number, c: number): number {
  return Math.imul(h ^ c, 16777619);
}

/** Hashes `s[start, end)` without creating a substring. */
export function hashRange(s: string, start: number, end: number): number {
  let h = FNV_INIT;
  for (let i = start; i < end; i++) h = fnvStep(h, s.charCodeAt(i));
  return h;
}

/** True when `s[start, end)` is exactly `candidate` (no substring created). */
export function rangeEquals(s: string, start: number, end: number, candidate: string): boolean {
  return candidate.length === end - start && s.startsWith(candidate, start);
}

/**
 * A hash table from a 32-bit key (an FNV hash, or an IPv4 prefix) to a value, with open
 * addressing over one Int32Array of [key, value index + 1] pairs. Compared with a Map it keeps
 * the probed data in a few contiguous cache lines, which is what keeps a 100,000-entry list
 * nearly as fast as a 10-entry one. Keys that collide on all 32 bits are the caller's to chain
 * (the values here are chain heads that the caller verifies).
 */
export class IntTable<V> {
  private slots: Int32Array;
  private bits: number;
  private readonly values: V[] = [];
  /**
   * A small Bloom filter over the keys (16 to 32 bits per key, two bits set per key): a lookup
   * that misses (most probes: a parent directory, a prefix length, a label nobody listed) stops
   * here about 98% of the time, in memory small enough to stay in cache, without touching the
   * slot array.
   */
  private presence: Int32Array;
  private presenceBits: number;

  constructor(expected = 4) {
    this.bits = 3;
    while (1 << this.bits < expected * 2) this.bits++;
    this.slots = new Int32Array(2 << this.bits);
    this.presenceBits = this.bits + 3;
    this.presence = new Int32Array(1 << (this.presenceBits - 5));
  }

  /** Number of keys. */
  get size(): number {
    return this.values.length;
  }

  private slot(key: number): number {
    return Math.imul(key, 0x9e3779b1) >>> (32 - this.bits);
  }

  private present(key: number): boolean {
    const shift = 32 - this.presenceBits;
    const b1 = Math.imul(key ^ (key >>> 16), 0x85ebca6b) >>> shift;
    const b2 = Math.imul(key ^ (key >>> 13), 0xc2b2ae35) >>> shift;
    const p = this.presence;
    return (p[b1 >>> 5]! & (1 << (b1 & 31))) !== 0 && (p[b2 >>> 5]! & (1 << (b2 & 31))) !== 0;
  }

  private mark(key: number): void {
    const shift = 32 - this.presenceBits;
    const b1 = Math.imul(key ^ (key >>> 16), 0x85ebca6b) >>> shift;
    const b2 = Math.imul(key ^ (key >>> 13), 0xc2b2ae35) >>> shift;
    this.presence[b1 >>> 5]! |= 1 << (b1 & 31);
    this.presence[b2 >>> 5]! |= 1 << (b2 & 31);
  }

  /** The value stored under `key`, or undefined. */
  get(key: number): V | undefined {
    if (!this.present(key)) return undefined;
    const slots = this.slots;
    const mask = (1 << this.bits) - 1;
    let i = this.slot(key);
    for (;;) {
      const v = slots[2 * i + 1]!;
      if (v === 0) return undefined;
      if (slots[2 * i] === key) return this.values[v - 1];
      i = (i + 1) & mask;
    }
  }

  /** Stores `value` under `key` (replacing any value there). */
  set(key: number, value: V): void {
    const mask = (1 << this.bits) - 1;
    let i = this.slot(key);
    for (;;) {
      const v = this.slots[2 * i + 1]!;
      if (v === 0) break;
      if (this.slots[2 * i] === key) {
        this.values[v - 1] = value;
        return;
      }
      i = (i + 1) & mask;
    }
    this.values.push(value);
    this.slots[2 * i] = key;
    this.slots[2 * i + 1] = this.values.length;
    this.mark(key);
    if (this.values.length * 2 > 1 << this.bits) this.grow();
  }

  private grow(): void {
    const old = this.slots;
    this.bits++;
    this.slots = new Int32Array(2 << this.bits);
    this.presenceBits = this.bits + 3;
    this.presence = new Int32Array(1 << (this.presenceBits - 5));
    const mask = (1 << this.bits) - 1;
    for (let j = 0; j < old.length; j += 2) {
      const v = old[j + 1]!;
      if (v === 0) continue;
      this.mark(old[j]!);
      let i = this.slot(old[j]!);
      while (this.slots[2 * i + 1] !== 0) i = (i + 1) & mask;
      this.slots[2 * i] = old[j]!;
      this.slots[2 * i + 1] = v;
    }
  }
}
