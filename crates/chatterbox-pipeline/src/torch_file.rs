//! Torch zip files (`torch.save`) checked before candle's pickle reader sees them.
//!
//! candle's pickle reader (candle-core 0.11 `pickle.rs`) trusts the file: it panics on tuples
//! shorter than it indexes, on a `LONG1` wider than 8 bytes and on a negative storage offset;
//! it allocates whatever a length or shape says (a 4 GiB string from a 5-byte header, a
//! tensor of terabytes from a 400-byte file); its memo copies objects without limit (a few
//! hundred bytes that copy an object twice, forty times over, never finish); and it recurses
//! without a depth limit (a million nested tuples overflow the stack). `check_torch_file`
//! walks the archive first and refuses all of these, so that what candle then reads is
//! bounded by the file's size.
use crate::error::{invalid, loading};
use crate::Result;
use std::path::Path;

/// Deepest nesting of pickle objects accepted: torch state dicts nest 7 deep, and candle
/// drops, clones and prints objects recursively.
const MAX_PICKLE_DEPTH: u32 = 64;
/// How many objects and string bytes candle's memo may copy, per byte of pickle (plus
/// [`PICKLE_COPY_SLACK`]): the reference's `conds.pt` copies 3.4 per byte and a
/// `torch.save`d state dict 4.2 (each memoized object is copied once per memoized object
/// around it); a memo bomb copies 2^40.
const PICKLE_COPY_FACTOR: u64 = 16;
/// Copies allowed on top of [`PICKLE_COPY_FACTOR`] (tiny pickles).
const PICKLE_COPY_SLACK: u64 = 4096;

/// [`check_torch_file`] for a weights file: the reason as a loading error naming it. Call it
/// before anything hands `path` to candle's pickle reader.
pub(crate) fn check_torch_weights(path: &Path) -> Result<()> {
    check_torch_file(path).map_err(|reason| loading(path)(invalid("torch file", reason)))
}

/// Checks a torch zip file (`torch.save`: a zip of stored entries, `*/data.pkl` holding the
/// pickle, `*/data/<key>` the storages) for what candle's reader cannot survive; the reason
/// when it is refused.
pub(crate) fn check_torch_file(path: &Path) -> std::result::Result<(), String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let file_len = file.metadata().map_err(|e| e.to_string())?.len();
    let mut read_at = |at: u64, len: u64| -> std::result::Result<Vec<u8>, String> {
        if at.checked_add(len).is_none_or(|end| end > file_len) {
            return Err(format!(
                "zip record at {at} ({len} bytes) lies past the end of the file"
            ));
        }
        let mut v = vec![0u8; len as usize];
        file.seek(SeekFrom::Start(at))
            .and_then(|_| file.read_exact(&mut v))
            .map_err(|e| e.to_string())?;
        Ok(v)
    };
    let entries = zip_entries(file_len, &mut read_at)?;
    // Storage sizes by name (the smallest, should a name repeat).
    let mut storages: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    for e in &entries {
        let s = storages.entry(e.name.as_str()).or_insert(e.size);
        *s = (*s).min(e.size);
    }
    for e in entries.iter().filter(|e| e.name.ends_with("data.pkl")) {
        if e.method != 0 || e.size != e.compressed {
            return Err(format!(
                "{} is compressed (torch writes stored entries)",
                e.name
            ));
        }
        let local = read_at(e.offset, 30)?;
        if le(&local, 0, 4) != Some(0x0403_4b50) {
            return Err(format!("{}: bad local zip header", e.name));
        }
        let skip = 30 + le(&local, 26, 2).unwrap_or(0) + le(&local, 28, 2).unwrap_or(0);
        let pickle = read_at(e.offset + skip, e.size)?;
        scan_pickle(&pickle).map_err(|m| format!("{}: {m}", e.name))?;
        let mut stack = candle_core::pickle::Stack::empty();
        stack
            .read_loop(&mut std::io::Cursor::new(&pickle[..]))
            .map_err(|m| format!("{}: {m}", e.name))?;
        let obj = stack.finalize().map_err(|m| format!("{}: {m}", e.name))?;
        let dir = e.name.strip_suffix(".pkl").unwrap_or(&e.name);
        check_state_dicts(&obj, &|name| {
            storages.get(format!("{dir}/{name}").as_str()).copied()
        })
        .map_err(|m| format!("{}: {m}", e.name))?;
    }
    Ok(())
}

/// Little-endian unsigned integer of `n` bytes at `at`.
fn le(b: &[u8], at: usize, n: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(n)?)?;
    Some(s.iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x)))
}

/// One file of a zip archive, from its central directory.
struct ZipEntry {
    name: String,
    method: u64,
    size: u64,
    compressed: u64,
    offset: u64,
}

/// The central directory of a zip archive (ZIP64 included, as `torch.save` writes it).
fn zip_entries(
    file_len: u64,
    read_at: &mut dyn FnMut(u64, u64) -> std::result::Result<Vec<u8>, String>,
) -> std::result::Result<Vec<ZipEntry>, String> {
    const MAX: u64 = 0xffff_ffff;
    let tail_len = file_len.min(22 + 0xffff);
    let tail = read_at(file_len - tail_len, tail_len)?;
    let eocd = (0..tail.len().saturating_sub(21))
        .rev()
        .find(|&i| le(&tail, i, 4) == Some(0x0605_4b50))
        .ok_or("not a zip archive (no end of central directory)")?;
    let eocd_at = file_len - tail_len + eocd as u64;
    let field = |at: usize, n: usize| le(&tail, eocd + at, n).unwrap_or(0);
    let (mut count, mut cd_size, mut cd_at) = (field(10, 2), field(12, 4), field(16, 4));
    let eocd_count = count;
    if eocd_at >= 20 {
        let locator = read_at(eocd_at - 20, 20)?;
        if le(&locator, 0, 4) == Some(0x0706_4b50) {
            let z = read_at(le(&locator, 8, 8).unwrap_or(u64::MAX), 56)?;
            if le(&z, 0, 4) != Some(0x0606_4b50) {
                return Err("bad ZIP64 end of central directory".into());
            }
            let f = |at| le(&z, at, 8).unwrap_or(0);
            (count, cd_size, cd_at) = (f(32), f(40), f(48));
            // Readers differ in which count they believe (the zip crate under candle found
            // entries where a zero ZIP64 count hid them all from this check): both records
            // and both of the ZIP64 record's counts must agree.
            if f(24) != count || (eocd_count != 0xffff && eocd_count != count) {
                return Err(format!(
                    "zip end records disagree on the entry count ({eocd_count}, {}, {count})",
                    f(24)
                ));
            }
        }
    }
    // Every central record takes at least 46 bytes: a count beyond that is a lie.
    if count.saturating_mul(46) > cd_size {
        return Err(format!(
            "zip central directory of {cd_size} bytes cannot hold {count} entries"
        ));
    }
    let cd = read_at(cd_at, cd_size)?;
    let mut entries = Vec::with_capacity(count as usize);
    let mut at = 0usize;
    for _ in 0..count {
        let bad = || format!("bad zip central directory record at {at}");
        if le(&cd, at, 4) != Some(0x0201_4b50) {
            return Err(bad());
        }
        let f = |o: usize, n: usize| le(&cd, at + o, n).ok_or_else(bad);
        let (method, mut compressed, mut size) = (f(10, 2)?, f(20, 4)?, f(24, 4)?);
        let (n, x, c) = (f(28, 2)? as usize, f(30, 2)? as usize, f(32, 2)? as usize);
        let mut offset = f(42, 4)?;
        let name = cd.get(at + 46..at + 46 + n).ok_or_else(bad)?;
        let mut extra = cd.get(at + 46 + n..at + 46 + n + x).ok_or_else(bad)?;
        // ZIP64 extended information: the fields that overflowed 32 bits, in this order.
        while let (Some(id), Some(len)) = (le(extra, 0, 2), le(extra, 2, 2)) {
            let data = extra.get(4..4 + len as usize).ok_or_else(bad)?;
            if id == 1 {
                let mut k = 0;
                for v in [&mut size, &mut compressed, &mut offset] {
                    if *v == MAX {
                        *v = le(data, k, 8).ok_or_else(bad)?;
                        k += 8;
                    }
                }
            }
            extra = &extra[4 + len as usize..];
        }
        entries.push(ZipEntry {
            name: String::from_utf8_lossy(name).into_owned(),
            method,
            size,
            compressed,
            offset,
        });
        at += 46 + n + x + c;
    }
    // Records the count leaves out would be read by another reader and not checked here.
    if at != cd.len() {
        return Err(format!(
            "zip central directory of {cd_size} bytes holds more than the {count} entries \
             its end record counts"
        ));
    }
    Ok(entries)
}

/// Runs the pickle opcodes candle's `Stack` knows on a model of its stack that keeps, for
/// each object, only its nesting depth and its size (objects plus string bytes): lengths must
/// fit in the data, `LONG1` in 8 bytes, depths under [`MAX_PICKLE_DEPTH`], and memo copies
/// under [`PICKLE_COPY_FACTOR`] per byte.
fn scan_pickle(p: &[u8]) -> std::result::Result<(), String> {
    #[derive(Clone, Copy)]
    struct Obj {
        depth: u32,
        size: u64,
    }
    const MARK: Obj = Obj { depth: 0, size: 0 };
    let budget = PICKLE_COPY_FACTOR
        .saturating_mul(p.len() as u64)
        .saturating_add(PICKLE_COPY_SLACK);
    let mut copied = 0u64;
    let mut stack: Vec<Option<Obj>> = Vec::new(); // `None`: a mark
                                                  // candle memoizes marks too, and a mark fetched from the memo is a mark again
    let mut memo: std::collections::HashMap<u64, Option<Obj>> = std::collections::HashMap::new();
    let mut at = 0usize;
    let take = |at: &mut usize, n: usize| -> std::result::Result<&[u8], String> {
        let s = p
            .get(*at..at.saturating_add(n))
            .ok_or_else(|| format!("truncated at byte {at}"))?;
        *at += n;
        Ok(s)
    };
    let node = |children: &[Option<Obj>]| -> std::result::Result<Obj, String> {
        let o = children
            .iter()
            .flatten()
            .fold(Obj { depth: 1, size: 1 }, |a, c| Obj {
                depth: a.depth.max(c.depth + 1),
                size: a.size.saturating_add(c.size),
            });
        if o.depth > MAX_PICKLE_DEPTH {
            return Err(format!("objects nest deeper than {MAX_PICKLE_DEPTH}"));
        }
        Ok(o)
    };
    let leaf = |size: usize| {
        Some(Obj {
            depth: 1,
            size: size as u64 + 1,
        })
    };
    let pop =
        |stack: &mut Vec<Option<Obj>>, n: usize| -> std::result::Result<Vec<Option<Obj>>, String> {
            let k = stack.len().checked_sub(n).ok_or("pops an empty stack")?;
            Ok(stack.split_off(k))
        };
    let to_mark = |stack: &mut Vec<Option<Obj>>| -> std::result::Result<Vec<Option<Obj>>, String> {
        let m = stack.iter().rposition(Option::is_none).ok_or("no mark")?;
        let items = stack.split_off(m + 1);
        stack.pop();
        Ok(items)
    };
    let mut charge = |o: Obj| -> std::result::Result<(), String> {
        copied = copied.saturating_add(o.size);
        if copied > budget {
            return Err(format!(
                "its memo copies more than {budget} objects (a pickle of {} bytes)",
                p.len()
            ));
        }
        Ok(())
    };
    loop {
        let op = take(&mut at, 1)?[0];
        match op {
            0x80 => {
                take(&mut at, 1)?;
            }
            b'c' => {
                let mut n = 0;
                for _ in 0..2 {
                    let rest = &p[at..];
                    let line = rest
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(rest.len(), |i| i + 1);
                    take(&mut at, line)?;
                    n += line;
                }
                stack.push(leaf(n));
            }
            b'q' | b'r' => {
                let b = take(&mut at, if op == b'q' { 1 } else { 4 })?;
                let id = le(b, 0, b.len()).unwrap_or(0);
                let top = *stack.last().ok_or("memoizes an empty stack")?;
                charge(top.unwrap_or(MARK))?;
                memo.insert(id, top);
            }
            b'h' | b'j' => {
                let b = take(&mut at, if op == b'h' { 1 } else { 4 })?;
                let id = le(b, 0, b.len()).unwrap_or(0);
                let o = *memo.get(&id).ok_or_else(|| format!("memo {id} is empty"))?;
                charge(o.unwrap_or(MARK))?;
                stack.push(o);
            }
            // candle reads `d` (DICT) as an empty dict
            b')' | b'}' | b'd' | b']' | b'N' | 0x88 | 0x89 => stack.push(leaf(0)),
            b'(' => stack.push(None),
            b'X' => {
                let n = le(take(&mut at, 4)?, 0, 4).unwrap_or(0) as usize;
                take(&mut at, n)?;
                stack.push(leaf(n));
            }
            b'K' | b'M' | b'J' | b'G' => {
                take(
                    &mut at,
                    match op {
                        b'K' => 1,
                        b'M' => 2,
                        b'J' => 4,
                        _ => 8,
                    },
                )?;
                stack.push(leaf(0));
            }
            0x8a => {
                let n = take(&mut at, 1)?[0] as usize;
                if n > 8 {
                    return Err(format!("LONG1 of {n} bytes"));
                }
                take(&mut at, n)?;
                stack.push(leaf(0));
            }
            b'R' | 0x81 | b'b' | b'Q' | 0x85 | 0x86 | 0x87 => {
                let n = match op {
                    b'Q' | 0x85 => 1,
                    0x87 => 3,
                    _ => 2,
                };
                let items = pop(&mut stack, n)?;
                stack.push(Some(node(&items)?));
            }
            b't' => {
                let items = to_mark(&mut stack)?;
                stack.push(Some(node(&items)?));
            }
            b's' | b'a' | b'u' | b'e' => {
                let items = if op == b's' || op == b'a' {
                    pop(&mut stack, if op == b's' { 2 } else { 1 })?
                } else {
                    to_mark(&mut stack)?
                };
                // the items go into the container below them
                let target = stack.pop().ok_or("no container")?.unwrap_or(MARK);
                let o = node(&items)?;
                stack.push(Some(Obj {
                    depth: target.depth.max(o.depth),
                    size: target.size.saturating_add(o.size),
                }));
            }
            b'.' => return Ok(()),
            other => return Err(format!("unknown opcode {other:#04x} at byte {}", at - 1)),
        }
    }
}

/// Walks the object candle reads state dicts from (the pickle itself, or under a key) and
/// checks each tensor as candle will build it.
fn check_state_dicts(
    obj: &candle_core::pickle::Object,
    storage: &dyn Fn(&str) -> Option<u64>,
) -> std::result::Result<(), String> {
    use candle_core::pickle::Object;
    // a scripted module: its state is the argument of BUILD
    let obj = match obj {
        Object::Build { callable, args } => match &**callable {
            Object::Reduce { callable, .. } => match &**callable {
                Object::Class {
                    module_name,
                    class_name,
                } if module_name == "__torch__" && class_name == "Module" => &**args,
                _ => return Ok(()),
            },
            _ => return Ok(()),
        },
        o => o,
    };
    let Object::Dict(items) = obj else {
        return Ok(());
    };
    for (name, value) in items {
        check_tensor(name, value, storage)?;
        if let Object::Dict(inner) = value {
            // `read_all_with_key(path, Some(key))` reads the dict under `key`
            for (name, value) in inner {
                check_tensor(name, value, storage)?;
            }
        }
    }
    Ok(())
}

/// `Object::into_tensor_info` and `rebuild_args` of candle's pickle.rs, refusing what would
/// panic there and tensors larger than their storage entry.
fn check_tensor(
    name: &candle_core::pickle::Object,
    value: &candle_core::pickle::Object,
    storage: &dyn Fn(&str) -> Option<u64>,
) -> std::result::Result<(), String> {
    use candle_core::pickle::Object;
    let (Object::Unicode(name), Object::Reduce { callable, args }) = (name, value) else {
        return Ok(());
    };
    let class = |o: &Object, module: &str, class: &str| matches!(o, Object::Class { module_name, class_name } if module_name == module && class_name == class);
    let short = |what: &str| format!("tensor {name:?}: {what} has too few items");
    let (callable, args) = match (&**callable, &**args) {
        (c, Object::Tuple(a)) if class(c, "torch._tensor", "_rebuild_from_type_v2") => {
            // candle takes items 0 and 2
            match (a.first(), a.get(2)) {
                (Some(c), Some(a)) => (c, a),
                _ => return Err(short("_rebuild_from_type_v2")),
            }
        }
        (c, Object::Tuple(a)) if class(c, "torch._utils", "_rebuild_parameter") => {
            match a.first().ok_or_else(|| short("_rebuild_parameter"))? {
                Object::Reduce { callable, args } => (&**callable, &**args),
                _ => return Ok(()),
            }
        }
        (c, a) => (c, a),
    };
    if !class(callable, "torch._utils", "_rebuild_tensor_v2") {
        return Ok(());
    }
    let Object::Tuple(args) = args else {
        return Ok(());
    };
    if args.len() < 4 {
        return Err(short("_rebuild_tensor_v2"));
    }
    let dims = |o: &Object| match o {
        Object::Tuple(v) => v
            .iter()
            .map(|d| match d {
                Object::Int(i) => usize::try_from(*i).ok(),
                _ => None,
            })
            .collect::<Option<Vec<usize>>>(),
        _ => None,
    };
    let int = |o: &Object| match o {
        Object::Int(i) => Some(i64::from(*i)),
        Object::Long(i) => Some(*i),
        _ => None,
    };
    let (Some(size), Some(_stride), Some(offset), Object::PersistentLoad(st)) =
        (dims(&args[2]), dims(&args[3]), int(&args[1]), &args[0])
    else {
        return Ok(()); // candle skips it with a message
    };
    let Object::Tuple(st) = &**st else {
        return Ok(());
    };
    if st.len() < 5 {
        return Err(short("its storage"));
    }
    let (Object::Class { class_name, .. }, Object::Unicode(key)) = (&st[1], &st[2]) else {
        return Ok(());
    };
    let elem: u64 = match class_name.as_str() {
        "FloatStorage" => 4,
        "DoubleStorage" | "LongStorage" => 8,
        "HalfStorage" | "BFloat16Storage" => 2,
        "ByteStorage" => 1,
        _ => return Ok(()), // candle skips other dtypes
    };
    let numel = size.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
    let bytes = u64::try_from(offset)
        .ok()
        .zip(numel)
        .and_then(|(o, n)| o.checked_add(n)?.checked_mul(elem));
    let bytes = bytes
        .ok_or_else(|| format!("tensor {name:?}: shape {size:?} at offset {offset} overflows"))?;
    match storage(key) {
        Some(have) if have >= bytes => Ok(()),
        Some(have) => Err(format!(
            "tensor {name:?} of shape {size:?} needs {bytes} bytes; its storage {key:?} has {have}"
        )),
        None => Err(format!(
            "tensor {name:?}: no storage {key:?} in the archive"
        )),
    }
}
