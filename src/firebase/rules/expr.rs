//! The rule expression language (Firebase's): a tokenizer and a Pratt
//! parser into an AST, checked once when rules are saved.
//!
//! Grammar, lowest precedence first: `a ? b : c`, `||`, `&&`,
//! `== != === !==`, `< <= > >=`, `+ -`, `* / %`, unary `! -`, postfix
//! `.name`, `(args)`, `[index]`; literals: numbers, 'strings' and
//! "strings", true, false, null, `[list]`, and `/regex/flags` as the
//! argument of `matches`.

use std::sync::Arc;

/// The most bytes one expression may have (Firebase bounds a rules file at
/// 256 KiB; each expression is far smaller in practice).
pub const EXPR_BYTES_MAX: usize = 16 * 1024;
/// The deepest nesting the parser follows.
const NESTING_MAX: usize = 64;

#[derive(Debug, Clone)]
pub enum Expr {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Regex(Arc<regex::Regex>),
    List(Vec<Expr>),
    Var(String),
    Member(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    Call(Box<Expr>, Vec<Expr>),
    Not(Box<Expr>),
    Neg(Box<Expr>),
    Binary(Op, Box<Expr>, Box<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Num(f64),
    Str(String),
    Ident(String),
    Regex(String, String),
    Punct(&'static str),
}

const PUNCTS: [&str; 24] =
    ["===", "!==", "==", "!=", "<=", ">=", "&&", "||", "<", ">", "+", "-", "*", "/", "%", "!", "?", ":", ".", ",", "(", ")", "[", "]"];

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            tokens.push(Token::Num(text.parse().map_err(|_| format!("bad number {text:?}"))?));
        } else if c == '\'' || c == '"' {
            let mut s = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err("unterminated string".into()),
                    Some(&q) if q == c => break,
                    Some('\\') => {
                        let escaped = chars.get(i + 1).ok_or("unterminated string")?;
                        s.push(match escaped {
                            'n' => '\n',
                            't' => '\t',
                            other => *other,
                        });
                        i += 2;
                        continue;
                    }
                    Some(&other) => s.push(other),
                }
                i += 1;
            }
            i += 1;
            tokens.push(Token::Str(s));
        } else if c.is_alphabetic() || c == '_' || c == '$' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$') {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == '/' && matches!(tokens.last(), Some(Token::Punct("(" | "," | "!" | "&&" | "||")) | None) {
            // A regex literal: where a value is expected, not after one.
            let mut pattern = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err("unterminated regular expression".into()),
                    Some('/') => break,
                    Some('\\') => {
                        pattern.push('\\');
                        pattern.push(*chars.get(i + 1).ok_or("unterminated regular expression")?);
                        i += 2;
                        continue;
                    }
                    Some(&other) => pattern.push(other),
                }
                i += 1;
            }
            i += 1;
            let start = i;
            while i < chars.len() && chars[i].is_ascii_alphabetic() {
                i += 1;
            }
            tokens.push(Token::Regex(pattern, chars[start..i].iter().collect()));
        } else {
            let rest: String = chars[i..chars.len().min(i + 3)].iter().collect();
            let punct = PUNCTS.iter().find(|p| rest.starts_with(**p)).ok_or_else(|| format!("unexpected character {c:?}"))?;
            i += punct.chars().count();
            tokens.push(Token::Punct(punct));
        }
    }
    Ok(tokens)
}

/// Parses one rule expression.
pub fn parse(text: &str) -> Result<Expr, String> {
    if text.len() > EXPR_BYTES_MAX {
        return Err(format!("expression longer than {EXPR_BYTES_MAX} bytes"));
    }
    let tokens = tokenize(text)?;
    let mut parser = Parser { tokens, at: 0, depth: 0 };
    let expr = parser.expr(0)?;
    if parser.at != parser.tokens.len() {
        return Err(format!("unexpected {:?} after the expression", parser.tokens[parser.at]));
    }
    Ok(expr)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
}

fn binary_op(token: &Token) -> Option<(Op, u8)> {
    let Token::Punct(p) = token else { return None };
    Some(match *p {
        "||" => (Op::Or, 2),
        "&&" => (Op::And, 3),
        "==" | "===" => (Op::Eq, 4),
        "!=" | "!==" => (Op::Ne, 4),
        "<" => (Op::Lt, 5),
        "<=" => (Op::Le, 5),
        ">" => (Op::Gt, 5),
        ">=" => (Op::Ge, 5),
        "+" => (Op::Add, 6),
        "-" => (Op::Sub, 6),
        "*" => (Op::Mul, 7),
        "/" => (Op::Div, 7),
        "%" => (Op::Rem, 7),
        _ => return None,
    })
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn eat(&mut self, punct: &str) -> bool {
        if self.peek() == Some(&Token::Punct(leak(punct))) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, punct: &str) -> Result<(), String> {
        if self.eat(punct) {
            Ok(())
        } else {
            Err(format!("expected {punct:?}, found {:?}", self.peek()))
        }
    }

    fn expr(&mut self, min: u8) -> Result<Expr, String> {
        self.depth += 1;
        if self.depth > NESTING_MAX {
            return Err(format!("expression nested deeper than {NESTING_MAX}"));
        }
        let mut left = self.unary()?;
        loop {
            if min <= 1 && self.eat("?") {
                let then = self.expr(0)?;
                self.expect(":")?;
                let otherwise = self.expr(1)?;
                left = Expr::Cond(Box::new(left), Box::new(then), Box::new(otherwise));
                continue;
            }
            let Some((op, precedence)) = self.peek().and_then(binary_op) else { break };
            if precedence < min.max(2) {
                break;
            }
            self.at += 1;
            let right = self.expr(precedence + 1)?;
            left = Expr::Binary(op, Box::new(left), Box::new(right));
        }
        self.depth -= 1;
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.eat("!") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if self.eat("-") {
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        let mut e = self.primary()?;
        loop {
            if self.eat(".") {
                match self.peek().cloned() {
                    Some(Token::Ident(name)) => {
                        self.at += 1;
                        e = Expr::Member(Box::new(e), name);
                    }
                    other => return Err(format!("expected a name after '.', found {other:?}")),
                }
            } else if self.eat("(") {
                let args = self.list(")")?;
                e = Expr::Call(Box::new(e), args);
            } else if self.eat("[") {
                let index = self.expr(0)?;
                self.expect("]")?;
                e = Expr::Index(Box::new(e), Box::new(index));
            } else {
                return Ok(e);
            }
        }
    }

    fn list(&mut self, close: &str) -> Result<Vec<Expr>, String> {
        let mut items = Vec::new();
        if self.eat(close) {
            return Ok(items);
        }
        loop {
            items.push(self.expr(0)?);
            if self.eat(close) {
                return Ok(items);
            }
            self.expect(",")?;
        }
    }

    fn primary(&mut self) -> Result<Expr, String> {
        let token = self.peek().cloned().ok_or("unexpected end of the expression")?;
        self.at += 1;
        Ok(match token {
            Token::Num(n) => Expr::Num(n),
            Token::Str(s) => Expr::Str(s),
            Token::Regex(pattern, flags) => {
                let mut builder = regex::RegexBuilder::new(&pattern);
                builder.case_insensitive(flags.contains('i')).size_limit(1 << 20);
                Expr::Regex(Arc::new(builder.build().map_err(|e| format!("bad regular expression /{pattern}/: {e}"))?))
            }
            Token::Ident(name) => match name.as_str() {
                "true" => Expr::Bool(true),
                "false" => Expr::Bool(false),
                "null" => Expr::Null,
                _ => Expr::Var(name),
            },
            Token::Punct("(") => {
                let e = self.expr(0)?;
                self.expect(")")?;
                e
            }
            Token::Punct("[") => Expr::List(self.list("]")?),
            other => return Err(format!("unexpected {other:?}")),
        })
    }
}

/// The static spelling of a punctuation token.
fn leak(punct: &str) -> &'static str {
    PUNCTS.iter().find(|p| **p == punct).copied().expect("the parser names only known punctuation")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_firebase_expressions() {
        for ok in [
            "auth != null && auth.uid == $uid",
            "newData.child('name').isString() && newData.child('name').val().length < 100",
            "data.exists() ? data.val() + 1 === newData.val() : newData.val() == 1",
            "root.child('users/' + auth.uid).hasChildren(['a', 'b'])",
            "newData.val().matches(/^[a-z]+$/i)",
            "!(a || b) && -1 < 2 * 3 % 4",
            "auth.token['email'] == 'x'",
        ] {
            parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in ["auth ==", "a.(b)", "'open", "a ? b", "(a", "/[/", "a @ b"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse(&"(".repeat(100)).unwrap_err().contains("nested"));
    }
}
