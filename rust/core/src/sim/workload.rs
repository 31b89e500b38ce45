//! [`Workload`]: the requests as plain arrays, and the token ids prefix caching sees.
//!
//! No prompt is stored: a request's token ids are a pure function of its position, made
//! when it arrives. Every request reads one *stream* of ids: positions below
//! `prefix_tokens` come from its group's stream (a shared system prompt), positions covered
//! by its trace block hashes come from those hashes (`hash_block` tokens per hash), and the
//! rest from its session's stream. The tokens it samples are its stream's next ids, so the
//! next turn of a session, whose prompt extends this one's prompt and output, finds them in
//! the prefix cache. A request that shares nothing is added as a bare length: no ids, no
//! hashing.

use std::collections::TryReserveError;

/// `group` of a request in no group.
pub const NO_GROUP: u64 = u64::MAX;

/// The requests, in workload order (request `i` is scheduler request id `i`).
#[derive(Debug, Clone, Default)]
pub struct Workload {
    /// Arrival time, seconds.
    pub arrival_s: Vec<f64>,
    /// Prompt length.
    pub prompt_tokens: Vec<u64>,
    /// Tokens to generate (the request stops at this many).
    pub output_tokens: Vec<u64>,
    /// Scheduling priority, lower first (empty: all 0).
    pub priority: Vec<i64>,
    /// Where its token ids come from.
    pub tokens: TokenPlan,
}

/// How each request's token ids are generated (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct TokenPlan {
    /// Whether the request shares any token with another (empty: none does); a request
    /// that does not is added as a bare length.
    pub known: Vec<bool>,
    /// Positions below this come from the request's group stream.
    pub prefix_tokens: u64,
    /// The group of each request, [`NO_GROUP`] for none (empty: none).
    pub group: Vec<u64>,
    /// The session stream of each request (empty: request `i` has session `i`).
    pub session: Vec<u64>,
    /// Tokens per trace block hash.
    pub hash_block: u64,
    /// Request `i`'s hashes are `hash_ids[hash_offsets[i]..hash_offsets[i + 1]]` (empty:
    /// none has any).
    pub hash_offsets: Vec<usize>,
    /// Trace block hashes, all requests' in one array.
    pub hash_ids: Vec<u64>,
}

/// splitmix64's finaliser: a bijection of `u64` that scatters every input bit.
const fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Kinds of stream, so a group, a session and a trace hash never give the same ids.
const GROUP: u64 = 1;
const SESSION: u64 = 2;
const HASH: u64 = 3;

/// The id at `pos` of the stream `(kind, key)` (see [`id_at`]).
#[must_use]
pub fn token_id(kind: u64, key: u64, pos: u64) -> u32 {
    id_at(stream(kind, key), pos)
}

/// The stream `(kind, key)`: 64 well-mixed bits, the same for all its ids, so a run of
/// them costs two mixes in all.
const fn stream(kind: u64, key: u64) -> u64 {
    mix(mix(kind) ^ key)
}

/// The id at `pos` of a `stream`: `a + pos * b` modulo 2**32, `a` its low 32 bits and `b`
/// its high 32 with the lowest bit set.
///
/// The ids only meet the prefix cache, which compares blocks of them (under the same
/// parent block), so what matters is which blocks are equal: `b` being odd, a stream's
/// ids are distinct over 2**32 positions, and two streams give equal ids at two
/// consecutive positions (at any offsets) only if their `b` are equal and their `a` then
/// differ by the offset times `b` (about 2**-63 for distinct streams), so no two streams
/// share a block. One multiply-add an id, which vectorises (a mix per id was a sixth of
/// the loop of a trace with token ids).
const fn id_at(stream: u64, pos: u64) -> u32 {
    let (a, b) = (stream as u32, (stream >> 32) as u32 | 1);
    a.wrapping_add((pos as u32).wrapping_mul(b))
}

impl TokenPlan {
    /// Whether request `i` is added with its token ids.
    #[must_use]
    pub fn is_known(&self, i: usize) -> bool {
        self.known.get(i).copied().unwrap_or(false)
    }

    /// The token id of request `i`, whose prompt has `prompt_len` tokens, at position `pos`
    /// (prompt or output; trace hashes cover the prompt only).
    #[must_use]
    pub fn token(&self, i: usize, pos: u64, prompt_len: u64) -> u32 {
        let in_prefix = pos < self.prefix_tokens && self.group_of(i) != NO_GROUP;
        if !in_prefix && pos < prompt_len {
            if let Some(id) = self.hash_token(i, pos) {
                return id;
            }
        }
        self.output_token(i, pos)
    }

    /// The token id request `i` samples at `pos`, at or after its prompt: `token(i, pos,
    /// prompt_len)` without the trace hashes, which cover the prompt only.
    #[must_use]
    pub fn output_token(&self, i: usize, pos: u64) -> u32 {
        let group = self.group_of(i);
        if pos < self.prefix_tokens && group != NO_GROUP {
            return token_id(GROUP, group, pos);
        }
        token_id(SESSION, self.session_of(i), pos)
    }

    /// [`output_token`](Self::output_token) of request `i` at each position of
    /// `first..first + count`, appended to `out` (a run per stream). A
    /// request's positions stay below 2**64 (prompt and output are each at most 2**63 - 1
    /// tokens), so the run is never cut short.
    pub fn extend_output(&self, i: usize, first: u64, count: u64, out: &mut Vec<u32>) {
        let end = first.saturating_add(count);
        let mut pos = first;
        let group = self.group_of(i);
        if group != NO_GROUP && pos < self.prefix_tokens {
            let (group, to) = (stream(GROUP, group), self.prefix_tokens.min(end));
            out.extend((pos..to).map(|p| id_at(group, p)));
            pos = to;
        }
        let session = stream(SESSION, self.session_of(i));
        out.extend((pos..end).map(|p| id_at(session, p)));
    }

    /// The id of request `i`'s trace hash covering `pos`, if one does.
    fn hash_token(&self, i: usize, pos: u64) -> Option<u32> {
        let (&from, &to) = (self.hash_offsets.get(i)?, self.hash_offsets.get(i + 1)?);
        let block = pos.checked_div(self.hash_block)?;
        let hash = *self.hash_ids[from..to].get(usize::try_from(block).ok()?)?;
        Some(token_id(HASH, hash, pos % self.hash_block))
    }

    fn group_of(&self, i: usize) -> u64 {
        self.group.get(i).copied().unwrap_or(NO_GROUP)
    }

    fn session_of(&self, i: usize) -> u64 {
        self.session.get(i).copied().unwrap_or(i as u64)
    }

    /// The prompt of request `i`, `len` token ids, into `out` (cleared first): the ids of
    /// [`token`](Self::token), a run per stream (its group's prefix, each trace hash's block,
    /// its session).
    ///
    /// # Errors
    ///
    /// When `len` ids do not fit in memory; `out` is then left empty.
    pub fn try_fill(&self, i: usize, len: u64, out: &mut Vec<u32>) -> Result<(), TryReserveError> {
        out.clear();
        let ids = usize::try_from(len).unwrap_or(usize::MAX);
        out.try_reserve_exact(ids)?;
        let mut pos = 0;
        let group = self.group_of(i);
        if group != NO_GROUP {
            let (group, end) = (stream(GROUP, group), self.prefix_tokens.min(len));
            out.extend((0..end).map(|p| id_at(group, p)));
            pos = end;
        }
        let hashes = (self.hash_offsets.get(i), self.hash_offsets.get(i + 1));
        if let (Some(&from), Some(&to), true) = (hashes.0, hashes.1, self.hash_block > 0) {
            let size = self.hash_block;
            let covered = ((to - from) as u64).saturating_mul(size).min(len);
            while pos < covered {
                let block = pos / size;
                let hash = stream(HASH, self.hash_ids[from + block as usize]);
                let (base, end) = (block * size, (block + 1).saturating_mul(size).min(covered));
                out.extend((pos..end).map(|p| id_at(hash, p - base)));
                pos = end;
            }
        }
        let session = stream(SESSION, self.session_of(i));
        out.extend((pos..len).map(|p| id_at(session, p)));
        Ok(())
    }
}

impl Workload {
    /// Requests in the workload.
    #[must_use]
    pub fn len(&self) -> usize {
        self.arrival_s.len()
    }

    /// Whether it holds no request.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.arrival_s.is_empty()
    }

    /// Request `i`'s priority.
    #[must_use]
    pub fn priority(&self, i: usize) -> i64 {
        self.priority.get(i).copied().unwrap_or(0)
    }

    /// Request indices in admission order: by arrival time, ties by index; empty when that
    /// is the workload's own order (its arrivals never decrease, as in most workloads: a
    /// million requests save 8 MB).
    ///
    /// # Errors
    ///
    /// When the indices do not fit in memory.
    pub fn try_arrival_order(&self) -> Result<Vec<usize>, TryReserveError> {
        if self.arrival_s.windows(2).all(|w| w[0] <= w[1]) {
            return Ok(Vec::new());
        }
        let mut order: Vec<usize> = Vec::new();
        order.try_reserve_exact(self.len())?;
        order.extend(0..self.len());
        order.sort_by(|&a, &b| {
            (self.arrival_s[a].partial_cmp(&self.arrival_s[b]))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.cmp(&b))
        });
        Ok(order)
    }
}
