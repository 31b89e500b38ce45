//! `Config`: how the planner splits prompts and fills each step.

use chunked_prefill::ChunkedPrefillConfig;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::convert::{core_err, reduce_new, to_bool, to_usize, usize_or, Arg, Reduced};

/// How the scheduler splits prompts and fills each step.
///
/// ``chunk_size``: the most prompt tokens one request receives in one step.
/// ``max_decode_tokens``: the most decode tokens one step runs.
/// ``interleave_decode``: whether steps carry decode tokens at all.
/// ``token_budget``: the most tokens (decode + prefill) one step carries; ``None`` keeps
/// the original rule (one chunk per step, decodes counted beside it).
/// ``max_prefills_per_step``: how many requests may receive a chunk in one step.
#[pyclass(name = "Config", module = "chunked_prefill._core", frozen, eq, hash)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct PyConfig {
    pub(crate) inner: ChunkedPrefillConfig,
}

#[pymethods]
impl PyConfig {
    #[new]
    #[pyo3(signature = (
        *,
        chunk_size = Arg(None),
        max_decode_tokens = Arg(None),
        interleave_decode = Arg(None),
        token_budget = Arg(None),
        max_prefills_per_step = Arg(None),
    ), text_signature = "(*, chunk_size=512, max_decode_tokens=128, interleave_decode=True, \
        token_budget=None, max_prefills_per_step=1)")]
    fn new(
        chunk_size: Arg<'_>,
        max_decode_tokens: Arg<'_>,
        interleave_decode: Arg<'_>,
        token_budget: Arg<'_>,
        max_prefills_per_step: Arg<'_>,
    ) -> PyResult<Self> {
        let defaults = ChunkedPrefillConfig::default();
        let inner = ChunkedPrefillConfig {
            chunk_size: usize_or(&chunk_size, "chunk_size", defaults.chunk_size)?,
            max_decode_tokens: usize_or(
                &max_decode_tokens,
                "max_decode_tokens",
                defaults.max_decode_tokens,
            )?,
            interleave_decode: match &interleave_decode.0 {
                None => defaults.interleave_decode,
                Some(obj) => to_bool("interleave_decode", obj)?,
            },
            token_budget: match &token_budget.0 {
                Some(obj) if !obj.is_none() => Some(to_usize("token_budget", obj)?),
                _ => None,
            },
            max_prefills_per_step: usize_or(
                &max_prefills_per_step,
                "max_prefills_per_step",
                defaults.max_prefills_per_step,
            )?,
        };
        inner.validate().map_err(core_err)?;
        Ok(Self { inner })
    }

    /// The most prompt tokens one request receives in one step.
    #[getter]
    fn chunk_size(&self) -> usize {
        self.inner.chunk_size
    }

    /// The most decode tokens one step runs.
    #[getter]
    fn max_decode_tokens(&self) -> usize {
        self.inner.max_decode_tokens
    }

    /// Whether steps carry decode tokens; when false every step has 0.
    #[getter]
    fn interleave_decode(&self) -> bool {
        self.inner.interleave_decode
    }

    /// The most tokens one step carries, or ``None`` for the original one-chunk rule.
    #[getter]
    fn token_budget(&self) -> Option<usize> {
        self.inner.token_budget
    }

    /// How many requests may receive a prefill chunk in one step.
    #[getter]
    fn max_prefills_per_step(&self) -> usize {
        self.inner.max_prefills_per_step
    }

    /// A copy with ``changes`` applied, validated like the constructor.
    #[pyo3(signature = (**changes))]
    fn replace<'py>(
        slf: &Bound<'py, Self>,
        changes: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let fields = slf.get().to_dict(py)?;
        if let Some(changes) = changes {
            for (key, value) in changes.iter() {
                let name: String = key.extract()?;
                if !fields.contains(&name)? {
                    return Err(PyTypeError::new_err(format!(
                        "Config.replace() got an unexpected keyword argument '{name}'"
                    )));
                }
                fields.set_item(key, value)?;
            }
        }
        py.get_type::<Self>().call((), Some(&fields))
    }

    /// The fields as a dict of plain values (the constructor's keywords).
    pub(crate) fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = &self.inner;
        let dict = PyDict::new(py);
        dict.set_item("chunk_size", c.chunk_size)?;
        dict.set_item("max_decode_tokens", c.max_decode_tokens)?;
        dict.set_item("interleave_decode", c.interleave_decode)?;
        dict.set_item("token_budget", c.token_budget)?;
        dict.set_item("max_prefills_per_step", c.max_prefills_per_step)?;
        Ok(dict)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py> {
        let py = slf.py();
        reduce_new(slf.get_type(), PyTuple::empty(py), slf.get().to_dict(py)?)
    }

    pub(crate) fn __repr__(&self) -> String {
        let c = &self.inner;
        let budget = c
            .token_budget
            .map_or_else(|| "None".to_owned(), |b| b.to_string());
        format!(
            "Config(chunk_size={}, max_decode_tokens={}, interleave_decode={}, \
             token_budget={budget}, max_prefills_per_step={})",
            c.chunk_size,
            c.max_decode_tokens,
            if c.interleave_decode { "True" } else { "False" },
            c.max_prefills_per_step
        )
    }
}
