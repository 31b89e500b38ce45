//! The serving scheduler's sequence arguments as Rust values: prompts, sampled token ids and
//! `finished` ids.
//!
//! Each is converted before the scheduler's lock is taken (the conversion may run Python
//! code: `__index__`, `__iter__`, a mapping's `items`). Plain lists and tuples of plain ints
//! and 1-D numpy integer arrays take a fast path; anything else, and every value the fast
//! path refuses, goes through the shared checks of `chunked_prefill._validate`, so both
//! backends accept the same values and raise the same messages.

use chunked_prefill::serving::Batch;
use chunked_prefill::{CoreError, Prompt};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyTuple};

use crate::convert::{core_err, iterate, to_u64, type_error};

fn validate<'py>(py: Python<'py>, func: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("chunked_prefill._validate")?.getattr(func)
}

/// The ids of a list or tuple of plain ints in `0..=u32::MAX`, or `None` for anything else.
fn plain_ids(obj: &Bound<'_, PyAny>) -> Option<Vec<u32>> {
    fn each<'py>(len: usize, items: impl Iterator<Item = Bound<'py, PyAny>>) -> Option<Vec<u32>> {
        let mut ids = Vec::with_capacity(len);
        for item in items {
            if !item.is_exact_instance_of::<PyInt>() {
                return None;
            }
            ids.push(item.extract::<u32>().ok()?);
        }
        Some(ids)
    }
    if let Ok(list) = obj.cast_exact::<PyList>() {
        // By index: the list iterator asks the list's length again at every item (a sixth
        // of the conversion). No Python code runs in the loop, so the length holds.
        let len = list.len();
        let ids = each(len, (0..len).map_while(|i| list.get_item(i).ok()))?;
        (ids.len() == len).then_some(ids)
    } else if let Ok(tuple) = obj.cast_exact::<PyTuple>() {
        each(tuple.len(), tuple.iter())
    } else {
        None
    }
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

/// `update`'s `token_ids`, owned.
pub(crate) enum Tokens {
    None,
    Aligned(Vec<u32>),
    ByRequest(Vec<(u64, u32)>),
}

impl Tokens {
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
pub(crate) fn to_tokens(batch: &Batch, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Tokens> {
    let Some(obj) = obj.filter(|obj| !obj.is_none()) else {
        return Ok(Tokens::None);
    };
    let py = obj.py();
    let expected = batch.sampling_ids().len();
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
        // Sorted once, so that a mapping of every sampling id costs n log n, not n^2.
        let mut sampled = batch.sampling_ids().to_vec();
        sampled.sort_unstable();
        let mut pairs = Vec::new();
        for pair in items.try_iter()? {
            let (key, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
            let request_id = to_u64("token_ids key", &key)?;
            if sampled.binary_search(&request_id).is_err() {
                let step_index = batch.step_index();
                return Err(core_err(CoreError::TokenIdsNotSampled {
                    request_id,
                    step_index,
                }));
            }
            let token = to_token(&value, || format!("token_ids[{request_id}]"))?;
            pairs.push((request_id, token));
        }
        return Ok(Tokens::ByRequest(pairs));
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

/// A token id, named `name()` in an error (the name is built only then).
fn to_token(obj: &Bound<'_, PyAny>, name: impl FnOnce() -> String) -> PyResult<u32> {
    if obj.is_exact_instance_of::<PyInt>() {
        if let Ok(token) = obj.extract::<u32>() {
            return Ok(token);
        }
    }
    validate(obj.py(), "as_token")?
        .call1((name(), obj))?
        .extract()
}

/// `update`'s `finished`: any iterable of ids, each named `finished[i]`; absent, none (an
/// explicit `None` is no iterable, so it is refused, as on the twin).
pub(crate) fn to_ids(name: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<u64>> {
    let Some(obj) = obj else {
        return Ok(Vec::new());
    };
    let mut ids = Vec::new();
    for (i, item) in iterate(name, "request ids", obj)?.enumerate() {
        let item = item?;
        let plain = item.is_exact_instance_of::<PyInt>();
        match plain.then(|| item.extract::<u64>().ok()).flatten() {
            Some(id) => ids.push(id),
            None => ids.push(to_u64(&format!("{name}[{i}]"), &item)?),
        }
    }
    Ok(ids)
}
