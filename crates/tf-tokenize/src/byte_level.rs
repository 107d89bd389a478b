//! The GPT-2 byte-to-character alphabet used by byte-level BPE vocabularies.

use std::collections::HashMap;
use std::sync::OnceLock;

/// Whether byte `b` stands for itself in the byte-level alphabet (printable Latin-1, no space).
fn is_self_mapped(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The character that stands for each byte: printable bytes map to themselves, the rest
/// (controls, space, 0x7F-0xA0, 0xAD) are numbered upward from U+0100 in byte order.
pub fn byte_to_char_table() -> &'static [char; 256] {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = ['\0'; 256];
        let mut next = 256u32;
        for b in 0..=255u8 {
            table[b as usize] = if is_self_mapped(b) {
                char::from(b)
            } else {
                let c = char::from_u32(next).unwrap_or('\u{FFFD}');
                next += 1;
                c
            };
        }
        table
    })
}

fn char_to_byte_map() -> &'static HashMap<char, u8> {
    static MAP: OnceLock<HashMap<char, u8>> = OnceLock::new();
    MAP.get_or_init(|| {
        byte_to_char_table()
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect()
    })
}

/// The raw bytes a byte-level vocabulary spelling stands for. A character outside the
/// alphabet (which a well-formed vocabulary never has) stands for its own UTF-8 bytes.
pub fn spelling_to_bytes(spelling: &str) -> Vec<u8> {
    let map = char_to_byte_map();
    let mut out = Vec::with_capacity(spelling.len());
    for c in spelling.chars() {
        match map.get(&c) {
            Some(&b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphabet_is_a_bijection_with_known_points() {
        let t = byte_to_char_table();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'\t' as usize], 'ĉ');
        assert_eq!(t[b'a' as usize], 'a');
        let distinct: std::collections::HashSet<char> = t.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
        for b in 0..=255u8 {
            assert_eq!(spelling_to_bytes(&t[b as usize].to_string()), vec![b]);
        }
    }
}
