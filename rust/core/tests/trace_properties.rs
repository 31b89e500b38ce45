#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Property tests of the trace reader: rows written in any of the accepted spellings
//! (quoted or not, padded, signed, with a zero fraction or an exponent, CRLF, blank lines,
//! CSV or JSON Lines) read back to exactly the values written, arrival times rounded as
//! Rust's (and Python's) correctly rounded parse; and no input, however broken, panics.
//! The differential test against the Python reader itself is
//! `tests/test_trace_reader.py`.
//!
//! `PROPTEST_CASES` sets the number of cases (default 256 per property).

use std::collections::HashMap;

use chunked_prefill::trace::{read_trace, TraceColumns, TraceFormat};
use proptest::prelude::*;

/// One generated request, and how its numbers are spelled.
#[derive(Debug, Clone)]
struct Row {
    arrival: String,
    prompt: u64,
    output: u64,
    priority: i64,
    session: Option<u8>,
}

fn row() -> impl Strategy<Value = Row> {
    let arrival = prop_oneof![
        (0u64..1000, 0u64..1 << 40, 0usize..10)
            .prop_map(|(i, f, zeros)| format!("{i}.{f}{}", "0".repeat(zeros))),
        "[0-9]{1,9}(\\.[0-9]{0,30})?([eE]-?[0-6])?",
        (0.0f64..1e9).prop_map(|x| format!("{x:?}")),
    ];
    (
        arrival,
        1u64..=i64::MAX as u64,
        1u64..1 << 20,
        any::<i64>(),
        proptest::option::of(0u8..4),
    )
        .prop_map(|(arrival, prompt, output, priority, session)| Row {
            arrival,
            prompt,
            output,
            priority,
            session,
        })
}

/// A whole number's spellings the reader accepts: padded, signed, zero-padded, and (up to
/// 2**53) with a zero fraction or an exponent.
fn spell(value: i128, style: u8) -> String {
    let small = value.unsigned_abs() <= 1 << 53;
    match style % 6 {
        1 => format!(" {value}\t"),
        2 if value >= 0 => format!("+00{value}"),
        3 if small => format!("{value}.000"),
        4 if small && value % 100 == 0 => format!("{}e2", value / 100),
        5 if small => format!("{value}0e-1"),
        _ => value.to_string(),
    }
}

fn expected(rows: &[Row], unit: f64) -> TraceColumns {
    // sessions numbered in order of first appearance, a row without one its own
    let mut ids = HashMap::new();
    let mut next = 0u64;
    let mut take = || {
        next += 1;
        next - 1
    };
    let session = rows
        .iter()
        .map(|r| match r.session {
            Some(s) => *ids.entry(s).or_insert_with(&mut take),
            None => take(),
        })
        .collect();
    let any_session = rows.iter().any(|r| r.session.is_some());
    TraceColumns {
        arrival_s: rows
            .iter()
            .map(|r| r.arrival.parse::<f64>().unwrap() * unit)
            .collect(),
        prompt_tokens: rows.iter().map(|r| r.prompt).collect(),
        output_tokens: rows.iter().map(|r| r.output).collect(),
        cached_tokens: vec![0; rows.len()],
        priority: rows.iter().map(|r| r.priority).collect(),
        session: if any_session { session } else { vec![] },
        ..TraceColumns::default()
    }
}

fn under_limit(rows: &[Row]) -> bool {
    rows.iter()
        .all(|r| r.arrival.parse::<f64>().unwrap() < (1u64 << 53) as f64)
}

fn csv_text(rows: &[Row], styles: &[u8], crlf: bool) -> String {
    let end = if crlf { "\r\n" } else { "\n" };
    let mut text = format!("Arrival_S,\"prompt tokens\",output-len,priority,session_id,note{end}");
    for (k, r) in rows.iter().enumerate() {
        let s = styles[k % styles.len()];
        let session = r.session.map_or(String::new(), |v| format!(" s{v} "));
        let cells = [
            r.arrival.clone(),
            spell(r.prompt.into(), s),
            spell(r.output.into(), s / 6),
            spell(r.priority.into(), s / 36),
            session,
            "\"a \"\"quoted\"\",\r\n note\"".to_owned(),
        ];
        let quoted = cells.iter().enumerate().map(|(i, c)| {
            if s % 2 == 1 && i < 5 {
                format!("\"{c}\"")
            } else {
                c.clone()
            }
        });
        text += &quoted.collect::<Vec<_>>().join(",");
        text += end;
        if s % 7 == 0 {
            text += end; // a blank line
        }
    }
    text
}

fn jsonl_text(rows: &[Row], styles: &[u8]) -> String {
    let mut text = String::new();
    for (k, r) in rows.iter().enumerate() {
        let s = styles[k % styles.len()];
        let prompt = if s % 2 == 0 {
            r.prompt.to_string()
        } else {
            // a raw tab is a control character, which JSON strings may not hold
            format!("\"{}\"", spell(r.prompt.into(), s).replace('\t', " "))
        };
        let session = r.session.map_or("null".to_owned(), |v| format!("\"s{v}\""));
        let arrival = format!("\"{}\"", r.arrival);
        text += &format!(
            "{{\"ts\": {arrival}, \"input_length\": {prompt}, \"output_length\": {}, \
             \"priority\": {}, \"session\": {session}, \"x\": [{{\"y\": null}}, \"\\u00e9\"]}}\r\n",
            r.output, r.priority
        );
    }
    text
}

proptest! {
    #[test]
    fn csv_rows_read_back_exactly(
        rows in prop::collection::vec(row(), 1..40),
        styles in prop::collection::vec(any::<u8>(), 1..8),
        crlf in any::<bool>(),
        unit in prop_oneof![Just(1.0), Just(1e-3), Just(1e-6)],
    ) {
        prop_assume!(under_limit(&rows));
        let text = csv_text(&rows, &styles, crlf);
        let got = read_trace(text.as_bytes(), TraceFormat::Csv, unit);
        prop_assert_eq!(got, Some(expected(&rows, unit)), "{}", text);
    }

    #[test]
    fn jsonl_rows_read_back_exactly(
        rows in prop::collection::vec(row(), 1..40),
        styles in prop::collection::vec(any::<u8>(), 1..8),
        unit in prop_oneof![Just(1.0), Just(1e-3), Just(1e-6)],
    ) {
        prop_assume!(under_limit(&rows));
        let text = jsonl_text(&rows, &styles);
        let got = read_trace(text.as_bytes(), TraceFormat::Jsonl, unit);
        prop_assert_eq!(got, Some(expected(&rows, unit)), "{}", text);
    }

    #[test]
    fn no_input_panics(data in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = read_trace(&data, TraceFormat::Csv, 1.0);
        let _ = read_trace(&data, TraceFormat::Jsonl, 1.0);
    }

    #[test]
    fn no_text_of_trace_characters_panics(
        text in "[\\[\\]{}\",:0-9.eE+\\- \r\n\\\\ntruefalsNIity_a-z]{0,200}",
        head in prop_oneof![Just(""), Just("arrival_s,prompt_tokens,output_tokens,hash_ids\n")],
    ) {
        let text = format!("{head}{text}");
        let _ = read_trace(text.as_bytes(), TraceFormat::Csv, 1.0);
        let _ = read_trace(text.as_bytes(), TraceFormat::Jsonl, 1.0);
    }
}
