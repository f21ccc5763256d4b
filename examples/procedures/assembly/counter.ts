// A small procedure for Tern's tests (src/procedure/tests.rs): counts the
// puts under "in/", emits what it saw, and fails on the value "boom".
import * as tern from "./tern";
export { input } from "./tern";

export function on_record(keyLen: i32, skLen: i32, valueLen: i32, op: i32, timestampMs: i64, offset: i64): void {
  const r = tern.record(keyLen, skLen, valueLen, op, timestampMs, offset);
  const key = r.keyString();
  if (r.op != tern.OP_PUT || !key.startsWith("in/")) return;
  const current = tern.get("count", "");
  const n = current == null ? 0 : I32.parseInt(current);
  tern.put("count", "", (n + 1).toString());
  const value = r.valueString()!;
  tern.emit("seen", `{"key":"${key}","v":${value},"n":${n + 1},"now":${tern.now()}}`, key);
  const seen = tern.stateGet("seen");
  const total = seen == null ? 1 : load<i32>(changetype<usize>(seen)) + 1;
  const next = new ArrayBuffer(4);
  store<i32>(changetype<usize>(next), total);
  tern.statePut("seen", next);
  if (value == "\"boom\"") abort("asked to fail");
}
