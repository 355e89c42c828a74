//! CRC-32 with the Ethernet/zlib polynomial, reflected, as a raw running
//! state: no initial value or final inversion applied here, because the
//! ICRC starts from a state that already covers its masked LRH and
//! inverts only at the end.

const POLY: u32 = 0xedb8_8320;

/// Eight tables: the byte table, and the same shifted by 1..7 bytes of
/// zeros, so [`update`] takes 8 bytes a step.
const TABLES: [[u32; 256]; 8] = tables();

const fn tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut j = 1;
    while j < 8 {
        let mut i = 0;
        while i < 256 {
            let p = t[j - 1][i];
            t[j][i] = (p >> 8) ^ t[0][(p & 0xff) as usize];
            i += 1;
        }
        j += 1;
    }
    t
}

/// The state after `data`, a byte at a time (usable in constants).
pub(crate) const fn update_bytewise(mut crc: u32, data: &[u8]) -> u32 {
    let mut i = 0;
    while i < data.len() {
        crc = (crc >> 8) ^ TABLES[0][((crc ^ data[i] as u32) & 0xff) as usize];
        i += 1;
    }
    crc
}

/// The state after `data`.
pub(crate) fn update(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() >= clmul::MIN_LEN && clmul::available() {
        // SAFETY: the CPU has PCLMULQDQ and SSE4.1 (checked just now).
        return unsafe { clmul::update(crc, data) };
    }
    update_tables(crc, data)
}

/// [`update`] eight bytes a step through [`TABLES`].
fn update_tables(mut crc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        crc = TABLES[7][(lo & 0xff) as usize]
            ^ TABLES[6][(lo >> 8 & 0xff) as usize]
            ^ TABLES[5][(lo >> 16 & 0xff) as usize]
            ^ TABLES[4][(lo >> 24) as usize]
            ^ TABLES[3][c[4] as usize]
            ^ TABLES[2][c[5] as usize]
            ^ TABLES[1][c[6] as usize]
            ^ TABLES[0][c[7] as usize];
    }
    update_bytewise(crc, chunks.remainder())
}

/// x^n mod the polynomial, not reflected (bit d is x^d).
const fn xpow_mod(n: u32) -> u64 {
    const P: u64 = 0x1_04c1_1db7;
    let mut r: u64 = 1;
    let mut i = 0;
    while i < n {
        r <<= 1;
        if r & (1 << 32) != 0 {
            r ^= P;
        }
        i += 1;
    }
    r
}

/// Folding with carry-less multiplication (PCLMULQDQ): 16-byte blocks
/// are folded into four running 128-bit remainders, which stay congruent
/// to the data read so far modulo the polynomial; the last one goes
/// through the tables as 16 bytes of data. In the reflected order a
/// block's first bit is its highest power, and the product of two
/// reflected numbers reads one power high, so each constant carries one
/// x less.
#[cfg(target_arch = "x86_64")]
mod clmul {
    use std::arch::x86_64::*;

    /// Shorter data goes through the tables.
    pub(super) const MIN_LEN: usize = 64;

    /// The constants that move a remainder `bits` further on: for its
    /// high half (x^(bits+64)) and its low half (x^bits), reflected.
    const fn fold(bits: u32) -> (u64, u64) {
        (
            super::xpow_mod(bits + 64 - 1).reverse_bits(),
            super::xpow_mod(bits - 1).reverse_bits(),
        )
    }
    const BY_512: (u64, u64) = fold(512);
    const BY_128: (u64, u64) = fold(128);

    pub(super) fn available() -> bool {
        is_x86_feature_detected!("pclmulqdq") && is_x86_feature_detected!("sse4.1")
    }

    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn constants(k: (u64, u64)) -> __m128i {
        _mm_set_epi64x(k.1 as i64, k.0 as i64)
    }

    /// `acc` moved on by `k`'s distance, plus `next`.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn step(acc: __m128i, k: __m128i, next: __m128i) -> __m128i {
        let hi = _mm_clmulepi64_si128::<0x00>(acc, k);
        let lo = _mm_clmulepi64_si128::<0x11>(acc, k);
        _mm_xor_si128(_mm_xor_si128(hi, lo), next)
    }

    /// `update` for at least [`MIN_LEN`] bytes.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and SSE4.1 ([`available`]).
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    pub(super) unsafe fn update(crc: u32, data: &[u8]) -> u32 {
        debug_assert!(data.len() >= MIN_LEN);
        let load = |at: usize| {
            let b: &[u8; 16] = data[at..at + 16].try_into().expect("16 bytes");
            // SAFETY: `b` is 16 readable bytes; the load is unaligned.
            unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
        };
        // The state is the first four bytes' difference from zero.
        let mut acc = [
            _mm_xor_si128(load(0), _mm_cvtsi32_si128(crc as i32)),
            load(16),
            load(32),
            load(48),
        ];
        let blocks = data.len() / 16;
        let k512 = constants(BY_512);
        let mut i = 4;
        while i + 4 <= blocks {
            for (j, a) in acc.iter_mut().enumerate() {
                *a = step(*a, k512, load((i + j) * 16));
            }
            i += 4;
        }
        let k128 = constants(BY_128);
        let mut r = step(acc[0], k128, acc[1]);
        r = step(r, k128, acc[2]);
        r = step(r, k128, acc[3]);
        while i < blocks {
            r = step(r, k128, load(i * 16));
            i += 1;
        }
        let mut rest = [0u8; 16];
        // SAFETY: `rest` is 16 writable bytes; the store is unaligned.
        unsafe { _mm_storeu_si128(rest.as_mut_ptr().cast(), r) };
        let crc = super::update_tables(0, &rest);
        super::update_tables(crc, &data[blocks * 16..])
    }
}

/// The byte table's entries by their top byte, which is distinct for
/// each (what makes a step over a byte undoable, see [`unshift`]).
const BY_TOP: [u8; 256] = by_top();

const fn by_top() -> [u8; 256] {
    let mut inv = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        inv[(TABLES[0][i] >> 24) as usize] = i as u8;
        i += 1;
    }
    inv
}

/// Undoes one step of [`update`] over a zero byte: the state `s` was
/// reached from the returned one. The CRC is linear, so a difference
/// between two states walks back through the bytes both messages share
/// the same way (`icrc::solve_ipv4_id`).
pub(crate) fn unshift(s: u32) -> u32 {
    let idx = BY_TOP[(s >> 24) as usize];
    ((s ^ TABLES[0][idx as usize]) << 8) | idx as u32
}

/// The state difference two bytes `hi`, `lo` make from a zero one.
pub(crate) fn two_bytes(hi: u8, lo: u8) -> u32 {
    update_bytewise(0, &[hi, lo])
}

/// The bytes [`two_bytes`] turned into the state difference `d`, if any.
pub(crate) fn two_bytes_of(d: u32) -> Option<(u8, u8)> {
    // Back over `lo`: the state before it, shifted, and lo ^ its low byte.
    let idx = BY_TOP[(d >> 24) as usize];
    let before = d ^ TABLES[0][idx as usize];
    // From zero, `hi` leaves a table entry, shifted by 8: top byte 0.
    if before >> 24 != 0 {
        return None;
    }
    let hi = BY_TOP[(before >> 16) as usize];
    let first = TABLES[0][hi as usize];
    if first >> 8 != before {
        return None;
    }
    Some((hi, idx ^ first as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// zlib's `crc32()`: initial state all ones, inverted at the end.
    fn zlib(data: &[u8]) -> u32 {
        !update(!0, data)
    }

    #[test]
    fn unshift_undoes_a_zero_byte_and_two_bytes_invert() {
        for s in [0u32, 1, 0xdead_beef, 0x8000_0000, u32::MAX, 0x1234_5678] {
            assert_eq!(unshift(update_bytewise(s, &[0])), s);
        }
        for (hi, lo) in [(0u8, 0u8), (0x12, 0x34), (0xff, 0x01), (0x80, 0xff)] {
            assert_eq!(two_bytes_of(two_bytes(hi, lo)), Some((hi, lo)));
        }
        // 2^16 of the 2^32 differences are two bytes' : most are not.
        let none = (0..1000u32)
            .filter(|i| two_bytes_of(i.wrapping_mul(0x9e37_79b9)).is_none())
            .count();
        assert!(none > 990, "{none}");
    }

    #[test]
    fn check_values_of_the_standard() {
        assert_eq!(zlib(b""), 0);
        assert_eq!(zlib(b"123456789"), 0xcbf4_3926);
        assert_eq!(
            zlib(b"The quick brown fox jumps over the lazy dog"),
            0x414f_a339
        );
    }

    #[test]
    fn carry_less_folding_equals_the_tables() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        for start in [0, 1, 3, 8, 15] {
            for len in (0..300).chain([511, 512, 513, 1024, 1040, 4096, 4100, 4985 - start]) {
                let d = &data[start..start + len];
                for crc in [0, !0, 0x1234_5678] {
                    assert_eq!(update(crc, d), update_tables(crc, d), "{start} {len}");
                }
            }
        }
        assert_eq!(zlib(&data), !update_bytewise(!0, &data));
    }

    #[test]
    fn eight_at_a_time_equals_one_at_a_time() {
        let data: Vec<u8> = (0..1000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for start in 0..9 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 100, 991 - start] {
                let d = &data[start..start + len];
                assert_eq!(
                    update(0x1234_5678, d),
                    update_bytewise(0x1234_5678, d),
                    "{start} {len}"
                );
            }
        }
        // Split anywhere, the state carries over.
        let whole = update(!0, &data);
        for cut in [0, 1, 5, 8, 500, 999, 1000] {
            assert_eq!(update(update(!0, &data[..cut]), &data[cut..]), whole);
        }
    }
}
