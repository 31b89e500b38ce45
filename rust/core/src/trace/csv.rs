//! CSV records as Python's `csv.reader` (the `excel` dialect, not strict) splits them.
//!
//! Python feeds the reader lines split at `\n`, `\r\n` or a lone `\r`, and runs a state
//! machine over their characters: a field is quoted only when `"` is its first
//! character; inside quotes `""` is one `"` and line ends are kept; after the closing
//! quote, anything before the next `,` or line end is appended as it is (`"ab"c` is `abc`);
//! a `"` inside an unquoted field is an ordinary character. The same machine runs here over
//! the whole text. A run of line ends (`\r\n\n`) may end a record here where Python also
//! yields empty records between them: the trace reader skips those, and no line number
//! is kept, because any error is reported by the Python reader. A quoted field still open
//! at the end of the text is left to Python.

/// One record: its fields, unquoted, end to end in `buf`.
#[derive(Debug, Default)]
pub(crate) struct Record {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl Record {
    /// How many fields.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Field `k`.
    pub(crate) fn field(&self, k: usize) -> &[u8] {
        let start = if k == 0 { 0 } else { self.ends[k - 1] };
        &self.buf[start..self.ends[k]]
    }

    fn end_field(&mut self) {
        self.ends.push(self.buf.len());
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    StartRecord,
    StartField,
    InField,
    InQuoted,
    QuoteInQuoted,
}

fn is_line_end(c: u8) -> bool {
    c == b'\r' || c == b'\n'
}

/// Call `each` with every record of `text`, in order; stops at its first `None`, and
/// returns `None` then or when a quoted field is still open at the end.
pub(crate) fn for_each_record(
    text: &[u8],
    mut each: impl FnMut(&Record) -> Option<()>,
) -> Option<()> {
    let mut rec = Record::default();
    let mut state = State::StartRecord;
    let mut i = 0;
    while i < text.len() {
        let c = text[i];
        i += 1;
        if state == State::StartRecord {
            if is_line_end(c) {
                continue;
            }
            state = State::StartField;
        }
        let record_done = match state {
            State::StartRecord => false,
            State::StartField | State::InField if is_line_end(c) => true,
            State::StartField | State::InField if c == b',' => {
                rec.end_field();
                state = State::StartField;
                false
            }
            State::StartField if c == b'"' => {
                state = State::InQuoted;
                false
            }
            State::StartField | State::InField => {
                // the rest of an unquoted field, up to its `,` or line end
                let run = text[i..].iter().position(|&b| b == b',' || is_line_end(b));
                let end = run.map_or(text.len(), |n| i + n);
                rec.buf.extend_from_slice(&text[i - 1..end]);
                i = end;
                state = State::InField;
                false
            }
            State::InQuoted => {
                let run = text[i - 1..].iter().position(|&b| b == b'"');
                let end = run.map_or(text.len(), |n| i - 1 + n);
                rec.buf.extend_from_slice(&text[i - 1..end]);
                i = end + 1;
                state = if run.is_some() {
                    State::QuoteInQuoted
                } else {
                    State::InQuoted
                };
                false
            }
            State::QuoteInQuoted => match c {
                b'"' => {
                    rec.buf.push(b'"');
                    state = State::InQuoted;
                    false
                }
                b',' => {
                    rec.end_field();
                    state = State::StartField;
                    false
                }
                _ if is_line_end(c) => true,
                _ => {
                    rec.buf.push(c);
                    state = State::InField;
                    false
                }
            },
        };
        if record_done {
            rec.end_field();
            each(&rec)?;
            rec.buf.clear();
            rec.ends.clear();
            state = State::StartRecord;
        }
    }
    match state {
        State::StartRecord => Some(()),
        State::InQuoted => None,
        _ => {
            rec.end_field();
            each(&rec)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(text: &str) -> Option<Vec<Vec<String>>> {
        let mut out = Vec::new();
        for_each_record(text.as_bytes(), |r| {
            let fields = (0..r.len()).map(|k| String::from_utf8_lossy(r.field(k)).into_owned());
            out.push(fields.collect());
            Some(())
        })?;
        Some(out)
    }

    #[test]
    fn splits_as_python_csv_reader() {
        let cases: &[(&str, &[&[&str]])] = &[
            ("a,b\r\nc,d", &[&["a", "b"], &["c", "d"]]),
            ("a,b\rc,\n", &[&["a", "b"], &["c", ""]]),
            ("\n\r\na\n\n", &[&["a"]]),
            ("\"a,\"\"b\"\"\r\nc\",d\n", &[&["a,\"b\"\r\nc", "d"]]),
            ("\"ab\"c,d", &[&["abc", "d"]]),
            ("a\"b,\"\"", &[&["a\"b", ""]]),
            (" \"a\",", &[&[" \"a\"", ""]]),
            (",", &[&["", ""]]),
            ("\"\"\"\"", &[&["\""]]),
            ("\"a\"\r", &[&["a"]]),
            ("é,\u{2028}\n", &[&["é", "\u{2028}"]]),
        ];
        for (text, want) in cases {
            let want: Vec<Vec<String>> = want
                .iter()
                .map(|r| r.iter().map(|s| (*s).to_owned()).collect())
                .collect();
            assert_eq!(records(text), Some(want), "{text:?}");
        }
        assert_eq!(records("a,\"b\nc"), None);
        assert_eq!(records(""), Some(vec![]));
    }
}
