// The aggdemo decision for one record (rules 1-4 of issue 23), as a
// WebAssembly guest written in AssemblyScript sees Tern: bytes in linear
// memory. The host writes the record into INPUT and calls on_record; state
// is a fixed binary layout the guest reads and writes through get/put
// (what a wasm guest would do: no JSON parser in the guest); outputs are
// JSON text the guest builds byte by byte (no allocation per record).
@external("tern", "get") declare function host_get(key: usize, keyLen: i32, out: usize, cap: i32): i32;
@external("tern", "put") declare function host_put(key: usize, keyLen: i32, val: usize, valLen: i32): void;
@external("tern", "emit") declare function host_emit(topic: i32, val: usize, valLen: i32): void;

const QTYCOUNT: i32 = 100;
const USAGE: i64 = 1000000;
const WEEK_MS: i64 = 7 * 24 * 3600 * 1000;
const INPUT = memory.data(4096);
const OUT = memory.data(4096);
const KEY = memory.data(64);
// State layout: wm i32 @0, n i32 @4, lo i32 @8, hi i32 @12, usage i64 @16, t0 i64 @24, t1 i64 @32,
// since i64 @40, seen 4xu64 @48, pend 4xu64 @80, callLen i32 @112, destLen i32 @116, call @120 (32), dest @152 (32)
const STATE = memory.data(184);
const STATE_SIZE: i32 = 184;
let outLen: i32 = 0;

export function input_ptr(): usize { return INPUT; }

const FIELDS = memory.data(9 * 4);
function fieldStart(i: i32): i32 { return load<i32>(FIELDS + (i << 2)); }
function fieldEnd(i: i32): i32 { return load<i32>(FIELDS + ((i + 1) << 2)) - 1; }

function parseInt(i: i32): i64 {
  let p = fieldStart(i), e = fieldEnd(i);
  if (p >= e) return i64.MIN_VALUE;
  let neg = false;
  if (load<u8>(INPUT + p) == 45) { neg = true; p++; if (p >= e) return i64.MIN_VALUE; }
  let v: i64 = 0;
  for (; p < e; p++) {
    const c = load<u8>(INPUT + p);
    if (c < 48 || c > 57) return i64.MIN_VALUE;
    v = v * 10 + (c - 48);
  }
  return neg ? -v : v;
}

function putByte(b: i32): void { store<u8>(OUT + outLen, b); outLen++; }
function putAscii(s: string): void { for (let i = 0; i < s.length; i++) putByte(s.charCodeAt(i)); }
function putInt(v: i64): void {
  if (v < 0) { putByte(45); v = -v; }
  if (v >= 10) putInt(v / 10);
  putByte(<i32>(v % 10) + 48);
}
function putField(name: string, v: i64): void { putAscii(",\""); putAscii(name); putAscii("\":"); putInt(v); }
function putBytes(name: string, ptr: usize, len: i32): void {
  putAscii(",\""); putAscii(name); putAscii("\":\"");
  for (let i = 0; i < len; i++) { const c = load<u8>(ptr + i); if (c == 34 || c == 92) putByte(92); putByte(c); }
  putByte(34);
}

function bad(reason: string, session: i64, start: i64, seq: i64, raw: bool, len: i32): void {
  outLen = 0;
  putAscii("{\"reason\":\""); putAscii(reason); putByte(34);
  if (raw) { putBytes("raw", INPUT, len); }
  else { putField("sessionId", session); putField("sessionStartUTC", start); putField("seqno", seq); }
  putByte(125);
  host_emit(1, OUT, outLen);
}

function bitTest(base: usize, i: i64): bool { return (load<u64>(base + <usize>((i >> 6) << 3)) & (<u64>1 << (i & 63))) != 0; }
function bitSet(base: usize, i: i64): void {
  const at = base + <usize>((i >> 6) << 3);
  store<u64>(at, load<u64>(at) | (<u64>1 << (i & 63)));
}

export function on_record(len: i32, now: i64): void {
  let count = 0;
  store<i32>(FIELDS, 0);
  for (let i = 0; i < len; i++) {
    if (load<u8>(INPUT + i) == 44) { count++; if (count > 7) break; store<i32>(FIELDS + (count << 2), i + 1); }
  }
  if (count != 7) { bad("BADFORMAT", 0, 0, 0, true, len); return; }
  store<i32>(FIELDS + (8 << 2), len + 1);
  const session = parseInt(0), start = parseInt(1), seq = parseInt(2), rstart = parseInt(6), usage = parseInt(7);
  const kindLen = fieldEnd(5) - fieldStart(5), kind = load<u8>(INPUT + fieldStart(5));
  if (session == i64.MIN_VALUE || start == i64.MIN_VALUE || seq == i64.MIN_VALUE || rstart == i64.MIN_VALUE
      || usage == i64.MIN_VALUE || seq < 0 || seq > 255 || kindLen != 1 || !(kind == 83 || kind == 73 || kind == 69)) {
    bad("BADFORMAT", 0, 0, 0, true, len); return;
  }
  if (start < now - WEEK_MS) { bad("LATESESSION", session, start, seq, false, 0); return; }
  if (rstart < now - WEEK_MS) { bad("LATERECORD", session, start, seq, false, 0); return; }
  const keyLen = fieldEnd(1);
  memory.copy(KEY, INPUT, keyLen);
  const got = host_get(KEY, keyLen, STATE, STATE_SIZE);
  if (got < 0) {
    memory.fill(STATE, 0, STATE_SIZE);
    store<i32>(STATE, -1); store<i32>(STATE + 8, 256); store<i32>(STATE + 12, -1);
    const cl = min(fieldEnd(3) - fieldStart(3), 32), dl = min(fieldEnd(4) - fieldStart(4), 32);
    store<i32>(STATE + 112, cl); store<i32>(STATE + 116, dl);
    memory.copy(STATE + 120, INPUT + fieldStart(3), cl);
    memory.copy(STATE + 152, INPUT + fieldStart(4), dl);
  }
  let wm = load<i32>(STATE), n = load<i32>(STATE + 4);
  if (bitTest(STATE + 48, seq)) { bad("DUP", session, start, seq, false, 0); return; }
  if (seq <= wm) { bad("TOOLATE", session, start, seq, false, 0); return; }
  bitSet(STATE + 48, seq); bitSet(STATE + 80, seq);
  if (n == 0) { store<i64>(STATE + 40, now); store<i64>(STATE + 24, rstart); store<i64>(STATE + 32, rstart); }
  n++;
  const total = load<i64>(STATE + 16) + usage;
  const lo = min(load<i32>(STATE + 8), <i32>seq), hi = max(load<i32>(STATE + 12), <i32>seq);
  const t0 = min(load<i64>(STATE + 24), rstart), t1 = max(load<i64>(STATE + 32), rstart);
  store<i32>(STATE + 4, n); store<i64>(STATE + 16, total); store<i32>(STATE + 8, lo); store<i32>(STATE + 12, hi);
  store<i64>(STATE + 24, t0); store<i64>(STATE + 32, t1);
  if (n == hi - wm) {
    let reason = "";
    if (bitTest(STATE + 80, 255)) reason = "END"; else if (n >= QTYCOUNT) reason = "QTY"; else if (total >= USAGE) reason = "USAGE";
    if (reason.length > 0) {
      outLen = 0;
      putAscii("{\"reason\":\""); putAscii(reason); putByte(34);
      putField("sessionId", session); putField("sessionStartUTC", start); putField("min_seqno", lo); putField("max_seqno", hi);
      putBytes("callingNumber", STATE + 120, load<i32>(STATE + 112)); putBytes("destination", STATE + 152, load<i32>(STATE + 116));
      putField("startAggTimeUTC", t0); putField("endAggTimeUTC", t1); putField("recordUsage", total); putField("count", n);
      putField("emit_ms", now); putByte(125);
      host_emit(0, OUT, outLen);
      store<i32>(STATE, hi); memory.fill(STATE + 80, 0, 32);
      store<i32>(STATE + 4, 0); store<i64>(STATE + 16, 0); store<i32>(STATE + 8, 256); store<i32>(STATE + 12, -1);
    }
  }
  host_put(KEY, keyLen, STATE, STATE_SIZE);
}
