//! `ServingScheduler.to_state()` / `from_state()`: the scheduler as plain Python values, in
//! the form of `docs/serving-contract.md` (the twin's, key for key and in the same order).
//!
//! `from_state` checks a state with the shared parser `chunked_prefill._serving_state.parse`
//! (every type, range and rule, with the table's messages, naming the path), then hands the
//! checked values to the core, which rebuilds the scheduler.
//!
//! A state names requests by the caller's ids (an int or a str, so either backend reads
//! it); the core's ids are the binding's own, translated on the way out and given afresh
//! (0..n in list order) on the way in.

use chunked_prefill::serving::{RequestRecord, RequestState, ServingState};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::convert::counter;
use crate::serving_config::PyServingConfig;
use crate::serving_ids::{to_id, Id, Ids};

fn hex(hash: &[u8]) -> String {
    hash.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn request_dict<'py>(py: Python<'py>, r: &RequestRecord, id: &Id) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("request_id", id.to_object(py))?;
    dict.set_item("priority", r.priority)?;
    dict.set_item("cache_salt", r.cache_salt)?;
    dict.set_item("max_new_tokens", r.max_new_tokens)?;
    dict.set_item("prompt_len", r.prompt_len)?;
    dict.set_item("tokens", PyList::new(py, &r.tokens)?)?;
    dict.set_item("num_computed", counter(py, r.num_computed)?)?;
    dict.set_item("state", r.state.as_str())?;
    dict.set_item("block_table", PyList::new(py, &r.block_table)?)?;
    dict.set_item("num_preemptions", counter(py, r.num_preemptions)?)?;
    dict.set_item("num_cached_tokens", counter(py, r.num_cached_tokens)?)?;
    Ok(dict)
}

/// The plain-Python form of an exported state; `ids` are the caller's ids of its requests,
/// in order.
pub(crate) fn to_python<'py>(
    py: Python<'py>,
    state: &ServingState,
    ids: &[Id],
) -> PyResult<Bound<'py, PyAny>> {
    let dict = PyDict::new(py);
    dict.set_item("version", 1)?;
    dict.set_item("kind", "serving")?;
    dict.set_item("config", PyServingConfig::fields(&state.config, py)?)?;
    dict.set_item("step_index", counter(py, state.step_index)?)?;
    dict.set_item("num_preemptions", counter(py, state.num_preemptions)?)?;
    dict.set_item("num_cached_tokens", counter(py, state.num_cached_tokens)?)?;
    let requests = PyList::empty(py);
    for (record, id) in state.requests.iter().zip(ids) {
        requests.append(request_dict(py, record, id)?)?;
    }
    dict.set_item("requests", requests)?;
    dict.set_item("free_queue", PyList::new(py, &state.free_queue)?)?;
    let hashes = PyList::empty(py);
    for (block, hash) in &state.block_hashes {
        hashes.append(PyList::new(
            py,
            [
                block.into_pyobject(py)?.into_any(),
                hex(hash).into_pyobject(py)?.into_any(),
            ],
        )?)?;
    }
    dict.set_item("block_hashes", hashes)?;
    Ok(dict.into_any())
}

/// A state checked by the shared parser, as the core's values, and the ids of its requests
/// (the i-th request's core id is i).
pub(crate) fn from_python(state: &Bound<'_, PyAny>) -> PyResult<(ServingState, Ids)> {
    let py = state.py();
    // The parser builds the config with the twin's class: the checks and messages are the
    // same, and it also gives the watermark blocks the parser's rules need.
    let config_class = py
        .import("chunked_prefill.pure_values")?
        .getattr("ServingConfig")?;
    let parsed = py
        .import("chunked_prefill._serving_state")?
        .getattr("parse")?
        .call1((state, config_class))?;
    let config = parsed.getattr("config")?.call_method0("to_dict")?;
    let config = PyServingConfig::from_fields(&config.cast_into::<PyDict>()?)?;
    let (step_index, num_preemptions, num_cached_tokens): (u128, u128, u128) =
        parsed.getattr("counters")?.extract()?;
    let mut requests = Vec::new();
    let mut ids = Ids::default();
    for (core, request) in (0u64..).zip(parsed.getattr("requests")?.try_iter()?) {
        let request = request?;
        let running: bool = request.getattr("running")?.extract()?;
        // The parser has checked each id and that none repeats.
        ids.intern(to_id("request_id", &request.getattr("request_id")?)?, core);
        requests.push(RequestRecord {
            request_id: core,
            priority: request.getattr("priority")?.extract()?,
            cache_salt: request.getattr("cache_salt")?.extract()?,
            max_new_tokens: request.getattr("max_new_tokens")?.extract()?,
            prompt_len: request.getattr("prompt_len")?.extract()?,
            tokens: request.getattr("tokens")?.extract()?,
            num_computed: request.getattr("num_computed")?.extract()?,
            state: if running {
                RequestState::Running
            } else {
                RequestState::Waiting
            },
            block_table: request.getattr("block_table")?.extract()?,
            num_preemptions: request.getattr("num_preemptions")?.extract()?,
            num_cached_tokens: request.getattr("num_cached_tokens")?.extract()?,
        });
    }
    let free_queue: Vec<usize> = parsed.getattr("free_queue")?.extract()?;
    let mut block_hashes = Vec::new();
    for pair in parsed
        .getattr("hashes")?
        .call_method0("items")?
        .try_iter()?
    {
        let (block, hash): (usize, Vec<u8>) = pair?.extract()?;
        let hash: [u8; 16] = hash.try_into().map_err(|_| {
            pyo3::exceptions::PyValueError::new_err("a block hash must be 16 bytes")
        })?;
        block_hashes.push((block, hash));
    }
    let state = ServingState {
        config,
        step_index,
        num_preemptions,
        num_cached_tokens,
        requests,
        free_queue,
        block_hashes,
    };
    Ok((state, ids))
}
