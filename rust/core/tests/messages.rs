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
        (
            CoreError::CountZero {
                name: "max_prefills_per_step",
                value: 0,
            },
            "count_zero",
            vec![
                ("name", "max_prefills_per_step".into()),
                ("value", "0".into()),
            ],
        ),
        (
            CoreError::MaxRunningTooLarge {
                max_running: 256,
                token_budget: 128,
            },
            "max_running_too_large",
            vec![
                ("max_running", "256".into()),
                ("token_budget", "128".into()),
            ],
        ),
        (
            CoreError::WatermarkRange { value: 1.5 },
            "watermark_range",
            vec![("value", "1.5".into())],
        ),
        (CoreError::PromptEmpty, "prompt_empty", vec![]),
        (CoreError::MaxNewTokensZero, "max_new_tokens_zero", vec![]),
        (
            CoreError::ServingDuplicate { request_id: 3 },
            "serving_duplicate",
            vec![("request_id", "3".into())],
        ),
        (
            CoreError::RequestPending {
                request_id: 3,
                step_index: 9,
            },
            "request_pending",
            vec![("request_id", "3".into()), ("step_index", "9".into())],
        ),
        (
            CoreError::RequestNeverFits {
                request_id: 4,
                prompt_tokens: 100,
                max_new_tokens: 29,
                needed: 8,
                block_size: 16,
                usable: 6,
                num_blocks: 8,
                watermark_blocks: 2,
            },
            "request_never_fits",
            vec![
                ("request_id", "4".into()),
                ("prompt_tokens", "100".into()),
                ("max_new_tokens", "29".into()),
                ("needed", "8".into()),
                ("block_size", "16".into()),
                ("usable", "6".into()),
                ("num_blocks", "8".into()),
                ("watermark_blocks", "2".into()),
            ],
        ),
        (
            CoreError::FinishedDuplicate { request_id: 5 },
            "finished_duplicate",
            vec![("request_id", "5".into())],
        ),
        (
            CoreError::TokenIdsLength {
                expected: 2,
                got: 3,
            },
            "token_ids_length",
            vec![("expected", "2".into()), ("got", "3".into())],
        ),
        (
            CoreError::TokenIdsNotSampled {
                request_id: 6,
                step_index: 1,
            },
            "token_ids_not_sampled",
            vec![("request_id", "6".into()), ("step_index", "1".into())],
        ),
        (
            CoreError::TokenIdRange {
                name: "token_ids[2]".into(),
                value: 1 << 32,
            },
            "token_id_range",
            vec![
                ("name", "token_ids[2]".into()),
                ("value", "4294967296".into()),
            ],
        ),
        (
            CoreError::BatchPending { step_index: 4 },
            "batch_pending",
            vec![("step_index", "4".into())],
        ),
        (
            CoreError::BatchNotPending { got: 4 },
            "batch_not_pending",
            vec![("got", "4".into())],
        ),
        (
            CoreError::BatchStale {
                got: 3,
                expected: 4,
            },
            "batch_stale",
            vec![("got", "3".into()), ("expected", "4".into())],
        ),
        (
            CoreError::StateBatchPending { step_index: 7 },
            "state_batch_pending",
            vec![("step_index", "7".into())],
        ),
        (
            CoreError::StateRule {
                path: "requests[0].block_table".into(),
                message: "holds 2 blocks, not 1".into(),
            },
            "state_rule",
            vec![
                ("path", "requests[0].block_table".into()),
                ("message", "holds 2 blocks, not 1".into()),
            ],
        ),
        (
            CoreError::OutOfMemory {
                what: "schedule(): a step of 8 KV blocks".into(),
            },
            "out_of_memory",
            vec![("what", "schedule(): a step of 8 KV blocks".into())],
        ),
        (
            CoreError::StateTooLarge {
                path: "free_queue".into(),
                len: 1 << 64,
            },
            "state_too_large",
            vec![
                ("path", "free_queue".into()),
                ("len", "18446744073709551616".into()),
            ],
        ),
    ];
    for (err, key, fields) in cases {
        assert_eq!(err.to_string(), render(key, &fields), "{key}");
    }
}

/// The watermark is printed as Python's `repr(float)` prints it (values from CPython).
#[test]
fn watermark_is_printed_like_python_repr() {
    let cases = [
        (1.5, "1.5"),
        (-0.1, "-0.1"),
        (1.0, "1.0"),
        (-0.0, "-0.0"),
        (f64::NAN, "nan"),
        (f64::INFINITY, "inf"),
        (f64::NEG_INFINITY, "-inf"),
        (1e16, "1e+16"),
        (1e-5, "1e-05"),
        (0.0001, "0.0001"),
        (1e22, "1e+22"),
        (123_456_789_012_345_678.0, "1.2345678901234568e+17"),
        (9_999_999_999_999_998.0, "9999999999999998.0"),
        (5e-324, "5e-324"),
        (-2.5e-7, "-2.5e-07"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
    ];
    for (value, python) in cases {
        assert_eq!(chunked_prefill::py_float_repr(value), python);
        let err = CoreError::WatermarkRange { value };
        assert_eq!(
            err.to_string(),
            render("watermark_range", &[("value", python.to_owned())])
        );
    }
}
