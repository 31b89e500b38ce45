//! JSON values as Python's `json.loads` (its C scanner, `strict=True`) accepts them, with
//! the trace reader's hooks: every number kept as its text, a key named twice refused.
//!
//! Accepted as Python accepts them: whitespace ` \t\n\r`, numbers
//! `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, `NaN`, `Infinity`, `-Infinity`, strings
//! without control characters whose escapes are `\" \\ \/ \b \f \n \r \t \uXXXX` (lone
//! surrogates included). Left to the Python reader (`None`): a key holding an escape (two
//! keys may then be equal once decoded), nesting deeper than [`MAX_DEPTH`] (Python's
//! limit depends on its stack), and, in a field the reader uses, a string holding an
//! escape or a value that is not a number, a string, an array or `null`.

use super::fields::{field_of, Cell, Field, FIELDS, REQUIRED};
use std::collections::HashMap;

/// Deeper nesting is left to the Python reader.
const MAX_DEPTH: usize = 200;

/// A value, as far as the trace reader cares.
#[derive(Debug, Clone, Copy)]
enum Value<'a> {
    Cell(Cell<'a>),
    Null,
    /// `true`, `false`, an object, `NaN`/`Infinity`, or a string holding an escape.
    Other,
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek() == Some(c)).then(|| self.i += 1)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.s[self.i..]
            .starts_with(word)
            .then(|| self.i += word.len())
    }

    fn digits(&mut self) -> usize {
        let n = self.s[self.i..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        self.i += n;
        n
    }

    /// A number's text; the parts Python backtracks over (`1.`, `1e`) are left for the
    /// caller, which finds no `,` there and refuses the line.
    fn number(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        let _ = self.eat(b'-');
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') && self.s.get(self.i + 1).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let mark = self.i;
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                self.i = mark;
            }
        }
        Some(&self.s[start..self.i])
    }

    /// A string's text between its quotes, and whether it holds an escape.
    fn string(&mut self) -> Option<(&'a [u8], bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            let c = self.peek()?;
            self.i += 1;
            match c {
                b'"' => return Some((&self.s[start..self.i - 1], escaped)),
                0..=0x1f => return None,
                b'\\' => {
                    escaped = true;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        b'u' => {
                            let hex = self.s.get(self.i + 1..self.i + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.i += 5;
                        }
                        _ => return None,
                    }
                }
                _ => {}
            }
        }
    }

    fn value(&mut self, depth: usize) -> Option<Value<'a>> {
        let start = self.i;
        Some(match self.peek()? {
            b'"' => match self.string()? {
                (text, false) => Value::Cell(Cell::Text(text)),
                (_, true) => Value::Other,
            },
            b'{' => {
                self.object(depth + 1, |_, _| Some(()))?;
                Value::Other
            }
            b'[' => {
                self.array(depth + 1, |_| Some(()))?;
                Value::Cell(Cell::Array(&self.s[start..self.i]))
            }
            b'n' => self.literal(b"null").map(|()| Value::Null)?,
            b't' => self.literal(b"true").map(|()| Value::Other)?,
            b'f' => self.literal(b"false").map(|()| Value::Other)?,
            b'N' => self.literal(b"NaN").map(|()| Value::Other)?,
            b'I' => self.literal(b"Infinity").map(|()| Value::Other)?,
            b'-' if self.s[self.i..].starts_with(b"-Infinity") => {
                self.i += 9;
                Value::Other
            }
            _ => Value::Cell(Cell::Number(self.number()?)),
        })
    }

    /// An object; `member` sees each key and value. `None` for a key named twice.
    fn object(
        &mut self,
        depth: usize,
        mut member: impl FnMut(&'a [u8], Value<'a>) -> Option<()>,
    ) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        let mut keys: Vec<&[u8]> = Vec::new();
        loop {
            let (key, escaped) = self.string()?;
            if escaped || keys.contains(&key) {
                return None;
            }
            keys.push(key);
            self.ws();
            self.eat(b':')?;
            self.ws();
            let value = self.value(depth)?;
            member(key, value)?;
            self.ws();
            if self.eat(b'}').is_some() {
                return Some(());
            }
            self.eat(b',')?;
            self.ws();
        }
    }

    /// An array; `item` sees each value.
    fn array(&mut self, depth: usize, mut item: impl FnMut(Value<'a>) -> Option<()>) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            let value = self.value(depth)?;
            item(value)?;
            self.ws();
            if self.eat(b']').is_some() {
                return Some(());
            }
            self.eat(b',')?;
            self.ws();
        }
    }

    fn at_end(&mut self) -> Option<()> {
        self.ws();
        (self.i == self.s.len()).then_some(())
    }
}

/// The items of a JSON array of numbers and strings without escapes (a `hash_ids` cell),
/// each a number's text or a string's; `None` otherwise.
pub(crate) fn array_items(text: &[u8]) -> Option<Vec<&[u8]>> {
    let mut p = Parser { s: text, i: 0 };
    let mut items = Vec::new();
    p.ws();
    p.array(1, |v| match v {
        Value::Cell(Cell::Number(t) | Cell::Text(t)) => {
            items.push(t);
            Some(())
        }
        _ => None,
    })?;
    p.at_end()?;
    Some(items)
}

/// The field each key of a line's object names; keys borrow the whole text, so a file
/// whose lines repeat the same keys looks each one up once.
pub(crate) type KeyCache<'a> = HashMap<&'a [u8], Option<Field>>;

/// The cells of one JSON Lines record (`line` without its line end, not blank), indexed
/// by field; `None` when the Python reader would refuse it or it is left to that reader.
pub(crate) fn record<'a>(
    line: &'a [u8],
    cache: &mut KeyCache<'a>,
) -> Option<[Option<Cell<'a>>; FIELDS]> {
    let mut p = Parser { s: line, i: 0 };
    let mut cells: [Option<Cell<'a>>; FIELDS] = [None; FIELDS];
    let mut named = [false; FIELDS];
    p.ws();
    p.object(1, |key, value| {
        let field = match cache.get(key) {
            Some(&f) => f,
            None => *cache.entry(key).or_insert(field_of(key).ok()?),
        };
        let Some(field) = field else { return Some(()) };
        if std::mem::replace(&mut named[field as usize], true) {
            return None; // two keys name one field
        }
        cells[field as usize] = match value {
            Value::Cell(cell) => Some(cell),
            Value::Null => None,
            Value::Other => return None,
        };
        Some(())
    })?;
    p.at_end()?;
    REQUIRED.iter().all(|&f| named[f as usize]).then_some(cells)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts(line: &str) -> bool {
        record(line.as_bytes(), &mut KeyCache::new()).is_some()
    }

    #[test]
    fn accepts_what_python_json_accepts() {
        let base = r#""arrival_s": 1, "prompt_tokens": 2, "output_tokens": 3"#;
        for extra in [
            r#""x": NaN"#,
            r#""x": -Infinity"#,
            r#""x": [1, {"a": [true, false, null]}, "\ud800\n\u00e9"]"#,
            r#""x": -0.5e-7"#,
            "\"x\": \"\u{2028}\"",
            r#""x": {}"#,
        ] {
            assert!(accepts(&format!("{{{base}, {extra}}}")), "{extra}");
        }
        assert!(accepts(&format!(" \t{{{base}}}\r ")));
    }

    #[test]
    fn refuses_what_python_json_refuses() {
        let base = r#""arrival_s": 1, "prompt_tokens": 2, "output_tokens": 3"#;
        for extra in [
            r#""x": 01"#,
            r#""x": 1."#,
            r#""x": 1e"#,
            r#""x": .5"#,
            r#""x": +1"#,
            r#""x": nan"#,
            r#""x": [1,]"#,
            r#""x": "\x""#,
            r#""x": "\u12G4""#,
            "\"x\": \"\t\"",
            r#""x": {"a": 1, "a": 2}"#,
            r#""arrival_s": 1"#,
            r#""x": 1, "x": 2"#,
            r#""arrival\u005fs": 1"#,
        ] {
            assert!(!accepts(&format!("{{{base}, {extra}}}")), "{extra}");
        }
        assert!(!accepts(&format!("{{{base}}} x")));
        assert!(!accepts(&format!("{{{base},}}")));
        assert!(!accepts(&format!("[{{{base}}}]")));
        let deep = format!("{{{base}, \"x\": {}{}}}", "[".repeat(300), "]".repeat(300));
        assert!(!accepts(&deep));
    }

    #[test]
    fn array_items_are_numbers_and_plain_strings() {
        assert_eq!(
            array_items(b"[1, \"2\" ,3e0]"),
            Some(vec![&b"1"[..], b"2", b"3e0"])
        );
        assert_eq!(array_items(b"[]"), Some(vec![]));
        assert_eq!(array_items(b"[1] x"), None);
        assert_eq!(array_items(b"[[1]]"), None);
        assert_eq!(array_items(b"[null]"), None);
    }
}
