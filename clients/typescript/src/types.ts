/** Any JSON value: what a record holds. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A stored record. `version` is the log offset of the mutation that wrote it. */
export interface Record {
  pk: string;
  sk: string;
  value: Json;
  version: number;
}

/** A record as a read returns it, with the position the read saw. */
export interface ReadRecord extends Record {
  position: string;
}

export interface WriteResult {
  /** The log offset of the write (deletes: undefined). */
  version?: number;
  /** The position just after the write: pass it as `after` to read your write. */
  position: string;
  /** True when an `idempotencyKey` matched an earlier write, which this answer repeats. */
  duplicate?: boolean;
}

export interface WriteOptions {
  /** Apply only if the record is at this version. */
  ifVersion?: number;
  /** Apply only if the record does not exist. */
  ifAbsent?: boolean;
  /** Wait until the node applied the write (conditional writes always do). */
  waitApplied?: boolean;
  /** Makes a retried write apply once (`Idempotency-Key`). */
  idempotencyKey?: string;
}

export interface ReadOptions {
  /** Read-your-writes: wait until the node applied this position. */
  after?: string;
  /** Linearizable read. */
  strong?: boolean;
}

export interface ListOptions extends ReadOptions {
  prefix?: string;
  start?: string;
  end?: string;
  limit?: number;
  cursor?: string;
  reverse?: boolean;
}

export interface ListPage {
  items: Record[];
  next_cursor: string | null;
  position: string;
}

export type BatchOp =
  | { op: "put"; pk: string; sk?: string; value: Json; if_version?: number; if_absent?: boolean }
  | { op: "delete"; pk: string; sk?: string; if_version?: number; if_absent?: boolean };
