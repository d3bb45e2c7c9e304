//! CRC-32 as GPT uses it (the IEEE 802.3 polynomial, reflected, initial
//! and final value all ones), with a table built at compile time.

/// The polynomial 0x04C11DB7 with its bits reversed, for the
/// least-significant-bit-first form.
const POLYNOMIAL: u32 = 0xEDB8_8320;

const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut value = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            value = if value & 1 != 0 {
                (value >> 1) ^ POLYNOMIAL
            } else {
                value >> 1
            };
            bit += 1;
        }
        table[byte] = value;
        byte += 1;
    }
    table
};

/// The CRC-32 of `pieces` taken one after the other.
pub(crate) fn crc32(pieces: &[&[u8]]) -> u32 {
    let mut crc = !0u32;
    for piece in pieces {
        for &byte in *piece {
            crc = (crc >> 8) ^ TABLE[((crc ^ u32::from(byte)) & 0xFF) as usize];
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::crc32;

    #[test]
    fn the_check_value_of_the_standard() {
        // Every CRC-32 catalogue gives 0xCBF43926 for "123456789".
        assert_eq!(crc32(&[b"123456789"]), 0xCBF4_3926);
        assert_eq!(crc32(&[b"1234", b"56789"]), 0xCBF4_3926);
        assert_eq!(crc32(&[]), 0);
    }
}
