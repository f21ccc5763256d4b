// The aggdemo decision for one record (rules 1-4 of issue 23), as a QuickJS
// procedure would see Tern: tern.get/put carry JSON text (JSON.parse and
// JSON.stringify are QuickJS's own, in C), tern.emit sends JSON text.
const QTYCOUNT = 100, USAGE = 1000000, WEEK_MS = 7 * 24 * 3600 * 1000;
function bad(reason, fields) { fields.reason = reason; tern.emit("bad", JSON.stringify(fields)); }
const INT = /^-?\d+$/;
function on_record(line, now) {
  const f = line.split(",");
  if (f.length !== 8) return bad("BADFORMAT", { raw: line });
  if (!INT.test(f[0]) || !INT.test(f[1]) || !INT.test(f[2]) || !INT.test(f[6]) || !INT.test(f[7])) return bad("BADFORMAT", { raw: line });
  const session = +f[0], start = +f[1], seq = +f[2], rstart = +f[6], usage = +f[7], kind = f[5];
  if (seq < 0 || seq > 255 || !(kind === "S" || kind === "I" || kind === "E")) return bad("BADFORMAT", { raw: line });
  if (start < now - WEEK_MS) return bad("LATESESSION", { sessionId: session, sessionStartUTC: start, seqno: seq });
  if (rstart < now - WEEK_MS) return bad("LATERECORD", { sessionId: session, sessionStartUTC: start, seqno: seq });
  const key = f[0] + ":" + f[1];
  const text = tern.get(key);
  let s = text === undefined ? { wm: -1, seen: [0, 0, 0, 0, 0, 0, 0, 0], pend: [0, 0, 0, 0, 0, 0, 0, 0], n: 0, usage: 0,
    lo: 256, hi: -1, t0: rstart, t1: rstart, calling: f[3], dest: f[4], since: now } : JSON.parse(text);
  const w = seq >> 5, b = 1 << (seq & 31);
  if (s.seen[w] & b) return bad("DUP", { sessionId: session, sessionStartUTC: start, seqno: seq });
  if (seq <= s.wm) return bad("TOOLATE", { sessionId: session, sessionStartUTC: start, seqno: seq });
  s.seen[w] |= b; s.pend[w] |= b;
  if (s.n === 0) { s.since = now; s.t0 = rstart; s.t1 = rstart; }
  s.n += 1; s.usage += usage;
  s.lo = Math.min(s.lo, seq); s.hi = Math.max(s.hi, seq);
  s.t0 = Math.min(s.t0, rstart); s.t1 = Math.max(s.t1, rstart);
  if (s.n === s.hi - s.wm) {
    let reason = null;
    if (s.pend[7] & (1 << 31)) reason = "END"; else if (s.n >= QTYCOUNT) reason = "QTY"; else if (s.usage >= USAGE) reason = "USAGE";
    if (reason) {
      tern.emit("aggregated", JSON.stringify({ reason, sessionId: session, sessionStartUTC: start, min_seqno: s.lo, max_seqno: s.hi,
        callingNumber: s.calling, destination: s.dest, startAggTimeUTC: s.t0, endAggTimeUTC: s.t1, recordUsage: s.usage,
        count: s.n, emit_ms: now }));
      s.wm = s.hi; s.pend = [0, 0, 0, 0, 0, 0, 0, 0]; s.n = 0; s.usage = 0; s.lo = 256; s.hi = -1;
    }
  }
  tern.put(key, JSON.stringify(s));
}
