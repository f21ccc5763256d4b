// aggdemo: Volt's mediation benchmark as a Tern procedure (issue 23).
//
// Phone-usage records (CSV: sessionId,sessionStartUTC,seqno,callingNumber,
// destination,recordType,recordStartUTC,recordUsage) are aggregated per
// session (sessionId, sessionStartUTC) into billing rows on output
// "aggregated"; what cannot be billed goes to output "bad" with a reason.
// Per record, in log order (docs/procedures.md has the model):
//  1. not well-formed -> BADFORMAT (with the raw line); sessionStartUTC
//     older than now - 7 days -> LATESESSION; else recordStartUTC older
//     than now - 7 days -> LATERECORD.
//  2. a seqno seen before in the session -> DUP; at or below the session's
//     watermark (the highest seqno already closed) -> TOOLATE.
//  3. add it to the session's pending aggregate.
//  4. cut only when the pending seqnos are exactly watermark+1..max pending:
//     END if 255 is pending, else QTY if count >= qtycount, else USAGE if
//     usage >= usage; the row goes out and the watermark moves to max.
//  5. a timer: a session whose oldest pending record is older than
//     staleness_ms is closed: AGE if no hole, else LATE with the missing
//     seqnos; either way the watermark moves to max pending.
// Rows are keyed by their session id, so a session's rows land in one
// partition of their output topic in the order they were cut (a BADFORMAT
// line, with no session, is unkeyed).
// A session's state is kept (private state, bytes) until its start is 7
// days old in log time (after that every record of it is LATESESSION), then
// forgotten by a timer set once, when the session is first seen.
//
// Input: a foreign topic's record (value = the CSV line) or, for tests on
// a namespace's own writes, a put whose value is the line as a JSON string.
import * as tern from "../procedures/assembly/tern";
export { input } from "../procedures/assembly/tern";

const WEEK_MS: i64 = 7 * 24 * 3600 * 1000;
const SEQNO_MAX: i32 = 255;

// Params (deploy: {"qtycount": N, "usage": N, "staleness_ms": N}). Kept in
// a global once read: they are the instance's own (a new deployment is a
// new instance), not state derived from records.
let paramsText: string | null = null;
function param(name: string, fallback: i64): i64 {
  if (paramsText == null) paramsText = tern.params();
  const text = paramsText!;
  const at = text.indexOf(`"${name}":`);
  if (at < 0) return fallback;
  let i = at + name.length + 3;
  while (i < text.length && text.charCodeAt(i) == 32) i++;
  let v: i64 = 0, digits = 0;
  for (; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 48 || c > 57) break;
    v = v * 10 + (c - 48); digits++;
  }
  return digits > 0 ? v : fallback;
}

// A session's state, a fixed layout of 160 bytes plus the two numbers' text:
// wm i32 @0, n i32 @4, lo i32 @8, hi i32 @12, usage i64 @16, t0 i64 @24,
// t1 i64 @32, since i64 @40, seen 4xu64 @48, pend 4xu64 @80, last i64 @112,
// callLen i32 @120, destLen i32 @124, then calling and destination bytes.
const FIXED: i32 = 128;

// The hot path keeps the session in this static buffer (no allocation).
const STATE_CAP: i32 = 4096;
const STATE = memory.data(4096);

class Session {
  p: usize;
  size: i32;
  constructor(p: usize, size: i32) { this.p = p; this.size = size; }
  get wm(): i32 { return load<i32>(this.p); } set wm(v: i32) { store<i32>(this.p, v); }
  get n(): i32 { return load<i32>(this.p + 4); } set n(v: i32) { store<i32>(this.p + 4, v); }
  get lo(): i32 { return load<i32>(this.p + 8); } set lo(v: i32) { store<i32>(this.p + 8, v); }
  get hi(): i32 { return load<i32>(this.p + 12); } set hi(v: i32) { store<i32>(this.p + 12, v); }
  get usage(): i64 { return load<i64>(this.p + 16); } set usage(v: i64) { store<i64>(this.p + 16, v); }
  get t0(): i64 { return load<i64>(this.p + 24); } set t0(v: i64) { store<i64>(this.p + 24, v); }
  get t1(): i64 { return load<i64>(this.p + 32); } set t1(v: i64) { store<i64>(this.p + 32, v); }
  get since(): i64 { return load<i64>(this.p + 40); } set since(v: i64) { store<i64>(this.p + 40, v); }
  get last(): i64 { return load<i64>(this.p + 112); } set last(v: i64) { store<i64>(this.p + 112, v); }
  seen(i: i32): bool { return bit(this.p + 48, i); }
  pending(i: i32): bool { return bit(this.p + 80, i); }
  markSeen(i: i32): void { setBit(this.p + 48, i); }
  markPending(i: i32): void { setBit(this.p + 80, i); }
  clearPending(): void { memory.fill(this.p + 80, 0, 32); this.n = 0; this.usage = 0; this.lo = 256; this.hi = -1; }
  calling(): string { return String.UTF8.decodeUnsafe(this.p + FIXED, load<i32>(this.p + 120)); }
  destination(): string { return String.UTF8.decodeUnsafe(this.p + FIXED + load<i32>(this.p + 120), load<i32>(this.p + 124)); }

  /** A new session in STATE, its numbers' bytes taken from the line (bounded by STATE_CAP). */
  static fresh(calling: usize, callingLen: i32, destination: usize, destinationLen: i32): Session {
    const c = min(callingLen, (STATE_CAP - FIXED) / 2), d = min(destinationLen, (STATE_CAP - FIXED) / 2);
    memory.fill(STATE, 0, FIXED);
    const s = new Session(STATE, FIXED + c + d);
    s.wm = -1; s.clearPending();
    store<i32>(s.p + 120, c); store<i32>(s.p + 124, d);
    memory.copy(s.p + FIXED, calling, c);
    memory.copy(s.p + FIXED + c, destination, d);
    return s;
  }

  /** The session stored at `key` read into STATE, or null. */
  static load(key: usize, keyLen: i32): Session | null {
    const n = tern.stateGetRaw(key, keyLen, STATE, STATE_CAP);
    if (n < 0) return null;
    if (n > STATE_CAP) abort("a session's state is larger than STATE_CAP");
    return new Session(STATE, n);
  }

  save(key: usize, keyLen: i32): void { tern.statePutRaw(key, keyLen, this.p, this.size); }
}

function bit(base: usize, i: i32): bool { return (load<u64>(base + ((i >> 6) << 3)) & (<u64>1 << (i & 63))) != 0; }
function setBit(base: usize, i: i32): void { const at = base + ((i >> 6) << 3); store<u64>(at, load<u64>(at) | (<u64>1 << (i & 63))); }

function jsonString(s: string): string {
  let out = "\"";
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c == 34 || c == 92) out += "\\" + String.fromCharCode(c);
    else if (c < 32) out += "\\u00" + (c < 16 ? "0" : "") + c.toString(16);
    else out += String.fromCharCode(c);
  }
  return out + "\"";
}

function key(sessionId: string, start: string): string { return sessionId + ":" + start; }

// The input's `gen_ns` header (the generator's send time), carried into
// every row the record causes as `trigger_gen_ns`. Read afresh by every
// call (rows of a timer have none), so nothing carries between calls.
const GEN_NS = String.UTF8.encode("gen_ns");
const TRIGGER_BYTES_MAX = 64;
const TRIGGER = memory.data(TRIGGER_BYTES_MAX);
let triggerLen: i32 = -1;

function readTrigger(op: i32): void {
  triggerLen = op == tern.OP_RECORD ? tern.headerRaw(changetype<usize>(GEN_NS), GEN_NS.byteLength, TRIGGER, TRIGGER_BYTES_MAX) : -1;
  if (triggerLen > TRIGGER_BYTES_MAX) triggerLen = -1;
}

/** `,"trigger_gen_ns":N` when the input had the header (a number when it is digits, else a string). */
function trigger(): string {
  if (triggerLen < 0) return "";
  let digits = triggerLen > 0 && triggerLen <= 19;
  for (let i = 0; i < triggerLen && digits; i++) {
    const c = load<u8>(TRIGGER + i);
    digits = c >= 48 && c <= 57;
  }
  const text = String.UTF8.decodeUnsafe(TRIGGER, triggerLen);
  return `,"trigger_gen_ns":${digits ? text : jsonString(text)}`;
}

/** A bad row, keyed by its session when it has one (`session`; null: unkeyed, a BADFORMAT line). */
function bad(reason: string, fields: string, now: i64, session: string | null): void {
  tern.emit("bad", `{"reason":"${reason}",${fields},"emit_ms":${now}${trigger()}}`, session);
}

function sessionFields(sessionId: string, start: string): string {
  return `"sessionId":${sessionId},"sessionStartUTC":${start}`;
}

/** A billing row, keyed by its session id: every row of a session lands in
 * one partition of the output topic, in the order it was cut (as Volt
 * partitions its exports by session). */
function emitRow(reason: string, sessionId: string, start: string, s: Session, now: i64): void {
  tern.emit("aggregated", `{"reason":"${reason}",${sessionFields(sessionId, start)},"min_seqno":${s.lo},"max_seqno":${s.hi},` +
    `"callingNumber":${jsonString(s.calling())},"destination":${jsonString(s.destination())},"startAggTimeUTC":${s.t0},` +
    `"endAggTimeUTC":${s.t1},"recordUsage":${s.usage},"count":${s.n},"emit_ms":${now}${trigger()}}`, sessionId);
}

/** Closes the pending aggregate: the watermark moves to its max. */
function cut(s: Session, sessionKey: string): void {
  s.wm = s.hi;
  s.clearPending();
  tern.cancel("age:" + sessionKey);
}

/** Rule 4: a cut when the pending seqnos have no hole, for the first reason that holds. */
function maybeCut(sessionId: string, start: string, sessionKey: string, s: Session, now: i64): void {
  if (s.n != s.hi - s.wm) return;
  let reason = "";
  if (s.pending(SEQNO_MAX)) reason = "END";
  else if (<i64>s.n >= param("qtycount", 100)) reason = "QTY";
  else if (s.usage >= param("usage", 1000000)) reason = "USAGE";
  if (reason.length == 0) return;
  emitRow(reason, sessionId, start, s, now);
  cut(s, sessionKey);
}

// The hot path reads the line's bytes in place: no string per field, no
// allocation unless the record is reported or opens a session.
const COMMA: u8 = 44, QUOTE: u8 = 34;
const FIELDS = memory.data(9 * 4);
function fieldStart(i: i32): i32 { return load<i32>(FIELDS + (i << 2)); }
function fieldEnd(i: i32): i32 { return load<i32>(FIELDS + ((i + 1) << 2)) - 1; }

/** The unsigned integer in field `i` of `line` (-1: not one, or over 18 digits). */
function integerField(line: usize, i: i32): i64 {
  const from = fieldStart(i), to = fieldEnd(i);
  if (to <= from || to - from > 18) return -1;
  let v: i64 = 0;
  for (let p = from; p < to; p++) {
    const c = load<u8>(line + p);
    if (c < 48 || c > 57) return -1;
    v = v * 10 + (c - 48);
  }
  return v;
}

function fieldString(line: usize, i: i32): string { return String.UTF8.decodeUnsafe(line + fieldStart(i), fieldEnd(i) - fieldStart(i)); }

export function on_record(keyLen: i32, skLen: i32, valueLen: i32, op: i32, timestampMs: i64, offset: i64): void {
  readTrigger(op);
  if (valueLen < 0) return;
  let line = tern.inputPointer() + keyLen + skLen, len = valueLen;
  if (op != tern.OP_RECORD) {
    // A namespace's own write: the line as a JSON string (no escapes in a well-formed line).
    if (op != tern.OP_PUT || len < 2 || load<u8>(line) != QUOTE || load<u8>(line + len - 1) != QUOTE) return;
    line += 1; len -= 2;
  }
  const now = timestampMs > 0 ? timestampMs : tern.now();
  // Field boundaries: exactly 8 fields.
  let count = 0;
  store<i32>(FIELDS, 0);
  for (let p = 0; p < len; p++) {
    if (load<u8>(line + p) == COMMA) {
      count++;
      if (count > 7) break;
      store<i32>(FIELDS + (count << 2), p + 1);
    }
  }
  store<i32>(FIELDS + (8 << 2), len + 1);
  const kindOk = count == 7 && fieldEnd(5) - fieldStart(5) == 1 && (load<u8>(line + fieldStart(5)) == 83 || load<u8>(line + fieldStart(5)) == 73 || load<u8>(line + fieldStart(5)) == 69);
  const sessionNo = count == 7 ? integerField(line, 0) : -1;
  const startMs = count == 7 ? integerField(line, 1) : -1;
  const seq = count == 7 ? integerField(line, 2) : -1;
  const recordStart = count == 7 ? integerField(line, 6) : -1;
  const usage = count == 7 ? integerField(line, 7) : -1;
  if (!kindOk || sessionNo < 0 || startMs < 0 || seq < 0 || seq > SEQNO_MAX || recordStart < 0 || usage < 0) {
    bad("BADFORMAT", `"raw":${jsonString(String.UTF8.decodeUnsafe(line, len))}`, now, null);
    return;
  }
  const seqno = <i32>seq;
  if (startMs < now - WEEK_MS) { bad("LATESESSION", recordFields(line, seqno), now, fieldString(line, 0)); return; }
  if (recordStart < now - WEEK_MS) { bad("LATERECORD", recordFields(line, seqno), now, fieldString(line, 0)); return; }
  // The session's key: the bytes "sessionId,sessionStartUTC", in place.
  const keyLen2 = fieldEnd(1);
  let s = Session.load(line, keyLen2);
  if (s == null) {
    s = Session.fresh(line + fieldStart(3), fieldEnd(3) - fieldStart(3), line + fieldStart(4), fieldEnd(4) - fieldStart(4));
    tern.timer("gc:" + timerKey(line), (startMs + WEEK_MS > now ? startMs + WEEK_MS : now) + 1);
  }
  if (s.seen(seqno)) { bad("DUP", recordFields(line, seqno), now, fieldString(line, 0)); return; }
  if (seqno <= s.wm) { bad("TOOLATE", recordFields(line, seqno), now, fieldString(line, 0)); s.markSeen(seqno); s.save(line, keyLen2); return; }
  s.markSeen(seqno);
  s.markPending(seqno);
  if (s.n == 0) {
    s.since = now; s.t0 = recordStart; s.t1 = recordStart;
    // "Older than staleness_ms": due 1 ms past it (at exactly staleness_ms
    // old a session is not stale yet).
    tern.timer("age:" + timerKey(line), now + param("staleness_ms", 3600000) + 1);
  }
  s.n = s.n + 1;
  s.usage = s.usage + usage;
  if (seqno < s.lo) s.lo = seqno;
  if (seqno > s.hi) s.hi = seqno;
  if (recordStart < s.t0) s.t0 = recordStart;
  if (recordStart > s.t1) s.t1 = recordStart;
  s.last = now;
  if (s.n == s.hi - s.wm) maybeCut(fieldString(line, 0), fieldString(line, 1), timerKey(line), s, now);
  s.save(line, keyLen2);
}

/** The session's key as a string ("sessionId:sessionStartUTC"), for timer names. */
function timerKey(line: usize): string { return key(fieldString(line, 0), fieldString(line, 1)); }

/** A bad row's session fields and seqno. */
function recordFields(line: usize, seqno: i32): string {
  return sessionFields(fieldString(line, 0), fieldString(line, 1)) + `,"seqno":${seqno}`;
}


export function on_timer(nameLen: i32, atMs: i64): void {
  triggerLen = -1;
  const name = tern.timerName(nameLen);
  const now = tern.now();
  if (name.startsWith("gc:")) {
    const k = name.slice(3), c = k.indexOf(":");
    tern.stateDelete(k.slice(0, c) + "," + k.slice(c + 1));
    return;
  }
  if (!name.startsWith("age:")) return;
  const sessionKey = name.slice(4);
  const colonAt = sessionKey.indexOf(":");
  const stateKey = String.UTF8.encode(sessionKey.slice(0, colonAt) + "," + sessionKey.slice(colonAt + 1));
  const s = Session.load(changetype<usize>(stateKey), stateKey.byteLength);
  if (s == null) return;
  if (s.n == 0) return;
  const colon = sessionKey.indexOf(":");
  const sessionId = sessionKey.slice(0, colon), start = sessionKey.slice(colon + 1);
  if (s.n == s.hi - s.wm) {
    emitRow("AGE", sessionId, start, s, now);
  } else {
    let missing = "";
    for (let i = s.wm + 1; i <= s.hi; i++) {
      if (!s.pending(i)) missing += (missing.length > 0 ? "," : "") + i.toString();
    }
    bad("LATE", `${sessionFields(sessionId, start)},"min_seqno":${s.wm + 1},"max_seqno":${s.hi},"missing_seqnos":[${missing}]`, now, sessionId);
  }
  cut(s, sessionKey);
  s.save(changetype<usize>(stateKey), stateKey.byteLength);
}
