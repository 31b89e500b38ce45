//! `Chunk` and `Step`: the immutable plan of one engine step.

use chunked_prefill::{Chunk, ChunkedStep};
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::convert::{
    counter, iterate, reduce_new, slow_check, to_bool, to_u128, to_u64, to_usize, Arg, Reduced,
};

fn chunk_repr(c: &Chunk) -> String {
    format!(
        "Chunk(request_id={}, start={}, tokens={}, is_last={})",
        c.request_id,
        c.start,
        c.tokens,
        if c.is_last { "True" } else { "False" }
    )
}

/// One request's share of a step: prompt tokens ``[start, start + tokens)``.
///
/// ``is_last`` is true when the chunk finishes the prompt: the engine samples the
/// request's first output token from this chunk's last position.
#[pyclass(
    name = "Chunk",
    module = "chunked_prefill._core",
    frozen,
    eq,
    ord,
    hash
)]
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PyChunk {
    pub(crate) inner: Chunk,
}

#[pymethods]
impl PyChunk {
    #[new]
    fn new(
        request_id: &Bound<'_, PyAny>,
        start: &Bound<'_, PyAny>,
        tokens: &Bound<'_, PyAny>,
        is_last: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        Ok(Self {
            inner: Chunk {
                request_id: to_u64("request_id", request_id)?,
                start: to_usize("start", start)?,
                tokens: to_usize("tokens", tokens)?,
                is_last: to_bool("is_last", is_last)?,
            },
        })
    }

    /// The request whose prompt this chunk belongs to.
    #[getter]
    fn request_id(&self) -> u64 {
        self.inner.request_id
    }

    /// Position in the prompt of the chunk's first token.
    #[getter]
    fn start(&self) -> usize {
        self.inner.start
    }

    /// How many prompt tokens the chunk holds.
    #[getter]
    fn tokens(&self) -> usize {
        self.inner.tokens
    }

    /// Whether this chunk completes the request's prompt.
    #[getter]
    fn is_last(&self) -> bool {
        self.inner.is_last
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py> {
        let c = &slf.get().inner;
        let args = (c.request_id, c.start, c.tokens, c.is_last);
        Ok((slf.get_type(), args).into_pyobject(slf.py())?.into_any())
    }

    fn __repr__(&self) -> String {
        chunk_repr(&self.inner)
    }
}

/// The plan of one engine step: prefill chunks plus a count of decode tokens.
///
/// The engine runs every chunk in ``chunks`` (in order) and ``decode_tokens`` decode
/// tokens, one for each of that many decoding requests. ``prefill_request_id``,
/// ``prefill_start`` and ``is_last_chunk`` describe the first chunk, as the original did.
///
/// ``chunks`` may be any iterable of ``Chunk``; it is drawn once, item by item, and the first
/// item that is not a ``Chunk`` is refused before the next is drawn.
#[pyclass(name = "Step", module = "chunked_prefill._core", frozen, eq, hash)]
#[derive(PartialEq, Eq, Hash)]
pub(crate) struct PyStep {
    pub(crate) inner: ChunkedStep,
}

#[pymethods]
impl PyStep {
    #[new]
    #[pyo3(
        signature = (*, step_index, decode_tokens, chunks = Arg(None)),
        text_signature = "(*, step_index, decode_tokens, chunks=())"
    )]
    fn new(
        step_index: &Bound<'_, PyAny>,
        decode_tokens: &Bound<'_, PyAny>,
        chunks: Arg<'_>,
    ) -> PyResult<Self> {
        let step_index = to_u128("step_index", step_index)?;
        let decode_tokens = to_usize("decode_tokens", decode_tokens)?;
        let mut items = Vec::new();
        if let Some(chunks) = &chunks.0 {
            for item in iterate("chunks", "Chunk values", chunks)? {
                let item = item?;
                match item.cast::<PyChunk>() {
                    Ok(chunk) => items.push(chunk.get().inner),
                    Err(_) => {
                        slow_check("reject_chunk", "chunks", &item)?;
                    }
                }
            }
        }
        let total: u128 = items.iter().map(|c| c.tokens as u128).sum();
        ChunkedStep::from_chunks(step_index, decode_tokens, items)
            .map(|inner| Self { inner })
            .ok_or_else(|| {
                PyOverflowError::new_err(format!(
                    "prefill_tokens must be at most 18446744073709551615, got {total}"
                ))
            })
    }

    /// Zero-based count of ``next_step`` calls before this one.
    #[getter]
    fn step_index<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        counter(py, self.inner.step_index)
    }

    /// How many decode tokens (one per decoding request) the step runs.
    #[getter]
    fn decode_tokens(&self) -> usize {
        self.inner.decode_tokens
    }

    /// Every prefill chunk of the step, in scheduling order.
    #[getter]
    fn chunks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.chunks.iter().map(|c| PyChunk { inner: *c }))
    }

    /// Total prompt tokens of the step (the sum over ``chunks``).
    #[getter]
    fn prefill_tokens(&self) -> usize {
        self.inner.prefill_tokens
    }

    /// The first chunk's request, or ``None`` for a pure decode step.
    #[getter]
    fn prefill_request_id(&self) -> Option<u64> {
        self.inner.prefill_request_id
    }

    /// Prompt position where the first chunk starts (0 without a chunk).
    #[getter]
    fn prefill_start(&self) -> usize {
        self.inner.prefill_start
    }

    /// Whether the first chunk completes its prompt (``False`` without a chunk).
    #[getter]
    fn is_last_chunk(&self) -> bool {
        self.inner.is_last_chunk
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py> {
        let py = slf.py();
        let step = slf.get();
        let kwargs = PyDict::new(py);
        kwargs.set_item("step_index", counter(py, step.inner.step_index)?)?;
        kwargs.set_item("decode_tokens", step.inner.decode_tokens)?;
        kwargs.set_item("chunks", step.chunks(py)?)?;
        reduce_new(slf.get_type(), PyTuple::empty(py), kwargs)
    }

    fn __repr__(&self) -> String {
        let s = &self.inner;
        let mut chunks: Vec<String> = s.chunks.iter().map(chunk_repr).collect();
        if chunks.len() == 1 {
            chunks[0].push(',');
        }
        format!(
            "Step(step_index={}, decode_tokens={}, prefill_tokens={}, chunks=({}))",
            s.step_index,
            s.decode_tokens,
            s.prefill_tokens,
            chunks.join(", ")
        )
    }
}
