//! Numbers and names of a trace cell, read as the Python reader reads them, or not at all.
//!
//! The Python reader strips a cell with `str.strip()` (Unicode whitespace), matches the
//! stripped text against `[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?` and takes
//! its exact `Decimal` value. Here only the ASCII part of that whitespace is stripped: a
//! cell that still starts or ends with a non-ASCII character fails the grammar (or, for a
//! name, is refused), so the file goes to the Python reader, which decides.

/// `str.strip()`'s whitespace among ASCII characters: `\t \n \v \f \r`, the four
/// separators `\x1c`–`\x1f` (which Rust's `is_ascii_whitespace` leaves out) and space.
pub(crate) fn is_py_space(b: u8) -> bool {
    matches!(b, b'\t'..=b'\r' | 0x1c..=0x1f | b' ')
}

/// `text` without the leading and trailing [`is_py_space`] bytes.
pub(crate) fn py_strip(text: &[u8]) -> &[u8] {
    let start = text.iter().position(|&b| !is_py_space(b));
    let Some(start) = start else { return &[] };
    let end = text
        .iter()
        .rposition(|&b| !is_py_space(b))
        .map_or(start, |e| e + 1);
    &text[start..end]
}

/// A name (session or prefix id) as `str(raw).strip()` gives it; `None` when a non-ASCII
/// character ends it, which `str.strip()` might remove.
pub(crate) fn name(text: &[u8]) -> Option<&[u8]> {
    let stripped = py_strip(text);
    match (stripped.first(), stripped.last()) {
        (Some(&a), Some(&b)) if !a.is_ascii() || !b.is_ascii() => None,
        _ => Some(stripped),
    }
}

/// Up to this a float holds every whole number: a number written with a fraction or an
/// exponent is trusted as a whole number only up to it (the Python reader's rule).
pub(crate) const FLOAT_EXACT: u64 = 1 << 53;

/// Exponents longer than this many digits are left to the Python reader: its `Decimal`
/// handles them, and no count or time in range needs one.
const MAX_EXP_DIGITS: usize = 6;

/// Significant digits above which a value is too large for any field (2**64 has 20).
const MAX_DIGITS: i64 = 30;

/// A decimal number as written in a stripped cell.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Decimal<'a> {
    negative: bool,
    int_digits: &'a [u8],
    frac_digits: &'a [u8],
    exp: i64,
    /// Written as `[+-]?[0-9]+` (no point, no exponent).
    pub(crate) plain: bool,
}

fn digits(text: &[u8], at: usize) -> usize {
    text[at..].iter().take_while(|b| b.is_ascii_digit()).count()
}

/// `text` (already stripped) as a decimal number, or `None` when it does not match the
/// grammar (or has an exponent of more than [`MAX_EXP_DIGITS`] digits).
pub(crate) fn decimal(text: &[u8]) -> Option<Decimal<'_>> {
    let negative = text.first() == Some(&b'-');
    let mut i = usize::from(matches!(text.first(), Some(b'+' | b'-')));
    let int_len = digits(text, i);
    let int_digits = &text[i..i + int_len];
    i += int_len;
    let mut frac_digits: &[u8] = &[];
    let point = text.get(i) == Some(&b'.');
    if point {
        let frac_len = digits(text, i + 1);
        frac_digits = &text[i + 1..i + 1 + frac_len];
        i += 1 + frac_len;
    }
    if int_digits.is_empty() && frac_digits.is_empty() {
        return None;
    }
    let mut exp = 0i64;
    let has_exp = matches!(text.get(i), Some(b'e' | b'E'));
    if has_exp {
        i += 1;
        let exp_negative = text.get(i) == Some(&b'-');
        i += usize::from(matches!(text.get(i), Some(b'+' | b'-')));
        let len = digits(text, i);
        let significant = text[i..i + len].iter().skip_while(|&&b| b == b'0').count();
        if len == 0 || significant > MAX_EXP_DIGITS {
            return None;
        }
        for &b in &text[i..i + len] {
            exp = exp * 10 + i64::from(b - b'0');
        }
        if exp_negative {
            exp = -exp;
        }
        i += len;
    }
    (i == text.len()).then_some(Decimal {
        negative,
        int_digits,
        frac_digits,
        exp,
        plain: !point && !has_exp,
    })
}

impl Decimal<'_> {
    /// The exact value when it is a whole number of at most [`MAX_DIGITS`] digits (every
    /// field's range is far inside), else `None`: a fraction, or too large for any field.
    pub(crate) fn integer(&self) -> Option<i128> {
        let mut value: i128 = 0;
        let mut count = 0i64; // significant digits taken into `value`
        let mut zeros = 0i64; // zeros seen since the last nonzero digit
        for &b in self.int_digits.iter().chain(self.frac_digits) {
            if b == b'0' {
                zeros += i64::from(count > 0); // leading zeros count for nothing
                continue;
            }
            count += zeros + 1;
            if count > MAX_DIGITS {
                return None;
            }
            for _ in 0..=zeros {
                value *= 10;
            }
            value += i128::from(b - b'0');
            zeros = 0;
        }
        if count == 0 {
            return Some(0); // "-0", "0.000", "0e5": zero, whole
        }
        // value × 10^scale, the trailing zeros moved into the scale
        let scale = self.exp - self.frac_digits.len() as i64 + zeros;
        if scale < 0 || count + scale > MAX_DIGITS {
            return None;
        }
        for _ in 0..scale {
            value *= 10;
        }
        Some(if self.negative { -value } else { value })
    }
}

/// A whole number in `[low, high]` as `_parse_int` reads it: `None` for anything it
/// refuses (out of range, a fraction, or written with a fraction or an exponent and above
/// [`FLOAT_EXACT`]) and for what is left to it (see [`decimal`]).
pub(crate) fn whole(text: &[u8], low: i128, high: i128) -> Option<i128> {
    let number = decimal(py_strip(text))?;
    let value = number.integer()?;
    let trusted = number.plain || value.unsigned_abs() <= u128::from(FLOAT_EXACT);
    (low <= value && value <= high && trusted).then_some(value)
}

/// An arrival time in seconds as `float(Decimal(text)) * unit`, for a number in
/// `[0, 2**53)`; `None` for anything else (negative zero and 2**53 itself included,
/// which the Python reader decides).
pub(crate) fn seconds(text: &[u8], unit: f64) -> Option<f64> {
    let stripped = py_strip(text);
    let number = decimal(stripped)?;
    if number.negative {
        return None;
    }
    // The grammar matched, so the text is ASCII; Rust's parse rounds correctly, as
    // Python's float() of the Decimal's text does.
    let value: f64 = std::str::from_utf8(stripped).ok()?.parse().ok()?;
    // Rounding is monotone: a value read below 2**53 was written below it.
    (value < FLOAT_EXACT as f64).then_some(value * unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_what_python_strips_among_ascii() {
        assert_eq!(py_strip(b"\x0b\x1c 5\t\x1f"), b"5");
        assert_eq!(py_strip(b" \t "), b"");
        assert_eq!(py_strip(b"\xc2\xa05"), b"\xc2\xa05");
        assert_eq!(name(b" a b "), Some(&b"a b"[..]));
        assert_eq!(name("\u{3000}a".as_bytes()), None);
        assert_eq!(name("é".as_bytes()), None);
    }

    #[test]
    fn reads_the_python_grammar() {
        for (text, value, plain) in [
            ("5", 5, true),
            ("+5", 5, true),
            ("-0", 0, true),
            ("007", 7, true),
            ("5.", 5, false),
            ("5.000", 5, false),
            (".5e1", 5, false),
            ("1.5e3", 1500, false),
            ("1500e-2", 15, false),
            ("0e999999", 0, false),
            ("12E+02", 1200, false),
        ] {
            let d = decimal(text.as_bytes()).unwrap_or_else(|| panic!("{text}"));
            assert_eq!((d.integer(), d.plain), (Some(value), plain), "{text}");
        }
        for text in [
            "", "+", ".", "e5", "1e", "1e+", "1_000", "0x10", "inf", "nan", "1 2",
        ] {
            assert!(decimal(text.as_bytes()).is_none(), "{text}");
        }
        assert!(decimal(b"1e1000000").is_none()); // a 7-digit exponent: left to Python
        assert_eq!(decimal(b"1.5").and_then(|d| d.integer()), None);
        assert_eq!(decimal(b"1e40").and_then(|d| d.integer()), None);
    }

    #[test]
    fn whole_numbers_follow_parse_int() {
        let max = i128::from(i64::MAX);
        assert_eq!(whole(b" 9223372036854775807 ", 1, max), Some(max));
        assert_eq!(whole(b"9223372036854775808", 1, max), None);
        assert_eq!(whole(b"0", 1, max), None);
        assert_eq!(whole(b"9007199254740992.0", 1, max), Some(1 << 53));
        assert_eq!(whole(b"9007199254740993.0", 1, max), None);
        assert_eq!(whole(b"9007199254740993", 1, max), Some((1 << 53) + 1));
        assert_eq!(whole(b"-5", i128::from(i64::MIN), max), Some(-5));
    }

    #[test]
    fn seconds_round_as_python_float() {
        assert_eq!(seconds(b"0.1", 1.0), Some(0.1));
        assert_eq!(seconds(b" 1.5e3 ", 1e-3), Some(1500.0 * 1e-3));
        assert_eq!(seconds(b"5.", 1.0), Some(5.0));
        assert_eq!(seconds(b".5", 1.0), Some(0.5));
        assert_eq!(seconds(b"+2", 1.0), Some(2.0));
        assert_eq!(seconds(b"-0", 1.0), None);
        assert_eq!(seconds(b"9007199254740992", 1.0), None);
        assert_eq!(seconds(b"9007199254740991", 1.0), Some(9007199254740991.0));
        assert_eq!(seconds(b"inf", 1.0), None);
    }
}
