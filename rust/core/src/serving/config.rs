//! [`ServingConfig`]: the block pool's size and the limits of one step.

use crate::CoreError;

/// The serving scheduler's settings (names follow vLLM where one exists).
#[derive(Debug, Clone, PartialEq)]
pub struct ServingConfig {
    /// KV-cache blocks in the pool (ids `0..num_blocks`).
    pub num_blocks: usize,
    /// Tokens per KV-cache block.
    pub block_size: usize,
    /// The most tokens one step computes, decodes and prefill chunks together
    /// (vLLM's `max_num_batched_tokens`).
    pub token_budget: usize,
    /// The most prompt (or recompute) tokens one request gets in one step.
    pub chunk_size: usize,
    /// The most prefill chunks in one step.
    pub max_prefills_per_step: usize,
    /// The most requests holding blocks at once (vLLM's `max_num_seqs`).
    pub max_running: usize,
    /// The fraction of the pool that admission keeps free for running requests to grow into.
    pub watermark: f64,
    /// Whether full computed blocks are hashed and reused by later requests.
    pub prefix_caching: bool,
}

impl ServingConfig {
    /// A pool of `num_blocks` blocks and the defaults for the rest: `block_size = 16`,
    /// `token_budget = 2048`, `chunk_size = 512`, `max_prefills_per_step = 4`,
    /// `max_running = 256`, `watermark = 0.0`, `prefix_caching = true`.
    #[must_use]
    pub fn new(num_blocks: usize) -> Self {
        Self {
            num_blocks,
            block_size: 16,
            token_budget: 2048,
            chunk_size: 512,
            max_prefills_per_step: 4,
            max_running: 256,
            watermark: 0.0,
            prefix_caching: true,
        }
    }

    /// Check the rules the scheduler relies on; the first broken one is the error.
    ///
    /// # Errors
    ///
    /// [`CoreError::CountZero`] (fields in order), [`CoreError::MaxRunningTooLarge`] or
    /// [`CoreError::WatermarkRange`], in that order.
    pub fn validate(&self) -> Result<(), CoreError> {
        for (name, value) in [
            ("num_blocks", self.num_blocks),
            ("block_size", self.block_size),
            ("token_budget", self.token_budget),
            ("chunk_size", self.chunk_size),
            ("max_prefills_per_step", self.max_prefills_per_step),
            ("max_running", self.max_running),
        ] {
            if value == 0 {
                return Err(CoreError::CountZero { name, value });
            }
        }
        // Decodes ignore the budget; this keeps at least one token for a prefill.
        if self.max_running >= self.token_budget {
            return Err(CoreError::MaxRunningTooLarge {
                max_running: self.max_running,
                token_budget: self.token_budget,
            });
        }
        if !(0.0..1.0).contains(&self.watermark) {
            return Err(CoreError::WatermarkRange {
                value: self.watermark,
            });
        }
        Ok(())
    }

    /// Blocks admission leaves free: `floor(watermark * num_blocks)`, computed in f64.
    #[must_use]
    pub fn watermark_blocks(&self) -> usize {
        // `as` saturates, and the product is below `num_blocks` for a valid watermark.
        (self.watermark * self.num_blocks as f64).floor() as usize
    }
}
