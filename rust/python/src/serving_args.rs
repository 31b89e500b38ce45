//! The serving scheduler's sequence arguments as Rust values: prompts, sampled token ids and
//! `finished` ids.
//!
//! Each is converted before the scheduler's lock is taken (the conversion may run Python
//! code: `__index__`, `__iter__`, a mapping's `items`). Plain lists and tuples of plain ints
//! and 1-D numpy integer arrays take a fast path; anything else, and every value the fast
//! path refuses, goes through the shared checks of `chunked_prefill._validate`, so both
//! backends accept the same values and raise the same messages.

use std::collections::HashSet;

use chunked_prefill::{CoreError, Prompt};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyTuple};

use crate::convert::{core_err, iterate, type_error};
use crate::serving_ids::{to_id, Failure, Id, Ids};
use crate::serving_values::PyBatch;

fn validate<'py>(py: Python<'py>, func: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("chunked_prefill._validate")?.getattr(func)
}

/// The ids of a list or tuple of plain ints in `0..=u32::MAX`, or `None` for anything else.
///
/// A list is read as a tuple of its items (one C copy): a tuple's items are read borrowed,
/// where a list's safe accessors take and drop a reference to each item, two calls out of
/// five per id under the stable ABI (a fifth of a step's `update` at 1 024 decodes).
fn plain_ids(obj: &Bound<'_, PyAny>) -> Option<Vec<u32>> {
    let copied;
    let tuple = if let Ok(list) = obj.cast_exact::<PyList>() {
        copied = list.to_tuple();
        &copied
    } else {
        obj.cast_exact::<PyTuple>().ok()?
    };
    let mut ids = Vec::with_capacity(tuple.len());
    for item in tuple.iter_borrowed() {
        if !item.is_exact_instance_of::<PyInt>() {
            return None;
        }
        ids.push(item.extract::<u32>().ok()?);
    }
    Some(ids)
}

/// The ids of a 1-D numpy integer array whose values are all in `0..=u32::MAX`, read from
/// its bytes in one copy; `None` for anything else (numpy is not imported for this).
fn numpy_ids(obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u32>>> {
    let py = obj.py();
    let Ok(numpy) = py.import("sys")?.getattr("modules")?.get_item("numpy") else {
        return Ok(None);
    };
    if !obj.is_instance(&numpy.getattr("ndarray")?)?
        || obj.getattr("ndim")?.extract::<usize>()? != 1
    {
        return Ok(None);
    }
    let dtype = obj.getattr("dtype")?;
    let kind: String = dtype.getattr("kind")?.extract()?;
    let size: usize = dtype.getattr("itemsize")?.extract()?;
    if !dtype.getattr("isnative")?.extract::<bool>()? {
        return Ok(None);
    }
    let bytes = obj.call_method0("tobytes")?;
    let data = bytes.cast::<PyBytes>()?.as_bytes();
    let ids = match (kind.as_str(), size) {
        ("u", 1) => data.iter().map(|&b| Some(u32::from(b))).collect(),
        ("u", 2) => decode(data, |b: [u8; 2]| Some(u32::from(u16::from_ne_bytes(b)))),
        ("u", 4) => decode(data, |b: [u8; 4]| Some(u32::from_ne_bytes(b))),
        ("u", 8) => decode(data, |b: [u8; 8]| u32::try_from(u64::from_ne_bytes(b)).ok()),
        ("i", 1) => data.iter().map(|&b| u32::try_from(b as i8).ok()).collect(),
        ("i", 2) => decode(data, |b: [u8; 2]| u32::try_from(i16::from_ne_bytes(b)).ok()),
        ("i", 4) => decode(data, |b: [u8; 4]| u32::try_from(i32::from_ne_bytes(b)).ok()),
        ("i", 8) => decode(data, |b: [u8; 8]| u32::try_from(i64::from_ne_bytes(b)).ok()),
        _ => None,
    };
    Ok(ids)
}

/// Native-endian values of `N` bytes each, or `None` if `convert` refuses one.
fn decode<const N: usize>(
    data: &[u8],
    convert: impl Fn([u8; N]) -> Option<u32>,
) -> Option<Vec<u32>> {
    let mut ids = Vec::with_capacity(data.len() / N);
    for chunk in data.chunks_exact(N) {
        ids.push(convert(chunk.try_into().ok()?)?);
    }
    Some(ids)
}

/// Token ids of a sequence the caller has accepted as one (see `_validate.is_sequence`),
/// each named `name[i]` in an error.
fn sequence_ids(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    if let Some(ids) = plain_ids(obj) {
        return Ok(ids);
    }
    if let Some(ids) = numpy_ids(obj)? {
        return Ok(ids);
    }
    validate(obj.py(), "as_tokens")?
        .call1((name, obj))?
        .extract()
}

/// A prompt: its token ids, or an int length (the tokens unknown, so never cached).
pub(crate) fn to_prompt(obj: &Bound<'_, PyAny>) -> PyResult<Prompt> {
    if obj.is_exact_instance_of::<PyInt>() {
        if let Ok(len) = obj.extract::<u64>() {
            return Ok(Prompt::Length(len));
        }
    } else if let Some(ids) = plain_ids(obj) {
        return Ok(Prompt::Tokens(ids));
    } else if let Some(ids) = numpy_ids(obj)? {
        return Ok(Prompt::Tokens(ids));
    }
    let value = validate(obj.py(), "as_prompt")?.call1((obj,))?;
    if value.is_instance_of::<PyInt>() {
        Ok(Prompt::Length(value.extract()?))
    } else {
        Ok(Prompt::Tokens(value.extract()?))
    }
}

/// `update`'s `token_ids`, owned, keyed by the caller's ids (`Id`) or the core's (`u64`).
pub(crate) enum Tokens<K> {
    None,
    Aligned(Vec<u32>),
    ByRequest(Vec<(K, u32)>),
}

impl Tokens<Id> {
    /// Keyed by core ids. Every key sampled in the batch, which is the pending one, so the
    /// map knows it (an aborted request's id is kept until `update`); a key it lacks is
    /// handed on as an id the core knows not, which it refuses.
    pub(crate) fn into_core(self, ids: &Ids) -> Tokens<u64> {
        match self {
            Self::None => Tokens::None,
            Self::Aligned(tokens) => Tokens::Aligned(tokens),
            Self::ByRequest(pairs) => Tokens::ByRequest(
                (pairs.iter())
                    .map(|(id, token)| (ids.core_or_next(id), *token))
                    .collect(),
            ),
        }
    }
}

impl Tokens<u64> {
    /// The core's borrowed form.
    pub(crate) fn as_core(&self) -> chunked_prefill::TokenIds<'_> {
        match self {
            Self::None => chunked_prefill::TokenIds::None,
            Self::Aligned(ids) => chunked_prefill::TokenIds::Aligned(ids),
            Self::ByRequest(pairs) => chunked_prefill::TokenIds::ByRequest(pairs),
        }
    }
}

/// `update`'s `token_ids` for `batch`, checked in the contract's order: the type, then an
/// aligned sequence's length and ids, or each mapping key (an id that sampled in `batch`)
/// and its token id, in the mapping's order.
pub(crate) fn to_tokens(batch: &PyBatch, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Tokens<Id>> {
    let Some(obj) = obj.filter(|obj| !obj.is_none()) else {
        return Ok(Tokens::None);
    };
    let py = obj.py();
    let expected = batch.inner.num_sampling();
    if let Some(ids) = plain_ids(obj) {
        if ids.len() != expected {
            let got = ids.len();
            return Err(core_err(CoreError::TokenIdsLength { expected, got }));
        }
        return Ok(Tokens::Aligned(ids));
    }
    // A dict's items are pairs; another mapping's go through the shared check of each pair.
    let items = match obj.cast_exact::<PyDict>() {
        Ok(dict) => Some(dict.items().into_any()),
        Err(_) if obj.hasattr("keys")? && obj.hasattr("items")? => {
            Some(validate(py, "token_pairs")?.call1((obj,))?)
        }
        Err(_) => None,
    };
    if let Some(items) = items {
        return by_request(batch, &items).map(Tokens::ByRequest);
    }
    if !validate(py, "is_sequence")?.call1((obj,))?.is_truthy()? {
        return Err(type_error("token_ids_type", "token_ids", obj));
    }
    let got = obj.len()?;
    if got != expected {
        return Err(core_err(CoreError::TokenIdsLength { expected, got }));
    }
    Ok(Tokens::Aligned(sequence_ids("token_ids", obj)?))
}

/// The pairs of a mapping's `items()`: each key a request id that sampled in `batch`
/// (a set of them built once, so a mapping of every sampling id costs n, not n^2), each
/// value its token id.
fn by_request(batch: &PyBatch, items: &Bound<'_, PyAny>) -> PyResult<Vec<(Id, u32)>> {
    let py = items.py();
    let sampled: HashSet<&Id> = batch.sampling().collect();
    let mut pairs = Vec::new();
    for pair in items.try_iter()? {
        let (key, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
        let id = to_id("token_ids key", &key)?;
        if !sampled.contains(&id) {
            let step_index = batch.inner.step_index();
            let err = CoreError::TokenIdsNotSampled {
                request_id: 0,
                step_index,
            };
            return Err(Failure::new(err, |_| Some(id.clone())).into_py(py));
        }
        let token = to_token(&value, || Ok(format!("token_ids[{}]", id.repr(py)?)))?;
        pairs.push((id, token));
    }
    Ok(pairs)
}

/// A token id, named `name()` in an error (the name is built only then).
fn to_token(obj: &Bound<'_, PyAny>, name: impl FnOnce() -> PyResult<String>) -> PyResult<u32> {
    if obj.is_exact_instance_of::<PyInt>() {
        if let Ok(token) = obj.extract::<u32>() {
            return Ok(token);
        }
    }
    validate(obj.py(), "as_token")?
        .call1((name()?, obj))?
        .extract()
}

/// `update`'s `finished`: any iterable of ids, each named `finished[i]`; absent, none (an
/// explicit `None` is no iterable, so it is refused, as on the twin).
pub(crate) fn to_ids(name: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<Id>> {
    let Some(obj) = obj else {
        return Ok(Vec::new());
    };
    let mut ids = Vec::new();
    for (i, item) in iterate(name, "request ids", obj)?.enumerate() {
        ids.push(to_id(&format!("{name}[{i}]"), &item?)?);
    }
    Ok(ids)
}
