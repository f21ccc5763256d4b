//! Evaluating rule expressions: values, snapshots and their methods, with a
//! step budget so no rule set can make a request expensive.
//!
//! Firebase's semantics: an expression that fails (a type error, a method
//! on null, the budget spent) counts as false; only a boolean `true` allows.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::expr::{Expr, Op};
use crate::tree::path;
use crate::tree::value::{at_path, set_at_path};

/// Steps (expression nodes evaluated) one request may spend on rules.
pub const STEPS_MAX: u32 = 100_000;
/// Subtree reads one request may make through snapshots.
pub const READS_MAX: u32 = 1_000;

/// Where snapshots read: the current tree, and the tree as the write being
/// checked would leave it.
pub trait Data {
    /// The current value at `sk` (null when absent or unreadable).
    fn current(&self, sk: &str) -> Value;
    /// The current priority of `sk` (null when it has none).
    fn priority(&self, sk: &str) -> Value;
}

/// The pending writes of one request: `(sk, new value)` as sets.
pub struct Pending<'a> {
    /// The values without priorities (what `val()` and `.validate` see).
    pub writes: &'a [(String, Value)],
    /// The same writes as written, with `.priority` and `.value` (what
    /// `getPriority()` sees).
    pub with_priorities: &'a [(String, Value)],
}

impl Pending<'_> {
    /// The priority of `sk` once the writes are applied: as written where a
    /// write covers `sk`, else the current one.
    fn new_priority(&self, sk: &str, current: &dyn Fn(&str) -> Value) -> Value {
        for (at, value) in self.with_priorities {
            if at == sk || path::is_under(sk, at) {
                let node = at_path(value, path::relative(at, sk));
                return node.get(path::PRIORITY_KEY).cloned().unwrap_or(Value::Null);
            }
        }
        current(sk)
    }

    /// The value at `sk` once the writes are applied to `current`.
    fn new_value(&self, sk: &str, current: &dyn Fn(&str) -> Value) -> Value {
        for (at, value) in self.writes {
            if at == sk || path::is_under(sk, at) {
                return at_path(value, path::relative(at, sk));
            }
        }
        let mut base = current(sk);
        for (at, value) in self.writes {
            if path::is_under(at, sk) {
                set_at_path(&mut base, path::relative(sk, at), value.clone());
            }
        }
        base
    }
}

/// What an expression can see, for one request.
pub struct Env<'a> {
    pub auth: &'a Value,
    pub now_ms: u64,
    pub data: &'a dyn Data,
    pub pending: Option<Pending<'a>>,
    steps: Cell<u32>,
    reads: Cell<u32>,
    cache: RefCell<HashMap<(bool, String), Value>>,
    /// Locations whose new priority was read (`new_read`).
    new_priorities: RefCell<Vec<String>>,
}

impl<'a> Env<'a> {
    pub fn new(auth: &'a Value, now_ms: u64, data: &'a dyn Data, pending: Option<Pending<'a>>) -> Env<'a> {
        Env {
            auth,
            now_ms,
            data,
            pending,
            steps: Cell::new(0),
            reads: Cell::new(0),
            cache: RefCell::new(HashMap::new()),
            new_priorities: RefCell::new(Vec::new()),
        }
    }

    pub fn budget_spent(&self) -> bool {
        self.steps.get() >= STEPS_MAX || self.reads.get() >= READS_MAX
    }

    /// The locations whose new data (or new priority) was read, each once.
    pub fn new_read(&self) -> Vec<String> {
        let mut read: Vec<String> = self.cache.borrow().keys().filter(|(new, _)| *new).map(|(_, sk)| sk.clone()).collect();
        read.extend(self.new_priorities.borrow().iter().cloned());
        read.sort();
        read.dedup();
        read
    }

    /// Whether the new data at `sk` is not null (`.validate` is skipped where it is).
    pub fn new_exists(&self, sk: &str) -> bool {
        self.value(true, sk).is_ok_and(|v| !v.is_null())
    }

    fn value(&self, new: bool, sk: &str) -> Result<Value, String> {
        if let Some(v) = self.cache.borrow().get(&(new, sk.to_string())) {
            return Ok(v.clone());
        }
        self.reads.set(self.reads.get() + 1);
        if self.reads.get() > READS_MAX {
            return Err(format!("rules read more than {READS_MAX} locations"));
        }
        let current = |at: &str| self.data.current(at);
        let v = match (&self.pending, new) {
            (Some(pending), true) => pending.new_value(sk, &current),
            _ => current(sk),
        };
        self.cache.borrow_mut().insert((new, sk.to_string()), v.clone());
        Ok(v)
    }

    /// The priority at `sk`, now or once the writes are applied (one read).
    fn priority(&self, new: bool, sk: &str) -> Result<Value, String> {
        self.reads.set(self.reads.get() + 1);
        if self.reads.get() > READS_MAX {
            return Err(format!("rules read more than {READS_MAX} locations"));
        }
        let current = |at: &str| self.data.priority(at);
        if new {
            self.new_priorities.borrow_mut().push(sk.to_string());
        }
        Ok(match (&self.pending, new) {
            (Some(pending), true) => pending.new_priority(sk, &current),
            _ => current(sk),
        })
    }
}

/// The variables of one rule: `data`, `newData` at its location, `$`-vars.
pub struct Scope<'a> {
    pub sk: &'a str,
    pub vars: &'a [(String, String)],
}

#[derive(Debug, Clone)]
enum Val {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Json(Value),
    List(Vec<Val>),
    Regex(Arc<regex::Regex>),
    Snap { new: bool, sk: String },
    Method(Box<Val>, String),
}

fn from_json(v: &Value) -> Val {
    match v {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => Val::Num(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Val::Str(s.clone()),
        other => Val::Json(other.clone()),
    }
}

/// Whether `expr` evaluates to `true` in `scope`.
pub fn allows(expr: &Expr, env: &Env, scope: &Scope) -> bool {
    matches!(eval(expr, env, scope), Ok(Val::Bool(true)))
}

fn eval(expr: &Expr, env: &Env, scope: &Scope) -> Result<Val, String> {
    env.steps.set(env.steps.get() + 1);
    if env.steps.get() > STEPS_MAX {
        return Err(format!("rules took more than {STEPS_MAX} steps"));
    }
    Ok(match expr {
        Expr::Null => Val::Null,
        Expr::Bool(b) => Val::Bool(*b),
        Expr::Num(n) => Val::Num(*n),
        Expr::Str(s) => Val::Str(s.clone()),
        Expr::Regex(r) => Val::Regex(r.clone()),
        Expr::List(items) => Val::List(items.iter().map(|e| eval(e, env, scope)).collect::<Result<_, _>>()?),
        Expr::Var(name) => variable(name, env, scope)?,
        Expr::Member(target, name) => member(eval(target, env, scope)?, name)?,
        Expr::Index(target, index) => match eval(index, env, scope)? {
            Val::Str(name) => member(eval(target, env, scope)?, &name)?,
            other => return Err(format!("cannot index by {other:?}")),
        },
        Expr::Call(target, args) => {
            let Val::Method(receiver, name) = eval(target, env, scope)? else { return Err("not a function".into()) };
            let args: Vec<Val> = args.iter().map(|a| eval(a, env, scope)).collect::<Result<_, _>>()?;
            call(*receiver, &name, args, env)?
        }
        Expr::Not(e) => match eval(e, env, scope)? {
            Val::Bool(b) => Val::Bool(!b),
            other => return Err(format!("! needs a boolean, got {other:?}")),
        },
        Expr::Neg(e) => match eval(e, env, scope)? {
            Val::Num(n) => Val::Num(-n),
            other => return Err(format!("- needs a number, got {other:?}")),
        },
        Expr::Cond(c, then, otherwise) => match eval(c, env, scope)? {
            Val::Bool(true) => eval(then, env, scope)?,
            Val::Bool(false) => eval(otherwise, env, scope)?,
            other => return Err(format!("?: needs a boolean, got {other:?}")),
        },
        Expr::Binary(Op::And, a, b) => match eval(a, env, scope)? {
            Val::Bool(false) => Val::Bool(false),
            Val::Bool(true) => boolean(eval(b, env, scope)?)?,
            other => return Err(format!("&& needs booleans, got {other:?}")),
        },
        Expr::Binary(Op::Or, a, b) => match eval(a, env, scope)? {
            Val::Bool(true) => Val::Bool(true),
            Val::Bool(false) => boolean(eval(b, env, scope)?)?,
            other => return Err(format!("|| needs booleans, got {other:?}")),
        },
        Expr::Binary(op, a, b) => binary(*op, eval(a, env, scope)?, eval(b, env, scope)?)?,
    })
}

fn boolean(v: Val) -> Result<Val, String> {
    match v {
        Val::Bool(_) => Ok(v),
        other => Err(format!("expected a boolean, got {other:?}")),
    }
}

fn variable(name: &str, env: &Env, scope: &Scope) -> Result<Val, String> {
    Ok(match name {
        "auth" => from_json(env.auth),
        "now" => Val::Num(env.now_ms as f64),
        "root" => Val::Snap { new: false, sk: String::new() },
        "data" => Val::Snap { new: false, sk: scope.sk.to_string() },
        "newData" if env.pending.is_some() => Val::Snap { new: true, sk: scope.sk.to_string() },
        var if var.starts_with('$') => match scope.vars.iter().rev().find(|(n, _)| n == var) {
            Some((_, key)) => Val::Str(key.clone()),
            None => return Err(format!("unknown variable {var}")),
        },
        other => return Err(format!("unknown variable {other}")),
    })
}

fn member(target: Val, name: &str) -> Result<Val, String> {
    Ok(match target {
        Val::Json(Value::Object(map)) => map.get(name).map_or(Val::Null, from_json),
        Val::Str(s) if name == "length" => Val::Num(s.chars().count() as f64),
        target @ (Val::Str(_) | Val::Snap { .. }) => Val::Method(Box::new(target), name.to_string()),
        other => return Err(format!("{other:?} has no member {name}")),
    })
}

fn binary(op: Op, a: Val, b: Val) -> Result<Val, String> {
    Ok(match (op, &a, &b) {
        (Op::Eq, _, _) => Val::Bool(equal(&a, &b)),
        (Op::Ne, _, _) => Val::Bool(!equal(&a, &b)),
        (Op::Add, Val::Num(x), Val::Num(y)) => Val::Num(x + y),
        (Op::Add, Val::Str(x), Val::Str(y)) => Val::Str(format!("{x}{y}")),
        (Op::Add, Val::Str(x), Val::Num(y)) => Val::Str(format!("{x}{y}")),
        (Op::Add, Val::Num(x), Val::Str(y)) => Val::Str(format!("{x}{y}")),
        (Op::Sub, Val::Num(x), Val::Num(y)) => Val::Num(x - y),
        (Op::Mul, Val::Num(x), Val::Num(y)) => Val::Num(x * y),
        (Op::Div, Val::Num(x), Val::Num(y)) => Val::Num(x / y),
        (Op::Rem, Val::Num(x), Val::Num(y)) => Val::Num(x % y),
        (Op::Lt | Op::Le | Op::Gt | Op::Ge, Val::Num(x), Val::Num(y)) => Val::Bool(compare(op, x.partial_cmp(y))),
        (Op::Lt | Op::Le | Op::Gt | Op::Ge, Val::Str(x), Val::Str(y)) => Val::Bool(compare(op, Some(x.cmp(y)))),
        _ => return Err(format!("{op:?} does not apply to {a:?} and {b:?}")),
    })
}

fn compare(op: Op, ordering: Option<std::cmp::Ordering>) -> bool {
    use std::cmp::Ordering::*;
    matches!((op, ordering), (Op::Lt, Some(Less)) | (Op::Le, Some(Less | Equal)) | (Op::Gt, Some(Greater)) | (Op::Ge, Some(Greater | Equal)))
}

fn equal(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Null, Val::Null) => true,
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Num(x), Val::Num(y)) => x == y,
        (Val::Str(x), Val::Str(y)) => x == y,
        (Val::Json(x), Val::Json(y)) => x == y,
        _ => false,
    }
}

fn string_arg(args: &[Val], i: usize, method: &str) -> Result<String, String> {
    match args.get(i) {
        Some(Val::Str(s)) => Ok(s.clone()),
        other => Err(format!("{method} needs a string argument, got {other:?}")),
    }
}

fn call(receiver: Val, method: &str, args: Vec<Val>, env: &Env) -> Result<Val, String> {
    match receiver {
        Val::Str(s) => Ok(match method {
            "contains" => Val::Bool(s.contains(&string_arg(&args, 0, method)?)),
            "beginsWith" => Val::Bool(s.starts_with(&string_arg(&args, 0, method)?)),
            "endsWith" => Val::Bool(s.ends_with(&string_arg(&args, 0, method)?)),
            "replace" => Val::Str(s.replace(&string_arg(&args, 0, method)?, &string_arg(&args, 1, method)?)),
            "toLowerCase" => Val::Str(s.to_lowercase()),
            "toUpperCase" => Val::Str(s.to_uppercase()),
            "matches" => match args.first() {
                Some(Val::Regex(r)) => Val::Bool(r.is_match(&s)),
                other => return Err(format!("matches needs a regular expression, got {other:?}")),
            },
            other => return Err(format!("strings have no method {other}")),
        }),
        Val::Snap { new, sk } => {
            let child_sk = |relative: &str| -> Result<String, String> {
                let keys = path::parse_relative(relative)?;
                Ok(path::join(&sk, &path::sk_of(&keys)))
            };
            Ok(match method {
                "val" => from_json(&env.value(new, &sk)?),
                "exists" => Val::Bool(!env.value(new, &sk)?.is_null()),
                "child" => Val::Snap { new, sk: child_sk(&string_arg(&args, 0, method)?)? },
                "parent" => {
                    let keys = path::keys_of(&sk);
                    if keys.is_empty() {
                        return Err("the root has no parent".into());
                    }
                    Val::Snap { new, sk: path::sk_of(&keys[..keys.len() - 1]) }
                }
                "hasChild" => {
                    let at = child_sk(&string_arg(&args, 0, method)?)?;
                    Val::Bool(!env.value(new, &at)?.is_null())
                }
                "hasChildren" => {
                    let value = env.value(new, &sk)?;
                    match args.first() {
                        None => Val::Bool(value.as_object().is_some_and(|m| !m.is_empty()) || value.as_array().is_some_and(|a| !a.is_empty())),
                        Some(Val::List(names)) => {
                            let mut all = value.is_object() || value.is_array();
                            for name in names {
                                let Val::Str(name) = name else { return Err("hasChildren needs a list of strings".into()) };
                                all = all && !at_path(&value, name).is_null();
                            }
                            Val::Bool(all)
                        }
                        Some(other) => return Err(format!("hasChildren needs a list, got {other:?}")),
                    }
                }
                "numChildren" => {
                    let value = env.value(new, &sk)?;
                    Val::Num(value.as_object().map_or(0, |m| m.len()).max(value.as_array().map_or(0, |a| a.len())) as f64)
                }
                "isNumber" => Val::Bool(env.value(new, &sk)?.is_number()),
                "isString" => Val::Bool(env.value(new, &sk)?.is_string()),
                "isBoolean" => Val::Bool(env.value(new, &sk)?.is_boolean()),
                "getPriority" => from_json(&env.priority(new, &sk)?),
                other => return Err(format!("snapshots have no method {other}")),
            })
        }
        other => Err(format!("{other:?} has no method {method}")),
    }
}
