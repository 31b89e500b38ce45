//! Request ids as the caller gives them (an int in `0..=u64::MAX`, or a `str`) and the
//! core's ids: the binding interns every id it hands the core, so the core stays on `u64`
//! and knows nothing of Python, and every id given back is the caller's own object.
//!
//! Ints are interned too: a str needs a core id no int can take, and every `u64` is a valid
//! int id. The core never orders by id (ranks are `(priority, seq)`), so interning changes
//! no result; a core id is released when the core forgets the request.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use hashlink::DefaultHashBuilder;
use std::sync::Arc;

use chunked_prefill::serving::Batch;
use chunked_prefill::CoreError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString};

use crate::convert::{core_err_text, looked_up, slow_check};

/// A request id as the caller gave it. Equal and hashed as Python's `==` on an exact
/// `int` or `str` (an int never equals a str, so `1` and `"1"` are two requests).
#[derive(Clone)]
pub(crate) enum Id {
    Int(u64),
    Str(Arc<StrId>),
}

/// A str id: its text as UTF-8 (lone surrogates as `surrogatepass` encodes them, so distinct
/// strs have distinct keys) and the object itself, given back as it came.
pub(crate) struct StrId {
    key: Box<[u8]>,
    obj: Py<PyString>,
}

impl PartialEq for Id {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Int(a), Self::Int(b)) => a == b,
            (Self::Str(a), Self::Str(b)) => a.key == b.key,
            _ => false,
        }
    }
}

impl Eq for Id {}

impl Hash for Id {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Self::Int(v) => (0u8, v).hash(state),
            Self::Str(s) => (1u8, &s.key).hash(state),
        }
    }
}

impl Id {
    /// The id as Python sees it: a plain int, or the caller's str.
    pub(crate) fn to_object<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        match self {
            Self::Int(v) => v
                .into_pyobject(py)
                .map_or_else(|e| match e {}, Bound::into_any),
            Self::Str(s) => s.obj.bind(py).clone().into_any(),
        }
    }

    /// `repr(id)`, as messages and reprs print it (an int's is its digits).
    pub(crate) fn repr(&self, py: Python<'_>) -> PyResult<String> {
        match self {
            Self::Int(v) => Ok(v.to_string()),
            Self::Str(s) => Ok(s.obj.bind(py).repr()?.to_cow()?.into_owned()),
        }
    }
}

fn str_id(s: &Bound<'_, PyString>) -> PyResult<Id> {
    let key: Box<[u8]> = match s.to_cow() {
        Ok(text) => text.as_bytes().into(),
        Err(_) => {
            let bytes = s.call_method1("encode", ("utf-8", "surrogatepass"))?;
            bytes.cast::<PyBytes>()?.as_bytes().into()
        }
    };
    Ok(Id::Str(Arc::new(StrId {
        key,
        obj: s.clone().unbind(),
    })))
}

/// `obj` as a request id, named `name` in an error (the shared `as_request_id` rules: an
/// int as `as_u64` takes it, a str, a str subclass as a plain str). May run Python code,
/// so call it before taking the lock.
pub(crate) fn to_id(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Id> {
    if obj.is_exact_instance_of::<PyInt>() {
        if let Ok(value) = obj.extract::<u64>() {
            return Ok(Id::Int(value));
        }
    }
    if let Ok(s) = obj.cast_exact::<PyString>() {
        return str_id(s);
    }
    let value = slow_check("as_request_id", name, obj)?;
    match value.cast_exact::<PyString>() {
        Ok(s) => str_id(s),
        Err(_) => Ok(Id::Int(value.extract()?)),
    }
}

/// `obj` as the id `__contains__` looks up: `None` for a value that is no valid id (so not
/// tracked), as the twin's `TypeError`, `ValueError` and `OverflowError`; any other error,
/// say from a user's `__index__`, propagates.
pub(crate) fn lookup_id(obj: &Bound<'_, PyAny>) -> PyResult<Option<Id>> {
    looked_up(obj.py(), to_id("request_id", obj))
}

/// The caller's ids of a batch: one per item, in item order, and the preempted ones. A batch
/// keeps them beside the core's, since a batch built in Python has no core ids.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub(crate) struct BatchIds {
    pub(crate) items: Vec<Id>,
    pub(crate) preempted: Vec<Id>,
}

/// The error for a core id the map lacks: a bug of the binding, reported, never a panic.
fn lost(core: u64) -> PyErr {
    PyRuntimeError::new_err(format!(
        "internal error: the core's request {core} has no caller id; please report it"
    ))
}

/// The ids the core knows, both ways. Core ids are indices into `from_core`, reused once
/// released (the core ranks by `(priority, order of add_request)`, never by id): a step
/// finds an item's caller id by indexing, and the table stays as long as the most requests
/// ever tracked at once.
#[derive(Clone, Default)]
pub(crate) struct Ids {
    // foldhash, not SipHash: no caller picks these keys against the table.
    to_core: HashMap<Id, u64, DefaultHashBuilder>,
    from_core: Vec<Option<Id>>,
    /// Released core ids, the next one to hand out last.
    free: Vec<u64>,
    /// Core ids released so far: while it stays, every core id names the caller's id it
    /// named before.
    releases: u64,
}

impl Ids {
    /// The core id of `id`, if the core knows it.
    pub(crate) fn core(&self, id: &Id) -> Option<u64> {
        self.to_core.get(id).copied()
    }

    /// The caller's id of a core id the core reported.
    pub(crate) fn id(&self, core: u64) -> Option<&Id> {
        let at = usize::try_from(core).ok()?;
        self.from_core.get(at)?.as_ref()
    }

    /// The core id `intern` gives the next id (no live request has it).
    fn next(&self) -> u64 {
        (self.free.last().copied()).unwrap_or(self.from_core.len() as u64)
    }

    /// The core id of `id`, or the one it would get (not yet taken: the core knows no such
    /// id, so it reports the id unknown, or `intern` takes it once the core accepts it).
    pub(crate) fn core_or_next(&self, id: &Id) -> u64 {
        self.core(id).unwrap_or_else(|| self.next())
    }

    /// The caller's ids of every core id in `cores`, or the error for a core id not known.
    pub(crate) fn ids(&self, cores: impl IntoIterator<Item = u64>) -> PyResult<Vec<Id>> {
        cores
            .into_iter()
            .map(|core| self.id(core).cloned().ok_or_else(|| lost(core)))
            .collect()
    }

    /// The caller's ids of a batch the core just planned (its requests are all tracked).
    /// Core ids released so far (see `releases`).
    pub(crate) fn releases(&self) -> u64 {
        self.releases
    }

    pub(crate) fn batch_ids(&self, batch: &Batch) -> PyResult<BatchIds> {
        Ok(BatchIds {
            items: self.ids(batch.request_ids())?,
            preempted: self.ids(batch.preempted().iter().copied())?,
        })
    }

    /// How many ids are interned (tracked requests, and aborted ones the pending batch
    /// still names).
    pub(crate) fn len(&self) -> usize {
        self.to_core.len()
    }

    /// Record `id` under `core` (from `core_or_next`, just accepted by the core, or a
    /// restored request's index).
    pub(crate) fn intern(&mut self, id: Id, core: u64) {
        if self.free.last() == Some(&core) {
            self.free.pop();
        }
        let at = usize::try_from(core).unwrap_or(usize::MAX);
        if at >= self.from_core.len() {
            self.from_core.resize(at + 1, None);
        }
        self.from_core[at] = Some(id.clone());
        self.to_core.insert(id, core);
    }

    /// Forget a core id the core has forgotten; its caller's id, to drop without the lock.
    pub(crate) fn release(&mut self, core: u64) -> Option<Id> {
        let id = self
            .from_core
            .get_mut(usize::try_from(core).ok()?)?
            .take()?;
        self.to_core.remove(&id);
        self.free.push(core);
        self.releases += 1;
        Some(id)
    }

    /// Ids not known to the core, numbered past every core id: `finished` may name unknown
    /// ids, which the core must report in its order of checks (duplicates first).
    pub(crate) fn core_or_temporary(&self, ids: &[Id]) -> (Vec<u64>, HashMap<u64, Id>) {
        let mut temporary: HashMap<Id, u64> = HashMap::new();
        let mut names = HashMap::new();
        let cores = ids
            .iter()
            .map(|id| {
                self.core(id).unwrap_or_else(|| {
                    let next = self.from_core.len() as u64 + temporary.len() as u64;
                    let core = *temporary.entry(id.clone()).or_insert(next);
                    names.insert(core, id.clone());
                    core
                })
            })
            .collect();
        (cores, names)
    }
}

/// A core error, with the caller's id of the request it names, if any.
pub(crate) struct Failure {
    err: CoreError,
    id: Option<Id>,
}

fn request_id_mut(err: &mut CoreError) -> Option<&mut u64> {
    match err {
        CoreError::UnknownRequest { request_id }
        | CoreError::ServingDuplicate { request_id }
        | CoreError::RequestPending { request_id, .. }
        | CoreError::RequestNeverFits { request_id, .. }
        | CoreError::FinishedDuplicate { request_id }
        | CoreError::TokenIdsNotSampled { request_id, .. } => Some(request_id),
        _ => None,
    }
}

impl Failure {
    /// `err`, whose core id (if it names one) `name` turns into the caller's id. Pure Rust,
    /// so it may run under the lock.
    pub(crate) fn new(mut err: CoreError, name: impl Fn(u64) -> Option<Id>) -> Self {
        let id = request_id_mut(&mut err).and_then(|core| {
            let id = name(*core)?;
            // An int id prints as the core prints it; a str's place is filled in `into_py`.
            *core = match id {
                Id::Int(v) => v,
                Id::Str(_) => 0,
            };
            Some(id)
        });
        Self { err, id }
    }

    /// [`into_py`](Self::into_py), for a caller without a `Python` token at hand.
    pub(crate) fn into_py_err(self) -> PyErr {
        Python::attach(|py| self.into_py(py))
    }

    /// The Python exception: the core's class and message, the caller's id in it.
    pub(crate) fn into_py(self, py: Python<'_>) -> PyErr {
        match self.id {
            Some(id @ Id::Str(_)) => {
                let text = match id.repr(py) {
                    Ok(repr) => self.err.to_string().replacen(
                        "request_id 0",
                        &format!("request_id {repr}"),
                        1,
                    ),
                    Err(err) => return err,
                };
                core_err_text(&self.err, text)
            }
            _ => crate::convert::core_err(self.err),
        }
    }
}
