//! Conversions of Python arguments to Rust values, and of core errors to Python exceptions.
//!
//! Every pyclass of the binding goes through these helpers, so a value is accepted or
//! rejected (with the shared table's message) the same way wherever it is passed.

use chunked_prefill::CoreError;
use pyo3::exceptions::{
    PyKeyError, PyMemoryError, PyOverflowError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyIterator, PyTuple, PyType};

/// The one mapping of core errors to Python exceptions: an unknown id is a `KeyError`, a
/// call out of turn with the pending batch (`schedule`, `update`, `to_state`) a
/// `RuntimeError`, what does not fit in memory (a step, an export too large to list) a
/// `MemoryError`, every other rejected input a `ValueError`; the message is the core's (the
/// table's).
pub(crate) fn core_err(err: CoreError) -> PyErr {
    let text = err.to_string();
    core_err_text(&err, text)
}

/// The exception class `core_err` gives `err`, with the message `text` (the core's, with the
/// caller's id in place of the core's).
pub(crate) fn core_err_text(err: &CoreError, text: String) -> PyErr {
    match err {
        CoreError::UnknownRequest { .. } => PyKeyError::new_err(text),
        CoreError::BatchPending { .. }
        | CoreError::BatchNotPending { .. }
        | CoreError::BatchStale { .. }
        | CoreError::StateBatchPending { .. } => PyRuntimeError::new_err(text),
        CoreError::OutOfMemory { .. } | CoreError::StateTooLarge { .. } => {
            PyMemoryError::new_err(text)
        }
        _ => PyValueError::new_err(text),
    }
}

/// An argument as given, or absent (so an explicit `None` is still checked, not defaulted).
pub(crate) struct Arg<'py>(pub(crate) Option<Bound<'py, PyAny>>);

impl<'a, 'py> FromPyObject<'a, 'py> for Arg<'py> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Arg(Some(obj.to_owned())))
    }
}

/// Run the shared Python check `func` on an argument that missed the fast path: it raises
/// the table's error, or returns the value as a plain `int` (e.g. for a numpy integer).
pub(crate) fn slow_check<'py>(
    func: &str,
    name: &str,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    obj.py()
        .import("chunked_prefill._validate")?
        .getattr(func)?
        .call1((name, obj))
}

/// The `TypeError` of the shared table's message `key` for `obj`, an argument `name` of the
/// wrong type (built by `_validate.type_error`, as the twin builds it).
pub(crate) fn type_error(key: &str, name: &str, obj: &Bound<'_, PyAny>) -> PyErr {
    let built = (obj.py().import("chunked_prefill._validate"))
        .and_then(|validate| validate.getattr("type_error"))
        .and_then(|func| func.call1((key, name, obj)));
    match built {
        Ok(exception) => PyErr::from_value(exception),
        Err(err) => err,
    }
}

/// An iterator over `obj`, an argument `name` that should be an iterable of `what`; a value
/// `iter()` refuses is the table's `TypeError` `not_iterable` (built by the shared check, as
/// the twin builds it). Only `iter()` is guarded: an error while iterating propagates.
pub(crate) fn iterate<'py>(
    name: &str,
    what: &str,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyIterator>> {
    obj.try_iter().map_err(|err| {
        if !err.is_instance_of::<PyTypeError>(obj.py()) {
            return err;
        }
        let built = (obj.py().import("chunked_prefill._validate"))
            .and_then(|validate| validate.getattr("not_iterable"))
            .and_then(|func| func.call1((name, what, obj)));
        match built {
            Ok(exception) => PyErr::from_value(exception),
            Err(err) => err,
        }
    })
}

/// `obj` as an id or count in `0..=u64::MAX`, named `name` in any error. May run Python
/// code (an `__index__`), so call it before taking any lock or borrow.
pub(crate) fn to_u64(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    if obj.is_exact_instance_of::<PyInt>() {
        if let Ok(value) = obj.extract::<u64>() {
            return Ok(value);
        }
    }
    slow_check("as_u64", name, obj)?.extract()
}

/// `obj` as the id `__contains__` looks up: `None` for a value that is not a valid id (so
/// not tracked: `TypeError`, `ValueError` and `OverflowError` of the check); any other error,
/// say from a user's `__index__`, propagates, as it does from the pure twin.
pub(crate) fn lookup_id(obj: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    looked_up(obj.py(), to_u64("request_id", obj))
}

/// The result of converting a looked-up id: `None` when the conversion refused the value as
/// no valid id (`TypeError`, `ValueError`, `OverflowError`), any other error as it is. Both
/// schedulers' `__contains__` share it, so they agree on what "not tracked" means.
pub(crate) fn looked_up<T>(py: Python<'_>, converted: PyResult<T>) -> PyResult<Option<T>> {
    match converted {
        Ok(id) => Ok(Some(id)),
        Err(err) => {
            let invalid = err.is_instance_of::<PyTypeError>(py)
                || err.is_instance_of::<PyValueError>(py)
                || err.is_instance_of::<PyOverflowError>(py);
            if invalid {
                Ok(None)
            } else {
                Err(err)
            }
        }
    }
}

/// `obj` as a token count (`to_u64`, then bounded by this platform's `usize`).
pub(crate) fn to_usize(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    let value = to_u64(name, obj)?;
    usize::try_from(value).map_err(|_| {
        PyOverflowError::new_err(format!(
            "{name} must be at most {}, got {value}",
            usize::MAX
        ))
    })
}

/// `obj` as a signed value in `i64` (a priority), named `name` in any error.
pub(crate) fn to_i64(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    if obj.is_exact_instance_of::<PyInt>() {
        if let Ok(value) = obj.extract::<i64>() {
            return Ok(value);
        }
    }
    slow_check("as_i64", name, obj)?.extract()
}

/// `obj` as a 128-bit counter (a step index), always through the shared check.
pub(crate) fn to_u128(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<u128> {
    slow_check("as_u128", name, obj)?.extract()
}

/// `obj` as a flag: a `bool`, or whatever the shared check accepts as one.
pub(crate) fn to_bool(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    match obj.cast::<PyBool>() {
        Ok(flag) => Ok(flag.is_true()),
        Err(_) => slow_check("as_bool", name, obj)?.extract(),
    }
}

/// An optional keyword as an `i64`, or `default` when it was not passed.
pub(crate) fn i64_or(arg: &Arg<'_>, name: &str, default: i64) -> PyResult<i64> {
    arg.0.as_ref().map_or(Ok(default), |obj| to_i64(name, obj))
}

/// An optional keyword as a `usize`, or `default` when it was not passed.
pub(crate) fn usize_or(arg: &Arg<'_>, name: &str, default: usize) -> PyResult<usize> {
    arg.0
        .as_ref()
        .map_or(Ok(default), |obj| to_usize(name, obj))
}

/// What `__reduce__` returns: the rebuilding callable and its arguments, as a tuple.
pub(crate) type Reduced<'py> = PyResult<Bound<'py, PyAny>>;

/// A `__reduce__` value that rebuilds an instance of `cls` as `cls.__new__(cls, *args,
/// **kwargs)` with any pickle protocol (protocols 2 and up turn it into their `NEWOBJ` form).
pub(crate) fn reduce_new<'py>(
    cls: Bound<'py, PyType>,
    args: Bound<'py, PyTuple>,
    kwargs: Bound<'py, PyDict>,
) -> Reduced<'py> {
    let py = cls.py();
    let newobj = py.import("copyreg")?.getattr("__newobj_ex__")?;
    Ok((newobj, (cls, args, kwargs)).into_pyobject(py)?.into_any())
}

/// A counter as a Python int: the common case (it fits 64 bits) without the 128-bit path.
pub(crate) fn counter(py: Python<'_>, value: u128) -> PyResult<Bound<'_, PyAny>> {
    Ok(match u64::try_from(value) {
        Ok(small) => small.into_pyobject(py)?.into_any(),
        Err(_) => value.into_pyobject(py)?.into_any(),
    })
}
