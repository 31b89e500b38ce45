//! The core's error texts are the messages of the table the Python backends raise
//! (`python/chunked_prefill/_messages.json`), so both backends say the same thing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use chunked_prefill::CoreError;

const TABLE: &str = include_str!("../../../python/chunked_prefill/_messages.json");

fn render(key: &str, fields: &[(&str, String)]) -> String {
    let table: serde_json::Value = serde_json::from_str(TABLE).unwrap();
    let mut text = table[key].as_str().expect(key).to_owned();
    for (name, value) in fields {
        text = text.replace(&format!("{{{name}}}"), value);
    }
    assert!(!text.contains('{'), "unfilled field in {key}: {text}");
    text
}

/// An error, the key of its message and the fields that fill the message.
type Case = (CoreError, &'static str, Vec<(&'static str, String)>);

#[test]
fn every_core_error_renders_its_table_message() {
    let cases: Vec<Case> = vec![
        (
            CoreError::InvalidChunkSize { value: 0 },
            "chunk_size_zero",
            vec![("value", "0".into())],
        ),
        (
            CoreError::InvalidTokenBudget { value: 0 },
            "token_budget_zero",
            vec![("value", "0".into())],
        ),
        (
            CoreError::TokenBudgetTooSmall {
                token_budget: 64,
                max_decode_tokens: 128,
            },
            "token_budget_too_small",
            vec![
                ("token_budget", "64".into()),
                ("max_decode_tokens", "128".into()),
            ],
        ),
        (
            CoreError::InvalidMaxPrefills { value: 0 },
            "max_prefills_zero",
            vec![("value", "0".into())],
        ),
        (
            CoreError::PrefillsNeedBudget { value: 3 },
            "max_prefills_needs_budget",
            vec![("value", "3".into())],
        ),
        (
            CoreError::InvalidTotalTokens { value: 0 },
            "total_tokens_zero",
            vec![("value", "0".into())],
        ),
        (
            CoreError::CachedExceedsTotal {
                cached_tokens: 11,
                total_tokens: 10,
            },
            "cached_exceeds_total",
            vec![
                ("cached_tokens", "11".into()),
                ("total_tokens", "10".into()),
            ],
        ),
        (
            CoreError::ProcessedOutOfRange {
                processed_tokens: 3,
                start: 4,
                total_tokens: 10,
            },
            "processed_out_of_range",
            vec![
                ("processed_tokens", "3".into()),
                ("start", "4".into()),
                ("total_tokens", "10".into()),
            ],
        ),
        (
            CoreError::CounterTooLarge {
                name: "step_index",
                value: 1 << 127,
            },
            "above_counter",
            vec![
                ("name", "step_index".into()),
                ("value", (1_u128 << 127).to_string()),
            ],
        ),
        (
            CoreError::DuplicateRequest { request_id: 7 },
            "duplicate_request",
            vec![("request_id", "7".into())],
        ),
        (
            CoreError::UnknownRequest {
                request_id: u64::MAX,
            },
            "unknown_request",
            vec![("request_id", u64::MAX.to_string())],
        ),
    ];
    for (err, key, fields) in cases {
        assert_eq!(err.to_string(), render(key, &fields), "{key}");
    }
}
