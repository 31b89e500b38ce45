//! Trace files (CSV and JSON Lines) read into columns, fast, for the forms that can be
//! proved to read exactly as the reference reader does.
//!
//! The reference is the Python reader `chunked_prefill.sim.workload.load_trace`: it
//! defines which files are accepted, the values read and every error message (`FILE:LINE:
//! field 'NAME': problem`). [`read_trace`] reads a file the same way or answers `None`,
//! "not mine": for any file that reader would refuse, and for any form whose reading here
//! is not provably identical (ISO-8601 date-times, a column name or an id that is not
//! ASCII, a JSON key or field value holding an escape, a quoted CSV field still open at
//! the end, numbers with exponents of 7 digits or more, `-0` and times from 2**53 up).
//! The caller then runs the Python reader, which reads the file or raises its error, so
//! errors never differ and only an accepted file takes the fast path.
//!
//! What is proved to match, part by part (private modules): `csv` (Python's `csv.reader` state machine),
//! `json` (Python's `json.loads` with the reader's exact-number and duplicate-key hooks),
//! `number` (`str.strip()`, the reader's number grammar, its whole-number rule, and
//! `float()`, which rounds correctly as Rust's `f64` parsing does) and `fields` (the
//! column names, required and optional cells, dense ids). No line number is kept: only
//! errors carry one, and they come from the Python reader.

mod csv;
mod fields;
mod json;
mod number;

use fields::{field_of, Builder, Cell, FIELDS, REQUIRED};

/// A trace file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// A header row, then one request per row.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

/// A trace's requests as columns, in file order (request `i` is the `i`-th data row).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceColumns {
    /// Arrival time in seconds (the number read, times the time unit), in `[0, 2**53)`.
    pub arrival_s: Vec<f64>,
    /// Prompt length, in `[1, 2**63 - 1]`.
    pub prompt_tokens: Vec<u64>,
    /// Tokens to generate, in `[1, 2**63 - 1]`.
    pub output_tokens: Vec<u64>,
    /// Prompt tokens already cached, in `[0, prompt]` (0 where not given).
    pub cached_tokens: Vec<u64>,
    /// Scheduling priority, lower first (0 where not given).
    pub priority: Vec<i64>,
    /// Shared-prefix group, numbered in order of first appearance, -1 for none; empty
    /// when no row gives a `prefix_id`.
    pub group: Vec<i64>,
    /// Session, numbered in order of first appearance (a row without one is a session of
    /// its own); empty when no row gives a `session_id`.
    pub session: Vec<u64>,
    /// Row `i`'s block hashes are `hash_ids[hash_offsets[i]..hash_offsets[i + 1]]`; both
    /// empty when no row has any.
    pub hash_offsets: Vec<usize>,
    /// Every row's block hashes, end to end.
    pub hash_ids: Vec<u64>,
    /// The `prefix_tokens` column's value (the same on every row that gives it).
    pub prefix_tokens: Option<u64>,
}

/// The trace in `data` (a file's bytes; `unit`: seconds per number of its time column),
/// or `None` when it is not provably read as the Python reader reads it (see the module
/// docs), which includes every file that reader refuses.
pub fn read_trace(data: &[u8], format: TraceFormat, unit: f64) -> Option<TraceColumns> {
    let data = data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data); // utf-8-sig
    let text = std::str::from_utf8(data).ok()?.as_bytes();
    if text.contains(&0) {
        return None; // refused before reading (a binary file)
    }
    let mut rows = Builder::new(unit);
    match format {
        TraceFormat::Csv => read_csv(text, &mut rows)?,
        TraceFormat::Jsonl => read_jsonl(text, &mut rows)?,
    }
    rows.finish()
}

fn read_jsonl(text: &[u8], rows: &mut Builder) -> Option<()> {
    let mut cache = json::KeyCache::new();
    // Records end at "\n" only (see the Python reader), a "\r" before it dropped.
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(|&b| b == b' ' || b == b'\t') {
            continue;
        }
        rows.add(&json::record(line, &mut cache)?)?;
    }
    Some(())
}

/// A CSV header's columns: for each field, the column holding it.
fn header_columns(header: &csv::Record) -> Option<[Option<usize>; FIELDS]> {
    let mut columns = [None; FIELDS];
    for k in 0..header.len() {
        if let Some(field) = field_of(number::py_strip(header.field(k))).ok()? {
            if columns[field as usize].replace(k).is_some() {
                return None; // two columns name one field
            }
        }
    }
    REQUIRED
        .iter()
        .all(|&f| columns[f as usize].is_some())
        .then_some(columns)
}

fn read_csv(text: &[u8], rows: &mut Builder) -> Option<()> {
    let mut header: Option<(usize, [Option<usize>; FIELDS])> = None;
    csv::for_each_record(text, |record| {
        let blank = |k| number::py_strip(record.field(k)).is_empty();
        if (0..record.len()).all(blank) {
            return Some(());
        }
        let Some((width, columns)) = header else {
            header = Some((record.len(), header_columns(record)?));
            return Some(());
        };
        if record.len() != width {
            return None; // a ragged row
        }
        rows.add(&columns.map(|c| c.map(|k| Cell::Text(record.field(k)))))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "\u{feff}arrival_s,Prompt Tokens,output_len,cached_tokens,priority,\
        session_id,prefix_id,prefix_tokens,hash_ids,text\r\n\
        0.5,10,2,,,s1,,,1 2;3,\"a, \"\"quoted\"\"\r\ntext\"\r\n\
        ,,,,,,,,,\r\n\
        \r\n\
        1.5e3, 12 ,3,4,-7,,g,4,[4],\r\n\
        2,+5,1.0e1,0,0, s1 ,g,4,,x\r\n";

    #[test]
    fn reads_every_column() {
        let got = read_trace(CSV.as_bytes(), TraceFormat::Csv, 1e-3);
        let want = TraceColumns {
            arrival_s: vec![0.5 * 1e-3, 1500.0 * 1e-3, 2.0 * 1e-3],
            prompt_tokens: vec![10, 12, 5],
            output_tokens: vec![2, 3, 10],
            cached_tokens: vec![0, 4, 0],
            priority: vec![0, -7, 0],
            group: vec![-1, 0, 0],
            session: vec![0, 1, 0],
            hash_offsets: vec![0, 3, 4, 4],
            hash_ids: vec![1, 2, 3, 4],
            prefix_tokens: Some(4),
        };
        assert_eq!(got, Some(want));
    }

    #[test]
    fn jsonl_reads_the_same_values() {
        let text = "{\"ts\": 0.5, \"input_length\": 10, \"output_length\": \"2\", \
            \"session\": \"s1\", \"hash_ids\": [1, 2, \"3\"], \"x\": {\"y\": null}}\r\n\
            \n \t\n\
            {\"ts\": 1, \"input_length\": 12, \"output_length\": 3, \"session\": null}";
        let got = read_trace(text.as_bytes(), TraceFormat::Jsonl, 1.0).unwrap_or_default();
        assert_eq!(got.arrival_s, [0.5, 1.0]);
        assert_eq!(got.output_tokens, [2, 3]);
        assert_eq!(got.session, [0, 1]);
        assert_eq!(got.hash_offsets, [0, 3, 3]);
        assert!(got.group.is_empty() && got.prefix_tokens.is_none());
    }

    #[test]
    fn leaves_to_python_what_it_cannot_prove() {
        let head = "arrival_s,prompt_tokens,output_tokens,session_id\n";
        for row in [
            "2024-01-01T00:00:00,1,1,", // a date-time
            "1,1,1,\u{3000}",           // str.strip() removes U+3000
            "1,0,1,",                   // an error: prompt 0
            "1,1,1.5,",                 // an error: a fraction
            "1,1,1e20,",                // an error: an exponent above 2**53
            "1,1,1",                    // an error: a ragged row
            "-1,1,1,",                  // an error: a negative time
            "-0,1,1,",                  // -0.0: left to Python
            "1,1_000,1,",               // an error: Python's int() would take it
            "1,1,1,\"a",                // a quote still open at the end
        ] {
            let text = format!("{head}{row}\n");
            assert_eq!(
                read_trace(text.as_bytes(), TraceFormat::Csv, 1.0),
                None,
                "{row}"
            );
        }
        for text in [
            "",
            "\n\n",
            "x,y\n",
            "arrival_s,ts,prompt_tokens,output_tokens\n1,1,1,1\n",
        ] {
            assert_eq!(
                read_trace(text.as_bytes(), TraceFormat::Csv, 1.0),
                None,
                "{text}"
            );
        }
        assert_eq!(read_trace(b"a\xff", TraceFormat::Csv, 1.0), None);
        let jsonl = "{\"arrival_s\": 1, \"prompt_tokens\": 1, \"output_tokens\": 1}\n";
        assert!(read_trace(jsonl.as_bytes(), TraceFormat::Jsonl, 1.0).is_some());
        let prefix = "{\"arrival_s\": 1, \"prompt_tokens\": 1, \"output_tokens\": 1, ";
        for tail in [
            "\"x\": 1\u{2028}}",
            "\"priority\": true}",
            "\"prefix_tokens\": 1.5}",
        ] {
            let text = format!("{prefix}{tail}\n");
            assert_eq!(
                read_trace(text.as_bytes(), TraceFormat::Jsonl, 1.0),
                None,
                "{tail}"
            );
        }
    }
}
