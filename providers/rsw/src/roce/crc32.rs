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
pub(crate) fn update(mut crc: u32, data: &[u8]) -> u32 {
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
