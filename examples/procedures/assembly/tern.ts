// Tern's procedure ABI for AssemblyScript (docs/procedures.md).
//
// A procedure is a WebAssembly module. Tern calls its `on_record` once per
// input record, in log order, inside the partition's apply loop, and its
// `on_timer` when a timer it set is due in log time. Everything it reads and
// writes goes through the imports below, so every replica computes the same
// records, state and outputs. Keep nothing in globals between calls: a
// replica that restarts starts the module afresh.
//
// A procedure file re-exports `input` and defines the two entry points:
//
//   import * as tern from "./tern";
//   export { input } from "./tern";
//   export function on_record(keyLen: i32, skLen: i32, valueLen: i32, op: i32, timestampMs: i64, offset: i64): void {
//     const r = tern.record(keyLen, skLen, valueLen, op, timestampMs, offset);
//     ...
//   }
//   export function on_timer(nameLen: i32, atMs: i64): void { const name = tern.timerName(nameLen); ... }

@external("tern", "get") declare function _get(pk: usize, pkLen: i32, sk: usize, skLen: i32, out: usize, cap: i32): i32;
@external("tern", "put") declare function _put(pk: usize, pkLen: i32, sk: usize, skLen: i32, v: usize, vLen: i32): void;
@external("tern", "delete") declare function _delete(pk: usize, pkLen: i32, sk: usize, skLen: i32): void;
@external("tern", "state_get") declare function _stateGet(k: usize, kLen: i32, out: usize, cap: i32): i32;
@external("tern", "state_put") declare function _statePut(k: usize, kLen: i32, v: usize, vLen: i32): void;
@external("tern", "state_delete") declare function _stateDelete(k: usize, kLen: i32): void;
@external("tern", "emit") declare function _emit(o: usize, oLen: i32, v: usize, vLen: i32, k: usize, kLen: i32): void;
@external("tern", "timer") declare function _timer(n: usize, nLen: i32, atMs: i64): void;
@external("tern", "cancel") declare function _cancel(n: usize, nLen: i32): void;
@external("tern", "now") declare function _now(): i64;
@external("tern", "params") declare function _params(out: usize, cap: i32): i32;
@external("tern", "partition") declare function _partition(): i32;
@external("tern", "header") declare function _header(n: usize, nLen: i32, out: usize, cap: i32): i32;

/** `Record.op`: what the input was. */
export const OP_PUT: i32 = 0;
export const OP_DELETE: i32 = 1;
export const OP_TREE_SET: i32 = 2;
export const OP_TREE_MERGE: i32 = 3;
/** A foreign topic's record (not a Tern write). */
export const OP_RECORD: i32 = 4;

let inputBuffer = new ArrayBuffer(4096);
let readBuffer = new ArrayBuffer(4096);

/** The buffer Tern writes each input into (exported by every procedure). */
export function input(capacity: i32): usize {
  if (inputBuffer.byteLength < capacity) inputBuffer = new ArrayBuffer(capacity);
  return changetype<usize>(inputBuffer);
}

export class Record {
  /** The key's bytes (for a namespace's own writes: the pk, UTF-8). */
  key: ArrayBuffer = new ArrayBuffer(0);
  /** The sort key (own writes). */
  sk: string = "";
  /** The value's bytes (own writes: JSON text); null for a delete. */
  value: ArrayBuffer | null = null;
  op: i32 = 0;
  timestampMs: i64 = 0;
  offset: i64 = 0;

  keyString(): string { return String.UTF8.decode(this.key); }
  valueString(): string | null { const v = this.value; return v == null ? null : String.UTF8.decode(v); }
}

function slice(at: i32, len: i32): ArrayBuffer {
  return inputBuffer.slice(at, at + len);
}

/** Where the current input's bytes are (key, sk, value, consecutive): for
 *  a hot path that reads them in place instead of copying (`record` copies). */
export function inputPointer(): usize { return changetype<usize>(inputBuffer); }

/** State at the key `[key, key + keyLen)` copied into `[out, out + cap)`:
 *  its length (copied only if it fits), -1 if absent. No allocation. */
export function stateGetRaw(key: usize, keyLen: i32, out: usize, cap: i32): i32 { return _stateGet(key, keyLen, out, cap); }

/** Writes state from raw memory. No allocation. */
export function statePutRaw(key: usize, keyLen: i32, value: usize, valueLen: i32): void { _statePut(key, keyLen, value, valueLen); }

/** The input record's header `name` copied into `[out, out + cap)`: its
 *  length (copied only if it fits), -1 if absent. Only records of a source
 *  topic have headers. No allocation. */
export function headerRaw(name: usize, nameLen: i32, out: usize, cap: i32): i32 { return _header(name, nameLen, out, cap); }

/** The input record's header `name` (its bytes), or null. */
export function header(name: string): ArrayBuffer | null {
  argA = utf8(name);
  return readInto((out: usize, cap: i32): i32 => _header(ptr(argA), argA.byteLength, out, cap));
}

/** Reads `on_record`'s input out of the input buffer. */
export function record(keyLen: i32, skLen: i32, valueLen: i32, op: i32, timestampMs: i64, offset: i64): Record {
  const r = new Record();
  r.key = slice(0, keyLen);
  r.sk = String.UTF8.decode(slice(keyLen, skLen));
  r.value = valueLen < 0 ? null : slice(keyLen + skLen, valueLen);
  r.op = op;
  r.timestampMs = timestampMs;
  r.offset = offset;
  return r;
}

/** `on_timer`'s timer name, from the input buffer. */
export function timerName(nameLen: i32): string {
  return String.UTF8.decode(slice(0, nameLen));
}

function utf8(s: string): ArrayBuffer { return String.UTF8.encode(s); }
function ptr(b: ArrayBuffer): usize { return changetype<usize>(b); }

/** Calls a host read that returns a length (or -1), growing the buffer as needed. */
function readInto(read: (out: usize, cap: i32) => i32): ArrayBuffer | null {
  let n = read(ptr(readBuffer), readBuffer.byteLength);
  if (n < 0) return null;
  if (n > readBuffer.byteLength) {
    readBuffer = new ArrayBuffer(n);
    n = read(ptr(readBuffer), readBuffer.byteLength);
  }
  return readBuffer.slice(0, n);
}

let argA = new ArrayBuffer(0);
let argB = new ArrayBuffer(0);

/** A record's JSON text as of this call (its own writes first), or null. */
export function get(pk: string, sk: string): string | null {
  argA = utf8(pk); argB = utf8(sk);
  const v = readInto((out: usize, cap: i32): i32 => _get(ptr(argA), argA.byteLength, ptr(argB), argB.byteLength, out, cap));
  return v == null ? null : String.UTF8.decode(v);
}

/** Writes a record: `json` must be JSON text. Versioned by the input's offset. */
export function put(pk: string, sk: string, json: string): void {
  const p = utf8(pk), s = utf8(sk), v = utf8(json);
  _put(ptr(p), p.byteLength, ptr(s), s.byteLength, ptr(v), v.byteLength);
}

export function del(pk: string, sk: string): void {
  const p = utf8(pk), s = utf8(sk);
  _delete(ptr(p), p.byteLength, ptr(s), s.byteLength);
}

/** The procedure's private state at `key` (bytes), or null. */
export function stateGet(key: string): ArrayBuffer | null {
  argA = utf8(key);
  return readInto((out: usize, cap: i32): i32 => _stateGet(ptr(argA), argA.byteLength, out, cap));
}

/** As `stateGet`, with the key's bytes (no string conversion on a hot path). */
export function stateGetBytes(key: ArrayBuffer): ArrayBuffer | null {
  argA = key;
  return readInto((out: usize, cap: i32): i32 => _stateGet(ptr(argA), argA.byteLength, out, cap));
}

/** As `statePut`, with the key's bytes. */
export function statePutBytes(key: ArrayBuffer, value: ArrayBuffer): void {
  _statePut(ptr(key), key.byteLength, ptr(value), value.byteLength);
}

export function statePut(key: string, value: ArrayBuffer): void {
  const k = utf8(key);
  _statePut(ptr(k), k.byteLength, ptr(value), value.byteLength);
}

export function stateDelete(key: string): void {
  const k = utf8(key);
  _stateDelete(ptr(k), k.byteLength);
}

/** Emits `value` to output `output` (topic `<ns>.<output>` unless mapped), keyed by `key` if given. */
export function emit(output: string, value: string, key: string | null = null): void {
  const o = utf8(output), v = utf8(value);
  if (key == null) {
    _emit(ptr(o), o.byteLength, ptr(v), v.byteLength, 0, -1);
  } else {
    const k = utf8(key);
    _emit(ptr(o), o.byteLength, ptr(v), v.byteLength, ptr(k), k.byteLength);
  }
}

/** As `emit`, with the key's bytes. */
export function emitKeyed(output: string, value: string, key: ArrayBuffer): void {
  const o = utf8(output), v = utf8(value);
  _emit(ptr(o), o.byteLength, ptr(v), v.byteLength, ptr(key), key.byteLength);
}

/** Sets (or moves) timer `name` to fire when the partition's log time reaches `atMs`. */
export function timer(name: string, atMs: i64): void {
  const n = utf8(name);
  _timer(ptr(n), n.byteLength, atMs);
}

export function cancel(name: string): void {
  const n = utf8(name);
  _cancel(ptr(n), n.byteLength);
}

/** The partition's log time, ms since the epoch: the largest timestamp applied so far. */
export function now(): i64 { return _now(); }

/** The deployment's `params`, JSON text. */
export function params(): string {
  const v = readInto((out: usize, cap: i32): i32 => _params(out, cap));
  return v == null ? "{}" : String.UTF8.decode(v);
}

export function partition(): i32 { return _partition(); }
