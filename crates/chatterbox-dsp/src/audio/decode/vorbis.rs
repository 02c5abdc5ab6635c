//! A check of the Vorbis setup header before symphonia reads it, for two faults of symphonia
//! 0.6.1 with hostile codebooks:
//!
//! - It builds every codebook's lookup tables as soon as it reads the header, at a cost that
//!   grows with the codewords' lengths, not with the bytes that declare them. Its Huffman tables
//!   read 8 bits at a time, one 256-entry block for each 8-, 16- and 24-bit prefix that longer
//!   codewords share, so one codebook of 2^17 entries with 17-bit codewords takes 20 bytes to
//!   declare and about 430 MB to build, and a header may hold 256 codebooks.
//! - Its `lookup1_values` computes in `f32` and asserts the result, which fails (a panic, in
//!   release builds too) for codebooks such as 2^24 - 1 entries in 2 dimensions or 2^17 entries
//!   in 32.

/// What the codebooks may cost in all. Measured on libvorbis streams (mono to 5.1, 8 to
/// 48 kHz, every quality): at most 15 MiB by this estimate, 5 MiB actually allocated.
const CODEBOOK_BUDGET: u64 = 32 << 20;
/// Bytes per Huffman lookup block: 256 8-byte entries, its values and bookkeeping (measured
/// 3.3 to 6.5 KiB).
const BLOCK_BYTES: u64 = 8 << 10;
/// Bytes per entry besides the blocks (code lengths, codewords, values, building lists).
const ENTRY_BYTES: u64 = 16;

/// Bits read least-significant first, as Vorbis packs them.
struct Bits<'a> {
    data: &'a [u8],
    pos: u64,
}

impl Bits<'_> {
    /// The next `n` (at most 64) bits.
    fn read(&mut self, n: u32) -> Result<u64, Stop> {
        let start = self.pos;
        self.skip(u64::from(n))?;
        let mut v = 0;
        for i in 0..u64::from(n) {
            let bit = start + i;
            let byte = self.data.get((bit / 8) as usize).ok_or(Stop::Unreadable)?;
            v |= u64::from((byte >> (bit % 8)) & 1) << i;
        }
        Ok(v)
    }

    /// Moves on `n` bits.
    fn skip(&mut self, n: u64) -> Result<(), Stop> {
        match self.pos.checked_add(n) {
            Some(end) if end <= self.data.len() as u64 * 8 => {
                self.pos = end;
                Ok(())
            }
            _ => Err(Stop::Unreadable),
        }
    }
}

/// Why a codebook stops the check.
enum Stop {
    /// The header ends or is malformed here: symphonia rejects it itself.
    Unreadable,
    /// symphonia would panic on it.
    Invalid(&'static str),
}

/// Checks the codebooks of a Vorbis setup header packet (it starts with `\x05vorbis`).
pub(super) fn check_setup(packet: &[u8]) -> Result<(), String> {
    let Some(data) = packet.strip_prefix(b"\x05vorbis") else {
        return Ok(());
    };
    let mut bits = Bits { data, pos: 0 };
    let Ok(count) = bits.read(8) else {
        return Ok(());
    };
    let mut cost = 0u64;
    for _ in 0..=count {
        match codebook_cost(&mut bits) {
            Ok(more) => cost = cost.saturating_add(more),
            Err(Stop::Unreadable) => break,
            Err(Stop::Invalid(why)) => return Err(why.into()),
        }
        if cost > CODEBOOK_BUDGET {
            return Err(format!(
                "its codebooks would take over {} MiB to build",
                CODEBOOK_BUDGET >> 20
            ));
        }
    }
    Ok(())
}

/// The number of bits needed for `x` (Vorbis's `ilog`).
fn ilog(x: u64) -> u32 {
    64 - x.leading_zeros()
}

/// The largest `v` with `v^dims <= entries` (Vorbis's `lookup1_values`), exactly.
fn lookup1_values(entries: u64, dims: u32) -> u64 {
    let fits = |v: u64| v.checked_pow(dims).is_some_and(|p| p <= entries);
    let mut v = (entries as f64).powf(1.0 / f64::from(dims)) as u64;
    while v > 0 && !fits(v) {
        v -= 1;
    }
    while fits(v + 1) {
        v += 1;
    }
    v
}

/// Reads one codebook and returns what symphonia will allocate for it, at most.
fn codebook_cost(bits: &mut Bits) -> Result<u64, Stop> {
    if bits.read(24)? != 0x564342 {
        return Err(Stop::Unreadable);
    }
    let dims = bits.read(16)?;
    let entries = bits.read(24)?;
    if dims == 0 {
        return Err(Stop::Unreadable);
    }
    // The Kraft sums of the codewords longer than 8, 16 and 24 bits, in units of 2^-32. A
    // tree symphonia builds is complete, so it has exactly `2^(8 l) x` that sum prefixes of
    // `8 l` bits with longer codewords under them, each one lookup block.
    let mut longer = [0u64; 3];
    let mut add = |len: u64, n: u64| {
        for (l, sum) in (1u64..).zip(longer.iter_mut()) {
            if len > 8 * l && len <= 32 {
                *sum = sum.saturating_add(n << (32 - len));
            }
        }
    };
    if bits.read(1)? == 0 {
        let sparse = bits.read(1)? == 1;
        for _ in 0..entries {
            // sparse: a used flag before each entry's length
            if !sparse || bits.read(1)? == 1 {
                add(bits.read(5)? + 1, 1);
            }
        }
    } else {
        // length-ordered: runs of codewords of increasing length
        let mut len = bits.read(5)? + 1;
        let mut done = 0;
        while done < entries {
            let n = bits.read(ilog(entries - done))?;
            add(len, n);
            done += n;
            len += 1;
        }
    }
    let blocks: u64 = 1
        + (1u64..)
            .zip(longer)
            .map(|(l, sum)| sum.div_ceil(1 << (32 - 8 * l)))
            .sum::<u64>();
    let mut cost = blocks * BLOCK_BYTES + entries * ENTRY_BYTES;
    match bits.read(4)? {
        0 => {}
        lookup @ (1 | 2) => {
            bits.skip(32 + 32)?;
            let value_bits = bits.read(4)? + 1;
            bits.skip(1)?;
            let values = if lookup == 1 {
                let dims = dims as u32;
                let v = lookup1_values(entries, dims);
                // symphonia's f32 estimate and its assertions
                let approx = (entries as f32).powf(1.0 / dims as f32).floor() as u64;
                if approx != v
                    || (v + 1)
                        .checked_pow(dims)
                        .is_none_or(|p| p > u64::from(u32::MAX))
                {
                    return Err(Stop::Invalid("a codebook's lookup table is out of range"));
                }
                v
            } else {
                entries * dims
            };
            bits.skip(values.saturating_mul(value_bits))?;
            // the unpacked vectors: entries x dims f32, built before the tree is checked
            cost += entries * dims * 4;
        }
        _ => return Err(Stop::Unreadable),
    }
    Ok(cost)
}
