//! The draws of the synthetic chat workload (Python's `default_workload`): its lengths and
//! arrivals, exactly those numpy's `default_rng(seed)` gives, without numpy.
//!
//! Python draws them with numpy when the core is not built; the two must give the same
//! workload for the same seed, so every array is drawn in numpy's order (all the long-prompt
//! coin flips, then all the chat prompts, all the long prompts, all the outputs, then the
//! arrival gaps) and every float operation is numpy's, in its order.

use crate::random::Generator;

/// The length distributions of the chat workload (Python's `ChatWorkloadSpec`): a prompt is
/// a long document with probability `long_fraction`, else a chat turn; each kind and the
/// output are lognormal of the given median and log-sigma, rounded half to even and clipped
/// to `[1, max]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChatLengths {
    /// Median of a chat turn's prompt, tokens.
    pub chat_prompt_median: f64,
    /// Log-standard-deviation of a chat turn's prompt.
    pub chat_prompt_sigma: f64,
    /// Probability that a prompt is a long document.
    pub long_fraction: f64,
    /// Median of a long document's prompt, tokens.
    pub long_prompt_median: f64,
    /// Log-standard-deviation of a long document's prompt.
    pub long_prompt_sigma: f64,
    /// The longest prompt, at most 2**53 (the Python side checks it), so that every clipped
    /// length is an exact float.
    pub max_prompt_tokens: f64,
    /// Median output, tokens.
    pub output_median: f64,
    /// Log-standard-deviation of the output.
    pub output_sigma: f64,
    /// The longest output, at most 2**53 as `max_prompt_tokens`.
    pub max_output_tokens: f64,
}

/// The drawn columns, one value per request in draw order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatDraws {
    /// Arrival times, seconds, nondecreasing.
    pub arrival_s: Vec<f64>,
    /// Prompt lengths.
    pub prompt_tokens: Vec<u64>,
    /// Output lengths.
    pub output_tokens: Vec<u64>,
}

/// What a workload keeps of its drawn length columns (Python's `_ColumnStats`, less the
/// priorities, which a drawn workload has none of).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatFigures {
    /// The longest prompt (0 for no request).
    pub longest_prompt: u64,
    /// The longest output (0 for no request).
    pub longest_output: u64,
    /// The first request with the longest output, as numpy's `argmax` (0 for none).
    pub longest_output_at: usize,
    /// The prompt lengths summed.
    pub total_prompt: u128,
    /// The output lengths summed.
    pub total_output: u128,
}

impl ChatDraws {
    /// The columns' figures.
    #[must_use]
    pub fn figures(&self) -> ChatFigures {
        let total = |v: &[u64]| v.iter().map(|&x| u128::from(x)).sum::<u128>();
        let (longest_output_at, longest_output) =
            (self.output_tokens.iter().enumerate()).fold((0, 0), |best, (i, &v)| {
                if v > best.1 {
                    (i, v)
                } else {
                    best
                }
            });
        ChatFigures {
            longest_prompt: self.prompt_tokens.iter().copied().max().unwrap_or(0),
            longest_output,
            longest_output_at,
            total_prompt: total(&self.prompt_tokens),
            total_output: total(&self.output_tokens),
        }
    }

    /// Whether every arrival is in `[0, max_arrival_s]` (NaN is not) and every length in
    /// `[1, max_tokens]`: the checks a Python `Workload` makes of its columns.
    #[must_use]
    pub fn in_range(&self, max_arrival_s: f64, max_tokens: u64) -> bool {
        let lengths = |v: &[u64]| v.iter().all(|&x| (1..=max_tokens).contains(&x));
        self.arrival_s
            .iter()
            .all(|&t| (0.0..=max_arrival_s).contains(&t))
            && lengths(&self.prompt_tokens)
            && lengths(&self.output_tokens)
    }
}

/// `requests` requests of the chat workload arriving as a Poisson process of `rate` per
/// second (`f64::INFINITY`: all at 0), as Python's `_chat_lengths` and the gaps after them
/// draw them from `numpy.random.default_rng(seed)`.
pub fn draw_chat(seed: u64, requests: usize, rate: f64, lengths: &ChatLengths) -> ChatDraws {
    let mut rng = Generator::from_seed(seed);
    let is_long: Vec<bool> = (0..requests)
        .map(|_| rng.random() < lengths.long_fraction)
        .collect();
    let chat = (lengths.chat_prompt_median.ln(), lengths.chat_prompt_sigma);
    let mut prompt: Vec<f64> = (0..requests)
        .map(|_| rng.lognormal(chat.0, chat.1))
        .collect();
    // numpy draws the long prompts of every request, then keeps those of the long ones.
    let long = (lengths.long_prompt_median.ln(), lengths.long_prompt_sigma);
    for (value, &keep) in prompt.iter_mut().zip(&is_long) {
        let drawn = rng.lognormal(long.0, long.1);
        if keep {
            *value = drawn;
        }
    }
    let prompt_tokens = prompt
        .iter()
        .map(|&x| clipped(x, lengths.max_prompt_tokens))
        .collect();
    let output = (lengths.output_median.ln(), lengths.output_sigma);
    let output_tokens = (0..requests)
        .map(|_| clipped(rng.lognormal(output.0, output.1), lengths.max_output_tokens))
        .collect();
    ChatDraws {
        arrival_s: arrivals(&mut rng, requests, rate),
        prompt_tokens,
        output_tokens,
    }
}

/// `np.clip(np.rint(x), 1, high)` as an integer (a lognormal draw is never NaN; an infinite
/// one clips to `high`).
fn clipped(x: f64, high: f64) -> u64 {
    x.round_ties_even().clamp(1.0, high) as u64
}

/// `np.cumsum(gaps / rate)` of `requests` standard exponential gaps (numpy's accumulation
/// adds in order), or zeros for an infinite rate (whose gaps are drawn all the same).
fn arrivals(rng: &mut Generator, requests: usize, rate: f64) -> Vec<f64> {
    let mut t = 0.0;
    (0..requests)
        .map(|_| {
            let gap = rng.standard_exponential();
            if rate.is_infinite() {
                return 0.0;
            }
            t += gap / rate;
            t
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(arrival_s: Vec<f64>, prompt: Vec<u64>, output: Vec<u64>) -> ChatDraws {
        ChatDraws {
            arrival_s,
            prompt_tokens: prompt,
            output_tokens: output,
        }
    }

    #[test]
    fn figures_take_the_first_longest_output_and_exact_totals() {
        let d = draws(vec![0.0; 4], vec![3, 9, 9, 1], vec![2, 7, 5, 7]);
        let f = d.figures();
        assert_eq!(
            (f.longest_prompt, f.longest_output, f.longest_output_at),
            (9, 7, 1)
        );
        assert_eq!((f.total_prompt, f.total_output), (22, 21));
        let big = draws(vec![0.0; 2], vec![u64::MAX; 2], vec![u64::MAX; 2]);
        assert_eq!(big.figures().total_output, 2 * u128::from(u64::MAX));
        let none = draws(vec![], vec![], vec![]).figures();
        assert_eq!(
            (
                none.longest_output,
                none.longest_output_at,
                none.total_output
            ),
            (0, 0, 0)
        );
    }

    #[test]
    fn in_range_is_the_workload_checks() {
        let ok = draws(vec![0.0, 5.0], vec![1, 10], vec![10, 1]);
        assert!(ok.in_range(5.0, 10));
        assert!(!ok.in_range(4.9, 10));
        assert!(!ok.in_range(5.0, 9));
        assert!(!draws(vec![f64::NAN], vec![1], vec![1]).in_range(5.0, 10));
        assert!(!draws(vec![-0.5], vec![1], vec![1]).in_range(5.0, 10));
        assert!(!draws(vec![0.0], vec![0], vec![1]).in_range(5.0, 10));
    }
}
