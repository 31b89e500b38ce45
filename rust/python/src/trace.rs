//! `read_trace`: the core's fast trace reader ([`chunked_prefill::trace`]) for
//! `chunked_prefill.sim.workload.load_trace`, which falls back on its Python reader when
//! this one answers `None`. Columns come back as tuples, the type of `Workload`'s fields,
//! so the caller stores them as they are.

use chunked_prefill::trace::{read_trace as read, TraceColumns, TraceFormat};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// The columns of the trace in ``data`` (a file's bytes) as ``(arrival_s, prompt_tokens,
/// output_tokens, cached_tokens, priority, group, session, hash_ids, prefix_tokens)``, or
/// ``None`` when the file is not provably read as the Python reader reads it (including
/// every file that reader refuses). ``unit``: seconds per number of the time column.
#[pyfunction]
pub(crate) fn read_trace<'py>(
    py: Python<'py>,
    data: &[u8],
    format: &str,
    unit: f64,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let format = match format {
        "csv" => TraceFormat::Csv,
        "jsonl" => TraceFormat::Jsonl,
        _ => {
            return Err(PyValueError::new_err(format!(
                "format must be 'csv' or 'jsonl', got {format:?}"
            )))
        }
    };
    match py.detach(|| read(data, format, unit)) {
        Some(columns) => columns_tuple(py, &columns).map(Some),
        None => Ok(None),
    }
}

fn columns_tuple<'py>(py: Python<'py>, c: &TraceColumns) -> PyResult<Bound<'py, PyTuple>> {
    let hashes = c.hash_offsets.windows(2).map(|w| &c.hash_ids[w[0]..w[1]]);
    let hash_ids = PyTuple::new(
        py,
        hashes
            .map(|h| PyTuple::new(py, h))
            .collect::<PyResult<Vec<_>>>()?,
    )?;
    (
        PyTuple::new(py, &c.arrival_s)?,
        PyTuple::new(py, &c.prompt_tokens)?,
        PyTuple::new(py, &c.output_tokens)?,
        PyTuple::new(py, &c.cached_tokens)?,
        PyTuple::new(py, &c.priority)?,
        PyTuple::new(py, &c.group)?,
        PyTuple::new(py, &c.session)?,
        hash_ids,
        c.prefix_tokens,
    )
        .into_pyobject(py)
}
