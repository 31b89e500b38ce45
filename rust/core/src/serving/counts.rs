//! Block and token counts of the step rule, in the widths the scheduler keeps them.

use super::request::Request;

/// `floor(tokens / block_size)` for word-sized counts: a shift for a power-of-two block size
/// (the usual one), whose test is cheaper than the division it saves, several per item and
/// step.
pub(super) fn div_blocks(tokens: usize, block_size: usize) -> usize {
    // `is_power_of_two` counts bits, a dozen instructions without `popcnt`; this is three.
    if block_size != 0 && block_size & (block_size - 1) == 0 {
        tokens >> block_size.trailing_zeros()
    } else {
        tokens / block_size
    }
}

/// `ceil(tokens / block_size)`, saturating where a count cannot be a block count.
pub(super) fn blocks_for(tokens: u128, block_size: usize) -> usize {
    match usize::try_from(tokens) {
        // Counts that fit a machine word take its division, not a 128-bit one.
        Ok(0) => 0,
        Ok(tokens) => div_blocks(tokens - 1, block_size) + 1,
        Err(_) => usize::try_from(tokens.div_ceil(block_size as u128)).unwrap_or(usize::MAX),
    }
}

/// `floor(tokens / block_size)`, saturating as [`blocks_for`].
pub(super) fn full_blocks(tokens: u128, block_size: usize) -> usize {
    match usize::try_from(tokens) {
        Ok(tokens) => div_blocks(tokens, block_size),
        Err(_) => usize::try_from(tokens / block_size as u128).unwrap_or(usize::MAX),
    }
}

/// The tokens `blocks` full blocks hold (in u128: a count of huge blocks can pass `usize`).
pub(super) fn tokens_in(blocks: usize, block_size: usize) -> u128 {
    blocks as u128 * block_size as u128
}

/// The blocks a running `request` still needs to reach its `num_tokens`.
pub(super) fn shortfall(request: &Request, block_size: usize) -> usize {
    blocks_for(request.num_tokens(), block_size).saturating_sub(request.table.len())
}

/// `min(left, chunk_size, budget left)`.
pub(super) fn chunk(left: u128, chunk_size: usize, budget: usize) -> usize {
    let cap = chunk_size.min(budget);
    usize::try_from(left).map_or(cap, |left| left.min(cap))
}
