//! `chat_workload`: the synthetic chat workload's columns ([`chunked_prefill::sim::draw_chat`])
//! for `chunked_prefill.sim.workload.synthetic`, drawn without numpy and without the GIL,
//! handed over as the tuples a `Workload` holds.

use std::collections::hash_map::{Entry, HashMap};

use chunked_prefill::sim::{draw_chat, ChatLengths};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyTuple};

/// What `chat_workload` returns: the arrival, prompt and output columns, then the figures
/// `_ColumnStats` keeps (the longest prompt, the longest output, its first request, the
/// prompt and output totals) and whether every value is in the given ranges.
type Columns<'py> = (
    Bound<'py, PyTuple>,
    Bound<'py, PyTuple>,
    Bound<'py, PyTuple>,
    (u64, u64, usize, u128, u128),
    bool,
);

/// The chat workload of ``default_workload`` (``lengths`` are ``ChatWorkloadSpec``'s nine
/// fields in order, the maxima as floats), exactly as numpy's ``default_rng(seed)`` draws
/// it; ``in_range`` tells whether arrivals are in ``[0, max_arrival_s]`` and lengths in
/// ``[1, max_tokens]``.
#[pyfunction]
#[pyo3(signature = (seed, requests, rate, lengths, *, max_arrival_s, max_tokens))]
pub(crate) fn chat_workload<'py>(
    py: Python<'py>,
    seed: u64,
    requests: usize,
    rate: f64,
    lengths: [f64; 9],
    max_arrival_s: f64,
    max_tokens: u64,
) -> PyResult<Columns<'py>> {
    let [chat_prompt_median, chat_prompt_sigma, long_fraction, long_prompt_median, long_prompt_sigma, max_prompt_tokens, output_median, output_sigma, max_output_tokens] =
        lengths;
    let lengths = ChatLengths {
        chat_prompt_median,
        chat_prompt_sigma,
        long_fraction,
        long_prompt_median,
        long_prompt_sigma,
        max_prompt_tokens,
        output_median,
        output_sigma,
        max_output_tokens,
    };
    let drawn = py.detach(|| draw_chat(seed, requests, rate, &lengths));
    let f = drawn.figures();
    Ok((
        PyTuple::new(py, &drawn.arrival_s)?,
        shared_ints(py, &drawn.prompt_tokens)?,
        shared_ints(py, &drawn.output_tokens)?,
        (
            f.longest_prompt,
            f.longest_output,
            f.longest_output_at,
            f.total_prompt,
            f.total_output,
        ),
        drawn.in_range(max_arrival_s, max_tokens),
    ))
}

/// `values` as a tuple whose equal values are one int object, as Python's `shared_ints`:
/// lengths repeat (a million drawn prompts take a few thousand values), and a tuple of
/// shared ints costs 8 bytes a request where one of its own ints costs 36. Lengths no
/// larger than their count are picked from a list of every int up to the largest, others
/// shared through a map.
fn shared_ints<'py>(py: Python<'py>, values: &[u64]) -> PyResult<Bound<'py, PyTuple>> {
    let largest = values.iter().copied().max().unwrap_or(0);
    if largest <= values.len() as u64 {
        let ints = (0..=largest)
            .map(|v| v.into_pyobject(py))
            .collect::<Result<Vec<Bound<'py, PyInt>>, _>>()?;
        return PyTuple::new(py, values.iter().map(|&v| &ints[v as usize]));
    }
    let mut seen: HashMap<u64, Bound<'py, PyInt>> = HashMap::new();
    let mut shared = Vec::with_capacity(values.len());
    for &v in values {
        let int = match seen.entry(v) {
            Entry::Occupied(e) => e.get().clone(),
            Entry::Vacant(e) => e.insert(v.into_pyobject(py)?).clone(),
        };
        shared.push(int);
    }
    PyTuple::new(py, shared)
}
