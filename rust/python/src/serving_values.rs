//! `BatchItem`, `Batch` and `RequestView`: the immutable values the serving scheduler returns.
//!
//! A `Batch` keeps its items as Rust values and builds Python objects only for the fields a
//! caller reads, each once: a serving loop that reads `sampling_ids` and the parallel tuples
//! never pays for one `BatchItem` object per item.
//!
//! Request ids here are the caller's (see `serving_ids`): a value keeps its core item with
//! the core's id zeroed, and compares, hashes and prints by the caller's id, so a batch built
//! in Python equals the scheduler's own.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use chunked_prefill::serving::{Batch, BatchItem, RequestView};
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};

use crate::convert::{
    counter, iterate, reduce_new, to_bool, to_u128, to_u64, to_usize, type_error, Reduced,
};
use crate::serving_ids::{to_id, BatchIds, Id};

fn py_bool(value: bool) -> &'static str {
    if value {
        "True"
    } else {
        "False"
    }
}

/// `values` as Python prints a tuple: `()`, `(3,)`, `(3, 4)`.
fn tuple_repr<T: ToString>(values: impl IntoIterator<Item = T>) -> String {
    let parts: Vec<String> = values.into_iter().map(|v| v.to_string()).collect();
    match parts.len() {
        1 => format!("({},)", parts[0]),
        _ => format!("({})", parts.join(", ")),
    }
}

/// The reprs of `ids`, as a tuple of them prints them.
fn id_reprs(py: Python<'_>, ids: &[Id]) -> PyResult<Vec<String>> {
    ids.iter().map(|id| id.repr(py)).collect()
}

/// A tuple of the caller's ids.
fn id_tuple<'a, 'py>(
    py: Python<'py>,
    ids: impl Iterator<Item = &'a Id>,
) -> PyResult<Bound<'py, PyTuple>> {
    let objects: Vec<_> = ids.map(|id| id.to_object(py)).collect();
    PyTuple::new(py, objects)
}

/// An item's fields but its core id: what an item compares and hashes by, beside its
/// caller's id. Destructured in full, so a new field cannot be left out unnoticed.
type ItemKey<'a> = (u128, usize, bool, bool, &'a [usize], u128);

fn item_key(item: &BatchItem) -> ItemKey<'_> {
    let BatchItem {
        request_id: _,
        start,
        tokens,
        is_prefill,
        samples,
        new_blocks,
        cached_tokens,
    } = item;
    (
        *start,
        *tokens,
        *is_prefill,
        *samples,
        new_blocks,
        *cached_tokens,
    )
}

/// Whether two batches plan the same step for the same caller ids (their core ids aside:
/// an unpickled batch has none).
pub(crate) fn same_batch(a: (&Batch, &BatchIds), b: (&Batch, &BatchIds)) -> bool {
    a.0.step_index() == b.0.step_index()
        && a.0.num_free_blocks() == b.0.num_free_blocks()
        && a.1 == b.1
        && a.0.len() == b.0.len()
        && (a.0.items().iter().zip(b.0.items())).all(|(x, y)| item_key(x) == item_key(y))
}

fn item_repr(py: Python<'_>, item: &BatchItem, id: &Id) -> PyResult<String> {
    Ok(format!(
        "BatchItem(request_id={}, start={}, tokens={}, is_prefill={}, samples={}, \
         new_blocks={}, cached_tokens={})",
        id.repr(py)?,
        item.start,
        item.tokens,
        py_bool(item.is_prefill),
        py_bool(item.samples),
        tuple_repr(&item.new_blocks),
        item.cached_tokens
    ))
}

/// The ids (or counts) of an iterable argument, each converted by `convert` and named
/// `name[i]`; `what` names them when `obj` is no iterable.
fn collect<T>(
    name: &str,
    what: &str,
    obj: &Bound<'_, PyAny>,
    convert: impl Fn(&str, &Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Vec<T>> {
    let mut out = Vec::new();
    for (i, value) in iterate(name, what, obj)?.enumerate() {
        out.push(convert(&format!("{name}[{i}]"), &value?)?);
    }
    Ok(out)
}

/// The work of one request in one step: compute positions ``[start, start + tokens)``.
///
/// ``is_prefill`` is false only for a decode. ``samples``: the step reaches the request's
/// last known token, so the engine samples its next token (report it to ``update``).
/// ``new_blocks``: KV-cache block ids appended to the request's block table in this step
/// (for a request admitted in this step, its whole table, cache hits first).
/// ``cached_tokens``: prompt tokens found in the prefix cache at admission in this step.
#[pyclass(name = "BatchItem", module = "chunked_prefill._core", frozen, eq, hash)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct PyBatchItem {
    /// The item, its core `request_id` 0: only `id` names the request.
    pub(crate) inner: BatchItem,
    pub(crate) id: Id,
}

impl PyBatchItem {
    /// A core item under the caller's id.
    fn new_named(item: &BatchItem, id: Id) -> Self {
        let inner = BatchItem {
            request_id: 0,
            ..item.clone()
        };
        Self { inner, id }
    }
}

#[pymethods]
impl PyBatchItem {
    #[new]
    #[pyo3(signature = (
        *,
        request_id,
        start,
        tokens,
        is_prefill,
        samples,
        new_blocks,
        cached_tokens,
    ), text_signature = "(*, request_id, start, tokens, is_prefill, samples, new_blocks, \
        cached_tokens)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        request_id: &Bound<'_, PyAny>,
        start: &Bound<'_, PyAny>,
        tokens: &Bound<'_, PyAny>,
        is_prefill: &Bound<'_, PyAny>,
        samples: &Bound<'_, PyAny>,
        new_blocks: &Bound<'_, PyAny>,
        cached_tokens: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        Ok(Self {
            id: to_id("request_id", request_id)?,
            inner: BatchItem {
                request_id: 0,
                start: to_u64("start", start)?.into(),
                tokens: to_usize("tokens", tokens)?,
                is_prefill: to_bool("is_prefill", is_prefill)?,
                samples: to_bool("samples", samples)?,
                new_blocks: collect("new_blocks", "block ids", new_blocks, to_usize)?,
                cached_tokens: to_u64("cached_tokens", cached_tokens)?.into(),
            },
        })
    }

    /// The request this item computes.
    #[getter]
    fn request_id<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.id.to_object(py)
    }

    /// The first position computed (the request's ``num_computed`` when planned).
    #[getter]
    fn start<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        counter(py, self.inner.start)
    }

    /// How many positions the step computes for this request.
    #[getter]
    fn tokens(&self) -> usize {
        self.inner.tokens
    }

    /// False only for a decode (one token of a request whose prompt is done).
    #[getter]
    fn is_prefill(&self) -> bool {
        self.inner.is_prefill
    }

    /// Whether the engine samples this request's next token in this step.
    #[getter]
    fn samples(&self) -> bool {
        self.inner.samples
    }

    /// Block ids appended to the request's block table in this step.
    #[getter]
    fn new_blocks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.inner.new_blocks)
    }

    /// Prompt tokens found in the prefix cache at admission in this step (else 0).
    #[getter]
    fn cached_tokens<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        counter(py, self.inner.cached_tokens)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py> {
        let py = slf.py();
        let item = &slf.get().inner;
        let kwargs = PyDict::new(py);
        kwargs.set_item("request_id", slf.get().id.to_object(py))?;
        kwargs.set_item("start", counter(py, item.start)?)?;
        kwargs.set_item("tokens", item.tokens)?;
        kwargs.set_item("is_prefill", item.is_prefill)?;
        kwargs.set_item("samples", item.samples)?;
        kwargs.set_item("new_blocks", PyTuple::new(py, &item.new_blocks)?)?;
        kwargs.set_item("cached_tokens", counter(py, item.cached_tokens)?)?;
        reduce_new(slf.get_type(), PyTuple::empty(py), kwargs)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        item_repr(py, &self.inner, &self.id)
    }
}

/// The plan of one engine step, to run and then report back with ``update``.
///
/// ``items``: the requests to compute, decodes first, then started prefills, then
/// admissions. ``request_ids``, ``starts`` and ``token_counts`` are the items' fields as
/// parallel tuples; ``sampling_ids`` are the ids of the items that sample, in item order
/// (the order of ``update``'s aligned ``token_ids``). ``preempted``: requests that lost their
/// blocks in this step (the engine drops their KV cache).
#[pyclass(name = "Batch", module = "chunked_prefill._core", frozen)]
pub(crate) struct PyBatch {
    /// Shared with the scheduler that planned it: `schedule()` copies nothing. Its core ids
    /// are the scheduler's (all 0 in a batch built in Python): only `ids` name requests.
    pub(crate) inner: Arc<Batch>,
    /// The caller's ids, captured at `schedule()` (shared with the scheduler, which compares
    /// an unpickled batch by them).
    pub(crate) ids: Arc<BatchIds>,
    /// The `schedule()` call that made it (see `PyServingScheduler::issued`); 0 for a batch
    /// built or unpickled in Python.
    pub(crate) issue: u64,
    items: PyOnceLock<Py<PyTuple>>,
    request_ids: PyOnceLock<Py<PyTuple>>,
    starts: PyOnceLock<Py<PyTuple>>,
    token_counts: PyOnceLock<Py<PyTuple>>,
    sampling_ids: PyOnceLock<Py<PyTuple>>,
}

impl PyBatch {
    /// The batch `schedule()` call number `issue` returned (0: built in Python).
    pub(crate) fn issued(inner: Arc<Batch>, ids: Arc<BatchIds>, issue: u64) -> Self {
        Self {
            inner,
            ids,
            issue,
            items: PyOnceLock::new(),
            request_ids: PyOnceLock::new(),
            starts: PyOnceLock::new(),
            token_counts: PyOnceLock::new(),
            sampling_ids: PyOnceLock::new(),
        }
    }

    /// The caller's ids of the items that sample, in item order.
    pub(crate) fn sampling(&self) -> impl Iterator<Item = &Id> + '_ {
        (self.inner.items().iter().zip(&self.ids.items))
            .filter(|(item, _)| item.samples)
            .map(|(_, id)| id)
    }

    /// Take `previous`'s ``sampling_ids`` tuple if it was built and names the same requests
    /// in the same order, as it does from one step of the same decodes to the next (the two
    /// share their caller's ids, see `Locked::schedule`, and sample the same core ids): a
    /// tuple is immutable, and building one is a tenth of a step at 256 decodes.
    pub(crate) fn share_sampling_ids(&self, py: Python<'_>, previous: &PyBatch) {
        if let Some(tuple) = previous.sampling_ids.get(py) {
            if Arc::ptr_eq(&self.ids, &previous.ids)
                && self.inner.same_sampling_ids(&previous.inner)
            {
                let _ = self.sampling_ids.set(py, tuple.clone_ref(py));
            }
        }
    }

    /// The tuple in `cell`, built by `build` on first use.
    fn cached<'py>(
        py: Python<'py>,
        cell: &PyOnceLock<Py<PyTuple>>,
        build: impl FnOnce() -> PyResult<Bound<'py, PyTuple>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let tuple = cell.get_or_try_init(py, || build().map(Bound::unbind))?;
        Ok(tuple.bind(py).clone())
    }
}

#[pymethods]
impl PyBatch {
    #[new]
    #[pyo3(
        signature = (*, step_index, items, preempted, num_free_blocks),
        text_signature = "(*, step_index, items, preempted, num_free_blocks)"
    )]
    fn new(
        step_index: &Bound<'_, PyAny>,
        items: &Bound<'_, PyAny>,
        preempted: &Bound<'_, PyAny>,
        num_free_blocks: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let step_index = to_u128("step_index", step_index)?;
        // Item by item: the first item that is not a BatchItem is refused before the next
        // is drawn (an endless iterator of anything fails at once).
        let mut rows = Vec::new();
        let mut ids = BatchIds::default();
        for item in iterate("items", "BatchItem values", items)? {
            let item = item?;
            match item.cast::<PyBatchItem>() {
                Ok(item) => {
                    rows.push(item.get().inner.clone());
                    ids.items.push(item.get().id.clone());
                }
                Err(_) => return Err(type_error("not_batch_item", "items", &item)),
            }
        }
        ids.preempted = collect("preempted", "request ids", preempted, to_id)?;
        let num_free_blocks = to_usize("num_free_blocks", num_free_blocks)?;
        // The token sums must fit a u64, as every count the scheduler reports does.
        for (name, prefill) in [("num_prefill_tokens", true), ("num_decode_tokens", false)] {
            let rows = rows.iter().filter(|item| item.is_prefill == prefill);
            let total: u128 = rows.map(|item| item.tokens as u128).sum();
            if total > u128::from(u64::MAX) {
                return Err(PyOverflowError::new_err(format!(
                    "{name} must be at most 18446744073709551615, got {total}"
                )));
            }
        }
        let zeros = vec![0; ids.preempted.len()];
        let batch = Batch::new(step_index, rows, zeros, num_free_blocks);
        Ok(Self::issued(Arc::new(batch), Arc::new(ids), 0))
    }

    /// The step this batch plans: 0 for the first ``schedule()``.
    #[getter]
    fn step_index<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        counter(py, self.inner.step_index())
    }

    /// The items, decodes first, then started prefills, then admissions.
    #[getter]
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        Self::cached(py, &self.items, || {
            let objects = (self.inner.items().iter().zip(&self.ids.items))
                .map(|(item, id)| Bound::new(py, PyBatchItem::new_named(item, id.clone())))
                .collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, objects)
        })
    }

    /// Requests whose blocks were taken back in this step, in the order preempted.
    #[getter]
    fn preempted<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        id_tuple(py, self.ids.preempted.iter())
    }

    /// Ids of the items that sample, in item order.
    #[getter]
    fn sampling_ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        Self::cached(py, &self.sampling_ids, || id_tuple(py, self.sampling()))
    }

    /// Tokens of the prefill items.
    #[getter]
    fn num_prefill_tokens(&self) -> usize {
        self.inner.num_prefill_tokens()
    }

    /// Tokens of the decode items.
    #[getter]
    fn num_decode_tokens(&self) -> usize {
        self.inner.num_decode_tokens()
    }

    /// Free KV-cache blocks after this step's allocation.
    #[getter]
    fn num_free_blocks(&self) -> usize {
        self.inner.num_free_blocks()
    }

    /// ``items[i].request_id`` for every item.
    #[getter]
    fn request_ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        Self::cached(py, &self.request_ids, || {
            id_tuple(py, self.ids.items.iter())
        })
    }

    /// ``items[i].start`` for every item.
    #[getter]
    fn starts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        Self::cached(py, &self.starts, || {
            let starts = (self.inner.items().iter())
                .map(|item| counter(py, item.start))
                .collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, starts)
        })
    }

    /// ``items[i].tokens`` for every item.
    #[getter]
    fn token_counts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        Self::cached(py, &self.token_counts, || {
            PyTuple::new(py, self.inner.items().iter().map(|item| item.tokens))
        })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __eq__(&self, other: &Bound<'_, Self>) -> bool {
        let other = other.get();
        same_batch((&self.inner, &self.ids), (&other.inner, &other.ids))
    }

    fn __hash__(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let b = &self.inner;
        (b.step_index(), b.num_free_blocks(), &*self.ids).hash(&mut hasher);
        b.items()
            .iter()
            .for_each(|item| item_key(item).hash(&mut hasher));
        hasher.finish()
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py> {
        let py = slf.py();
        let batch = slf.get();
        let kwargs = PyDict::new(py);
        kwargs.set_item("step_index", counter(py, batch.inner.step_index())?)?;
        kwargs.set_item("items", batch.items(py)?)?;
        kwargs.set_item("preempted", batch.preempted(py)?)?;
        kwargs.set_item("num_free_blocks", batch.inner.num_free_blocks())?;
        reduce_new(slf.get_type(), PyTuple::empty(py), kwargs)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let b = &self.inner;
        let items = (b.items().iter().zip(&self.ids.items))
            .map(|(item, id)| item_repr(py, item, id))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(format!(
            "Batch(step_index={}, items={}, preempted={}, num_prefill_tokens={}, \
             num_decode_tokens={}, num_free_blocks={})",
            b.step_index(),
            tuple_repr(items),
            tuple_repr(id_reprs(py, &self.ids.preempted)?),
            b.num_prefill_tokens(),
            b.num_decode_tokens(),
            b.num_free_blocks()
        ))
    }
}

/// A snapshot of one tracked request, from ``ServingScheduler.request``.
///
/// ``state``: ``"waiting"`` (holds no blocks: new or preempted) or ``"running"``.
/// ``num_tokens``: prompt plus generated tokens; ``num_computed``: those whose KV is cached.
#[pyclass(
    name = "RequestView",
    module = "chunked_prefill._core",
    frozen,
    eq,
    hash
)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct PyRequestView {
    /// The snapshot, its core `request_id` 0: only `id` names the request.
    inner: RequestView,
    id: Id,
}

impl PyRequestView {
    /// The core's snapshot under the caller's id.
    pub(crate) fn new(inner: RequestView, id: Id) -> Self {
        let inner = RequestView {
            request_id: 0,
            ..inner
        };
        Self { inner, id }
    }
}

#[pymethods]
impl PyRequestView {
    /// The id given to ``add_request``.
    #[getter]
    fn request_id<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.id.to_object(py)
    }

    /// ``"waiting"`` or ``"running"``.
    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state.as_str()
    }

    /// Prompt plus generated tokens.
    #[getter]
    fn num_tokens<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        counter(py, self.inner.num_tokens)
    }

    /// Tokens whose KV is in the cache.
    #[getter]
    fn num_computed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        counter(py, self.inner.num_computed)
    }

    /// Tokens sampled so far.
    #[getter]
    fn num_generated(&self) -> u64 {
        self.inner.num_generated
    }

    /// Generated tokens at which the request finishes.
    #[getter]
    fn max_new_tokens(&self) -> u64 {
        self.inner.max_new_tokens
    }

    /// Scheduling priority: lower runs first and is preempted last.
    #[getter]
    fn priority(&self) -> i64 {
        self.inner.priority
    }

    /// Times the request lost its blocks to preemption.
    #[getter]
    fn num_preemptions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        counter(py, self.inner.num_preemptions)
    }

    /// Tokens the request found in the prefix cache, summed over its admissions.
    #[getter]
    fn num_cached_tokens<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        counter(py, self.inner.num_cached_tokens)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let v = &self.inner;
        Ok(format!(
            "RequestView(request_id={}, state='{}', num_tokens={}, num_computed={}, \
             num_generated={}, max_new_tokens={}, priority={}, num_preemptions={}, \
             num_cached_tokens={})",
            self.id.repr(py)?,
            v.state.as_str(),
            v.num_tokens,
            v.num_computed,
            v.num_generated,
            v.max_new_tokens,
            v.priority,
            v.num_preemptions,
            v.num_cached_tokens
        ))
    }
}
