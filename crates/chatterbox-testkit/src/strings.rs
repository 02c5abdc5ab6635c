//! Text fixtures: lists of strings stored as their concatenated UTF-8 bytes (`<name>`) plus
//! byte lengths (`<name>_len`), and lists of token-id rows stored the same way (`ids`,
//! `ids_len`); the text parity suites (chatterbox-text, chatterbox-kakasi) read and write them.
use crate::{Actual, Array, Error, Fixture, Result};

impl Fixture {
    /// The input strings `in.<name>` (strict UTF-8).
    pub fn input_strings(&self, name: &str) -> Result<Vec<String>> {
        let bytes: Vec<u8> = self
            .input_i64(name)?
            .data
            .iter()
            .map(|&b| u8::try_from(b).map_err(Error::case))
            .collect::<Result<_>>()?;
        let lens = self.input_i64(&format!("{name}_len"))?.data;
        let mut out = Vec::with_capacity(lens.len());
        let mut at = 0usize;
        for len in lens {
            let end = at + usize::try_from(len).map_err(Error::case)?;
            let s = std::str::from_utf8(
                bytes
                    .get(at..end)
                    .ok_or_else(|| Error::case("lengths overrun"))?,
            )
            .map_err(Error::case)?;
            out.push(s.to_string());
            at = end;
        }
        Ok(out)
    }

    /// The recorded output strings `out.<name>` (lossy UTF-8, for messages).
    pub fn expected_strings(&self, name: &str) -> Result<Vec<String>> {
        let bytes: Vec<u8> = self
            .i64(&format!("out.{name}"))?
            .data
            .iter()
            .map(|&b| b as u8)
            .collect();
        let lens = self.i64(&format!("out.{name}_len"))?.data;
        let mut at = 0usize;
        let mut v = Vec::new();
        for len in lens {
            let end = at + len as usize;
            v.push(
                String::from_utf8_lossy(&bytes[at.min(bytes.len())..end.min(bytes.len())])
                    .into_owned(),
            );
            at = end;
        }
        Ok(v)
    }

    /// Prints the first line where `actual` differs from the recorded strings `out.<name>`, to
    /// make a failing row readable (the row itself only says that the byte arrays differ).
    fn report_first_mismatch(&self, name: &str, inputs: &[String], actual: &[String]) {
        let Ok(expected) = self.expected_strings(name) else {
            return;
        };
        for (i, (a, x)) in actual.iter().zip(&expected).enumerate() {
            if a != x {
                eprintln!(
                    "[{}] first mismatch at line {i}: input {:?}\n  rust      {a:?}\n  reference {x:?}",
                    self.meta.case, inputs[i]
                );
                return;
            }
        }
    }

    /// Prints the first line whose ids differ from the recorded `out.ids`.
    pub fn report_first_id_mismatch(&self, inputs: &[String], actual: &[Vec<u32>]) {
        let (Ok(ids), Ok(lens)) = (self.i64("out.ids"), self.i64("out.ids_len")) else {
            return;
        };
        let mut at = 0usize;
        for (i, (a, len)) in actual.iter().zip(lens.data).enumerate() {
            let end = (at + len as usize).min(ids.data.len());
            let x: Vec<u32> = ids.data[at..end].iter().map(|&v| v as u32).collect();
            if *a != x {
                eprintln!(
                    "[{}] first id mismatch at line {i}: input {:?}\n  rust      {a:?}\n  reference {x:?}",
                    self.meta.case, inputs[i]
                );
                return;
            }
            at = end;
        }
    }

    /// `f` over each input line `text`: the lines and what `f` made of each, in order.
    pub fn map_lines<T>(&self, f: impl FnMut(&str) -> Result<T>) -> Result<(Vec<String>, Vec<T>)> {
        let texts = self.input_strings("text")?;
        let out = texts
            .iter()
            .map(|t| t.as_str())
            .map(f)
            .collect::<Result<_>>()?;
        Ok((texts, out))
    }

    /// `f` over each input line `text` with its language id `lang` (empty for none): the
    /// lines and what `f` made of each, in order.
    pub fn map_lines_with_language<T>(
        &self,
        mut f: impl FnMut(&str, &str) -> Result<T>,
    ) -> Result<(Vec<String>, Vec<T>)> {
        let texts = self.input_strings("text")?;
        let langs = self.input_strings("lang")?;
        let out = texts
            .iter()
            .zip(&langs)
            .map(|(t, l)| f(t, l))
            .collect::<Result<_>>()?;
        Ok((texts, out))
    }

    /// The outputs `<name>` of a case that makes a string of each input line, the first
    /// mismatch against the recording reported.
    pub fn strings_outputs(
        &self,
        name: &str,
        inputs: &[String],
        actual: &[String],
    ) -> Vec<(String, Actual)> {
        self.report_first_mismatch(name, inputs, actual);
        pack_strings(name, actual)
    }

    /// The outputs of a tokenizer case: the ids of each input line and their decoding by
    /// `decode`, each first mismatch against the recording reported.
    pub fn ids_and_decoded<E: std::fmt::Display>(
        &self,
        inputs: &[String],
        ids: &[Vec<u32>],
        decode: impl Fn(&[u32]) -> std::result::Result<String, E>,
    ) -> Result<Vec<(String, Actual)>> {
        let decoded: Vec<String> = ids
            .iter()
            .map(|i| decode(i).map_err(Error::case))
            .collect::<Result<_>>()?;
        self.report_first_id_mismatch(inputs, ids);
        let mut out = pack_ids(ids);
        out.extend(self.strings_outputs("decoded", inputs, &decoded));
        Ok(out)
    }
}

/// Strings as the outputs `<name>` (bytes) and `<name>_len`.
pub fn pack_strings(name: &str, v: &[String]) -> Vec<(String, Actual)> {
    let bytes: Vec<i64> = v.iter().flat_map(|s| s.bytes()).map(i64::from).collect();
    let lens: Vec<i64> = v.iter().map(|s| s.len() as i64).collect();
    vec![
        (name.to_string(), Array::vector(bytes).into()),
        (format!("{name}_len"), Array::vector(lens).into()),
    ]
}

/// Token-id rows as the outputs `ids` and `ids_len`.
pub fn pack_ids(v: &[Vec<u32>]) -> Vec<(String, Actual)> {
    let ids: Vec<i64> = v.iter().flatten().map(|&i| i64::from(i)).collect();
    let lens: Vec<i64> = v.iter().map(|s| s.len() as i64).collect();
    vec![
        ("ids".to_string(), Array::vector(ids).into()),
        ("ids_len".to_string(), Array::vector(lens).into()),
    ]
}
