//! A check of a GGUF header before candle reads it: candle's reader (0.11) bounds every length
//! by the file's size but divides by the file's `general.alignment` unchecked, so a zero there
//! is a panic (caught by the quantized file's reader, but printed). This walks the metadata to
//! that key; anything it cannot walk is left to candle's reader, which reports it as an error.
use std::io::{Read, Seek, SeekFrom};

/// The header's `general.alignment` when it is an integer of 0; `false` otherwise (including
/// headers this walk does not understand). Leaves the reader at the start.
pub(crate) fn has_zero_alignment<R: Read + Seek>(r: &mut R) -> bool {
    let zero = walk(r).unwrap_or(false);
    let _ = r.seek(SeekFrom::Start(0));
    zero
}

fn walk<R: Read + Seek>(r: &mut R) -> Option<bool> {
    r.seek(SeekFrom::Start(0)).ok()?;
    if u32v(r)? != 0x4655_4747 {
        return None;
    }
    // version 1 stores lengths and counts in 32 bits, later versions in 64
    let wide = u32v(r)? >= 2;
    let len = |r: &mut R| {
        if wide {
            u64v(r)
        } else {
            u32v(r).map(u64::from)
        }
    };
    let _tensors = len(r)?;
    let entries = len(r)?;
    for _ in 0..entries {
        let key_len = len(r)?;
        if key_len > 1 << 16 {
            return None;
        }
        let mut key = vec![0u8; usize::try_from(key_len).ok()?];
        r.read_exact(&mut key).ok()?;
        let ty = u32v(r)?;
        if key == b"general.alignment" {
            return Some(match ty {
                0 | 1 | 7 => u8v(r)? == 0,
                2 | 3 => u16v(r)? == 0,
                4 | 5 => u32v(r)? == 0,
                _ => false,
            });
        }
        skip(r, ty, wide, 0)?;
    }
    Some(false)
}

/// Skips a value of GGUF type `ty`.
fn skip<R: Read + Seek>(r: &mut R, ty: u32, wide: bool, depth: u32) -> Option<()> {
    let len = |r: &mut R| {
        if wide {
            u64v(r)
        } else {
            u32v(r).map(u64::from)
        }
    };
    let n: i64 = match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        8 => i64::try_from(len(r)?).ok()?,
        9 => {
            if depth > 2 {
                return None;
            }
            let inner = u32v(r)?;
            let count = len(r)?;
            if let Some(size) = fixed_size(inner) {
                i64::try_from(count.checked_mul(size)?).ok()?
            } else {
                for _ in 0..count.min(1 << 20) {
                    skip(r, inner, wide, depth + 1)?;
                }
                return (count <= 1 << 20).then_some(());
            }
        }
        _ => return None,
    };
    r.seek(SeekFrom::Current(n)).ok().map(|_| ())
}

/// Bytes of a fixed-size GGUF type.
fn fixed_size(ty: u32) -> Option<u64> {
    match ty {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

fn u8v<R: Read>(r: &mut R) -> Option<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b).ok()?;
    Some(b[0])
}

fn u16v<R: Read>(r: &mut R) -> Option<u16> {
    let mut b = [0u8; 2];
    r.read_exact(&mut b).ok()?;
    Some(u16::from_le_bytes(b))
}

fn u32v<R: Read>(r: &mut R) -> Option<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b).ok()?;
    Some(u32::from_le_bytes(b))
}

fn u64v<R: Read>(r: &mut R) -> Option<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b).ok()?;
    Some(u64::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn header(version: u32, entries: &[(&[u8], u32, &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0x4655_4747u32.to_le_bytes());
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        for (key, ty, value) in entries {
            b.extend_from_slice(&(key.len() as u64).to_le_bytes());
            b.extend_from_slice(key);
            b.extend_from_slice(&ty.to_le_bytes());
            b.extend_from_slice(value);
        }
        b
    }

    #[test]
    fn a_zero_alignment_is_found_past_other_entries() {
        let name = [&5u64.to_le_bytes()[..], b"hello"].concat();
        let list = [
            &8u32.to_le_bytes()[..],
            &2u64.to_le_bytes(),
            &1u64.to_le_bytes(),
            b"a",
            &2u64.to_le_bytes(),
            b"bc",
        ]
        .concat();
        let ints = [&4u32.to_le_bytes()[..], &3u64.to_le_bytes(), &[0u8; 12]].concat();
        let before: [(&[u8], u32, &[u8]); 3] = [
            (b"general.name", 8, &name),
            (b"names", 9, &list),
            (b"ints", 9, &ints),
        ];
        for (alignment, zero) in [(0u32, true), (32, false)] {
            let mut entries = before.to_vec();
            let v = alignment.to_le_bytes();
            entries.push((b"general.alignment", 4, &v));
            let mut r = Cursor::new(header(3, &entries));
            assert_eq!(has_zero_alignment(&mut r), zero);
            assert_eq!(r.position(), 0);
        }
        let v = 0u8.to_le_bytes();
        let mut r = Cursor::new(header(3, &[(b"general.alignment", 0, &v)]));
        assert!(has_zero_alignment(&mut r));
    }

    #[test]
    fn headers_it_cannot_walk_are_left_to_candle() {
        for b in [
            Vec::new(),
            b"GGUF".to_vec(),
            header(3, &[(b"x", 99, &[])]),
            header(3, &[(b"general.name", 8, &u64::MAX.to_le_bytes())]),
        ] {
            assert!(!has_zero_alignment(&mut Cursor::new(b)));
        }
    }
}
