// Ticks for Tern's tests (tests/it/procedures.rs): "arm" sets a timer
// 300 ms of log time ahead; with nothing else written, only the node's
// ticks move the log time there, and the timer's firing emits "fired".
import * as tern from "./tern";
export { input } from "./tern";

export function on_record(keyLen: i32, skLen: i32, valueLen: i32, op: i32, timestampMs: i64, offset: i64): void {
  const key = tern.record(keyLen, skLen, valueLen, op, timestampMs, offset).keyString();
  if (key == "arm") tern.timer("t", tern.now() + 300);
}

export function on_timer(nameLen: i32, atMs: i64): void {
  tern.emit("fired", `{"timer":"${tern.timerName(nameLen)}","at":${atMs},"now":${tern.now()}}`);
}
