// Timers for Tern's tests (src/procedure/tests.rs): "set" sets four,
// "move" moves one and cancels another; each firing emits what fired.
import * as tern from "./tern";
export { input } from "./tern";

export function on_record(keyLen: i32, skLen: i32, valueLen: i32, op: i32, timestampMs: i64, offset: i64): void {
  const key = tern.record(keyLen, skLen, valueLen, op, timestampMs, offset).keyString();
  if (key == "set") {
    tern.timer("b", 5000); tern.timer("a", 5000); tern.timer("late", 9000); tern.timer("gone", 6000);
  } else if (key == "move") {
    tern.timer("late", 7000); tern.cancel("gone");
  }
}

export function on_timer(nameLen: i32, atMs: i64): void {
  const name = tern.timerName(nameLen);
  tern.emit("fired", `${name}@${atMs} now ${tern.now()}`);
  if (name == "a") tern.timer("again", atMs + 1);
}
