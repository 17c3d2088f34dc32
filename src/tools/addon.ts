import type { NativeRegex } from './judge/linear-regex.js';
import type { GlobToken } from '../engine/index.js';

/**
 * The tools gate's part of the native addon (native/tools/register.cc), as src/native.ts's nativeTools() hands it
 * over: the path walk and its cache, the JSON pre-check and the literal finder.
 */
export interface NativeWalkCache {
  walk(path: string): string;
  /** Applies what the kernel has queued now (what the reader thread applies on waking). */
  sync(): void;
  /**
   * Three uint32 read without a call: [0] a generation (moves when a remembered path may have been forgotten),
   * [1] non-zero while news waits to be applied (for good once closed), [2] whether the last walk's answer was a
   * remembered one. Null on an addon without it.
   */
  shared?(): ArrayBuffer | null;
  stats(): {
    hits: number;
    misses: number;
    wakeups: number;
    events: number;
    forgotten: number;
    broken: boolean;
    paths: number;
    walkOnly: number;
    watches: number;
  };
  close(): void;
}

/** A tool's argument rules as the native judge takes them (src/tools/judge/native.ts nativeTool). */
export interface NativeGateTool {
  allowAny: boolean;
  allow: NativeGatePath[];
  deny: NativeGatePath[];
}
export interface NativeGatePath {
  segs: string[];
  /** type: -1 any, 0 string, 1 number, 2 boolean, 3 null, 4 object, 5 array; re: a NativeRegex or null. */
  rules: { type: number; re: NativeRegex | null; admitsDotDot: boolean }[];
}

/** The MCP gate's native judge of a plain tools/call (native/tools/gatejudge.cc). */
export interface NativeGateJudge {
  /** params at line[start, end) of a scanned line: the tool's index when certainly allowed, else -1. */
  judge(line: Buffer, start: number, end: number): number;
  /**
   * Registers a name allowed by the registry (tool: its argument rules, null for none); its index, -1 when full.
   * A judge over operations takes the tool's operation (its code in OPERATIONS) and path argument too.
   */
  add(name: string, tool: NativeGateTool | null, op?: { operation: number; arg: string }): number;
  /**
   * A judge over operations: the index `judge` answers for a call to tool `tool` that rule `rule` allows (-1: the
   * default's allow), with the path's place in the line in the config's `span`; -1 when no more are taken.
   */
  addTemplate?(tool: number, rule: number): number;
  /**
   * With `lines` in the config: the whole lines from byte `at` of a client chunk that are plain tools/calls this
   * judge certainly allows (gatejudge.cc RequestsJs): n, with lines[5k..5k+4] the k-th's end (after its LF), id,
   * answer and path span.
   */
  requests?(chunk: Buffer, at: number): number;
}

/** Rules over operations as the native judge takes them (native/tools/opsjudge_core.h). */
export interface NativeOpsConfig {
  /** Effects: 0 allow, 1 deny, 2 ask. */
  default: number;
  rules: { effect: number; never: boolean; resources: { lit: string; tokens: GlobToken[] }[] | null }[];
  /** By operation code: rules.ts OperationIndex's `always` and `withAlways`. */
  index: { always: number[]; tops: [string, number[]][] }[];
  /** The WalkCache the gate's walker asks (its remembered paths are what the native judge reads). */
  memory: NativeWalkCache;
  span: Int32Array;
}

export interface NativeToolsPart {
  /**
   * The tools gate's reading of an absolute path (src/tools/judge/operations/paths.ts): existing symlinks
   * resolved, `..` by the parent reached so far, the rest appended once a component is missing; one openat2
   * for a plain existing path. Throws a TypeError for a relative path or one with a NUL.
   */
  walkPath(path: string): string;
  /**
   * The same walk with a memory kept true by inotify and the mount table (native/tools/walkcache.h): `walk(path)` answers
   * what walkPath(path) would. Throws an Error with the errno when inotify or /proc/self/mountinfo cannot be opened.
   */
  WalkCache: new () => NativeWalkCache;
  /**
   * The MCP gate's pre-check (native/tools/jsonscan.cc), bound to `out`: scan(line) is 1 when `line` is
   * certainly a JSON text the gate's strict parser accepts and its writer would write back byte for
   * byte, with the top-level facts in `out` (flags, integer id, id span, method span); 0 when not sure.
   */
  createJsonScanner(out: Float64Array): (line: Buffer) => number;
  /**
   * One pass over a buffer for any of `literals` (2..64 ASCII bytes each, at most 256), ASCII letters
   * compared without case (native/tools/literals.cc): has(buf) is 1 when one occurs, else 0.
   */
  createLiteralFinder(literals: string[]): (buf: Buffer) => number;
  /**
   * The plain answers at the start of a server chunk (native/tools/jsonscan.cc), bound to `out` (3 per line):
   * read(chunk, at) is how many whole lines from byte `at` are, with out[3k..3k+2] the k-th's end (after its LF),
   * integer id and 1 when it holds one of `literals` (as createLiteralFinder).
   */
  createAnswerReader(out: Float64Array, literals: string[]): (chunk: Buffer, at: number) => number;
  /**
   * The gate's native judge (native/tools/gatejudge.cc): literals (1..64 ASCII bytes, at most 64) and the
   * needs over them (each group a list of literal indices, one of which must occur; a digit count).
   */
  createGateJudge(config: {
    strictArgs: boolean;
    literals: string[];
    needs: { all: number[][]; digits: number }[];
    ops?: NativeOpsConfig;
    /** Where `requests` writes (5 numbers a line). */
    lines?: Float64Array;
  }): NativeGateJudge;
}
