//! The trace's fields, their column names, and one row's cells turned into columns.

use std::collections::HashMap;

use super::json::array_items;
use super::number::{is_py_space, name, py_strip, seconds, whole};
use super::TraceColumns;

/// The fields a trace column may name, in the order of the Python reader's
/// `FIELD_ALIASES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Arrival,
    Prompt,
    Output,
    Cached,
    Priority,
    HashIds,
    Session,
    Prefix,
    PrefixTokens,
}

/// How many [`Field`]s there are.
pub(crate) const FIELDS: usize = 9;

/// Every accepted column name, normalised (see [`normalise`]): `FIELD_ALIASES` of
/// `chunked_prefill.sim.workload`, which the Python tests compare against this table.
const ALIASES: [(Field, &[&str]); FIELDS] = [
    (
        Field::Arrival,
        &[
            "arrivals",
            "arrival",
            "arrivaltime",
            "arrivaltimes",
            "arrivedat",
            "timestamp",
            "time",
            "times",
            "ts",
        ],
    ),
    (
        Field::Prompt,
        &[
            "prompttokens",
            "promptlen",
            "promptlength",
            "inputtokens",
            "inputlen",
            "inputlength",
            "numprefilltokens",
            "numinputtokens",
            "numprompttokens",
            "contexttokens",
            "requesttokens",
        ],
    ),
    (
        Field::Output,
        &[
            "outputtokens",
            "outputlen",
            "outputlength",
            "numdecodetokens",
            "numoutputtokens",
            "generatedtokens",
            "completiontokens",
            "responsetokens",
            "decodetokens",
        ],
    ),
    (
        Field::Cached,
        &["cachedtokens", "numcachedtokens", "prefixcachedtokens"],
    ),
    (Field::Priority, &["priority"]),
    (Field::HashIds, &["hashids", "blockhashes", "prefixhashes"]),
    (
        Field::Session,
        &["sessionid", "session", "conversationid", "convid", "chatid"],
    ),
    (
        Field::Prefix,
        &["prefixid", "prefixgroup", "systempromptid"],
    ),
    (
        Field::PrefixTokens,
        &[
            "prefixtokens",
            "prefixlen",
            "prefixlength",
            "systemprompttokens",
        ],
    ),
];

/// The field a column name names: its lower-cased letters and digits compared with
/// [`ALIASES`]. `Err(())` for a name that is not all ASCII, whose lower case and
/// alphanumerics follow Unicode's rules (`"\u{212a}"`, the Kelvin sign, lowers to `k`):
/// left to the Python reader.
pub(crate) fn field_of(column: &[u8]) -> Result<Option<Field>, ()> {
    if !column.is_ascii() {
        return Err(());
    }
    let norm: Vec<u8> = column
        .iter()
        .filter(|b| b.is_ascii_alphanumeric())
        .map(u8::to_ascii_lowercase)
        .collect();
    Ok(ALIASES
        .iter()
        .find(|(_, names)| names.iter().any(|n| n.as_bytes() == norm))
        .map(|&(field, _)| field))
}

/// The fields whose absence or emptiness is an error.
pub(crate) const REQUIRED: [Field; 3] = [Field::Arrival, Field::Prompt, Field::Output];

/// One cell as the reader found it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cell<'a> {
    /// A CSV cell or a JSON string without escapes.
    Text(&'a [u8]),
    /// A JSON number's text, as written.
    Number(&'a [u8]),
    /// A JSON array (its text, brackets included), for `hash_ids`.
    Array(&'a [u8]),
}

/// The columns being built, and the names seen so far with their dense ids.
pub(crate) struct Builder {
    out: TraceColumns,
    unit: f64,
    sessions: HashMap<Box<[u8]>, u64>,
    /// Sessions numbered so far: a row without one takes the next number for itself.
    next_session: u64,
    any_session: bool,
    prefixes: HashMap<Box<[u8]>, i64>,
}

const MAX_TOKENS: i128 = i64::MAX as i128;

/// A name's dense id: the next one when it is new.
fn dense<T: Copy>(ids: &mut HashMap<Box<[u8]>, T>, key: &[u8], next: T) -> T {
    if let Some(&id) = ids.get(key) {
        return id;
    }
    ids.insert(key.into(), next);
    next
}

impl Builder {
    pub(crate) fn new(unit: f64) -> Self {
        Builder {
            out: TraceColumns::default(),
            unit,
            sessions: HashMap::new(),
            next_session: 0,
            any_session: false,
            prefixes: HashMap::new(),
        }
    }

    /// Add one row, its cells indexed by [`Field`]; `None` for anything the Python reader
    /// would refuse or that is left to it.
    pub(crate) fn add(&mut self, cells: &[Option<Cell<'_>>; FIELDS]) -> Option<()> {
        // Python's order: an empty text is a missing cell; then a number is read.
        let given = |f: Field| match cells[f as usize] {
            Some(Cell::Text(t)) if py_strip(t).is_empty() => None,
            other => other,
        };
        let number = |f: Field| match given(f) {
            Some(Cell::Text(t) | Cell::Number(t)) => Some(Some(t)),
            Some(Cell::Array(_)) => None, // a list where a number belongs
            None => Some(None),
        };
        let required = |f: Field| number(f).flatten();
        let arrival = seconds(required(Field::Arrival)?, self.unit)?;
        let prompt = whole(required(Field::Prompt)?, 1, MAX_TOKENS)?;
        let output = whole(required(Field::Output)?, 1, MAX_TOKENS)?;
        let cached = number(Field::Cached)?.map_or(Some(0), |t| whole(t, 0, prompt))?;
        let priority = number(Field::Priority)?
            .map_or(Some(0), |t| whole(t, i128::from(i64::MIN), MAX_TOKENS))?;
        if let Some(t) = number(Field::PrefixTokens)? {
            let shared = whole(t, 0, MAX_TOKENS)? as u64;
            if *self.out.prefix_tokens.get_or_insert(shared) != shared {
                return None;
            }
        }
        self.hashes(given(Field::HashIds))?;
        let session = key(given(Field::Session))?;
        let prefix = key(given(Field::Prefix))?;
        // The ranges checked above are those of the columns' types.
        self.out.arrival_s.push(arrival);
        self.out.prompt_tokens.push(prompt as u64);
        self.out.output_tokens.push(output as u64);
        self.out.cached_tokens.push(cached as u64);
        self.out.priority.push(priority as i64);
        let next = self.next_session;
        let id = session.map_or(next, |k| dense(&mut self.sessions, k, next));
        self.next_session += u64::from(id == next);
        self.any_session |= session.is_some();
        self.out.session.push(id);
        let next = self.prefixes.len() as i64;
        let group = prefix.map_or(-1, |k| dense(&mut self.prefixes, k, next));
        self.out.group.push(group);
        Some(())
    }

    fn hashes(&mut self, cell: Option<Cell<'_>>) -> Option<()> {
        let hash = |t: &[u8]| whole(t, 0, i128::from(u64::MAX)).map(|v| v as u64);
        match cell {
            None => {}
            Some(Cell::Number(_)) => return None, // a number where a list belongs
            Some(Cell::Array(text)) => {
                for item in array_items(text)? {
                    self.out.hash_ids.push(hash(item)?);
                }
            }
            Some(Cell::Text(t)) => {
                let t = py_strip(t);
                if t.first() == Some(&b'[') {
                    return self.hashes(Some(Cell::Array(t)));
                }
                if !t.is_ascii() {
                    return None; // str.split() splits at Unicode whitespace too
                }
                let separator = |b: &u8| is_py_space(*b) || b";|".contains(b);
                for item in t.split(separator).filter(|s| !s.is_empty()) {
                    self.out.hash_ids.push(hash(item)?);
                }
            }
        }
        self.out.hash_offsets.push(self.out.hash_ids.len());
        Some(())
    }

    /// The finished columns; empty columns for what no row gave.
    pub(crate) fn finish(mut self) -> Option<TraceColumns> {
        if self.out.arrival_s.is_empty() {
            return None;
        }
        if !self.any_session {
            self.out.session.clear();
        }
        if self.prefixes.is_empty() {
            self.out.group.clear();
        }
        if self.out.hash_ids.is_empty() {
            self.out.hash_offsets.clear();
        } else {
            self.out.hash_offsets.insert(0, 0);
        }
        Some(self.out)
    }
}

/// A session or prefix id: `None` inside when absent.
fn key(cell: Option<Cell<'_>>) -> Option<Option<&[u8]>> {
    match cell {
        None => Some(None),
        Some(Cell::Text(t)) => name(t).map(Some),
        Some(Cell::Number(t)) => Some(Some(t)),
        Some(Cell::Array(_)) => None,
    }
}
