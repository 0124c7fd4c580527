//! Fixed binary layouts for the records the service rewrites with every
//! batch (3Sigma distributions, job and task records): little-endian
//! integers and floats, strings as a u32 length and UTF-8 bytes, optional
//! values as a flag byte (0 or 1) and the value. JSON was a fifth of the
//! pipeline thread's instructions, most of it formatting floats and field
//! names that every reader knows anyway.
//!
//! [`Writer`] appends fields to a byte vector; [`Reader`] reads them back in
//! the same order and names the byte where a damaged record goes wrong.

/// Appends fields to a record's bytes.
pub trait Writer {
    fn put_u8(&mut self, v: u8);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_f64(&mut self, v: f64);
    fn put_str(&mut self, s: &str);
    fn put_opt_u64(&mut self, v: Option<u64>);
    fn put_opt_f64(&mut self, v: Option<f64>);
}

impl Writer for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }

    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }

    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }

    fn put_f64(&mut self, v: f64) {
        self.extend_from_slice(&v.to_le_bytes());
    }

    fn put_str(&mut self, s: &str) {
        let len = u32::try_from(s.len()).expect("strings in records are far below 4 GiB");
        self.put_u32(len);
        self.extend_from_slice(s.as_bytes());
    }

    fn put_opt_u64(&mut self, v: Option<u64>) {
        match v {
            None => self.push(0),
            Some(v) => {
                self.push(1);
                self.put_u64(v);
            }
        }
    }

    fn put_opt_f64(&mut self, v: Option<f64>) {
        match v {
            None => self.push(0),
            Some(v) => {
                self.push(1);
                self.put_f64(v);
            }
        }
    }
}

/// Reads a record's fields front to back.
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    /// The offset of the next field.
    pub fn at(&self) -> usize {
        self.at
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.slice(N)?.try_into().expect("N bytes"))
    }

    fn slice(&mut self, n: usize) -> Result<&'a [u8], String> {
        let bytes = self.bytes;
        let field = self
            .at
            .checked_add(n)
            .and_then(|end| bytes.get(self.at..end))
            .ok_or_else(|| {
                format!(
                    "record ends at byte {}, inside a {n}-byte field at byte {}",
                    bytes.len(),
                    self.at
                )
            })?;
        self.at += n;
        Ok(field)
    }

    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take::<1>()?[0])
    }

    pub fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    pub fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    pub fn f64(&mut self) -> Result<f64, String> {
        Ok(f64::from_le_bytes(self.take()?))
    }

    pub fn str(&mut self) -> Result<String, String> {
        let len = self.u32()? as usize;
        let at = self.at;
        let bytes = self.slice(len)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|e| format!("byte {at}: string is not UTF-8: {e}"))
    }

    fn flag(&mut self) -> Result<bool, String> {
        let at = self.at;
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            flag => Err(format!(
                "byte {at}: optional-value flag {flag}, expected 0 or 1"
            )),
        }
    }

    pub fn opt_u64(&mut self) -> Result<Option<u64>, String> {
        Ok(if self.flag()? {
            Some(self.u64()?)
        } else {
            None
        })
    }

    pub fn opt_f64(&mut self) -> Result<Option<f64>, String> {
        Ok(if self.flag()? {
            Some(self.f64()?)
        } else {
            None
        })
    }

    /// A one-byte index into `all`, named `what` in the error.
    pub fn index_of<T: Copy>(&mut self, all: &[T], what: &str) -> Result<T, String> {
        let at = self.at;
        let index = self.u8()?;
        all.get(usize::from(index))
            .copied()
            .ok_or_else(|| format!("byte {at}: no {what} with index {index}"))
    }

    /// The layout byte a record starts with, checked against `expected`.
    pub fn layout(&mut self, what: &str, expected: u8) -> Result<(), String> {
        let layout = self.u8()?;
        if layout != expected {
            return Err(format!("{what} layout {layout}, expected {expected}"));
        }
        Ok(())
    }

    /// Fails unless every byte was read.
    pub fn finish(self) -> Result<(), String> {
        if self.at != self.bytes.len() {
            return Err(format!(
                "{} bytes after the record's end at byte {}",
                self.bytes.len() - self.at,
                self.at
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_back_in_order_and_damage_names_the_byte() {
        let mut out = Vec::new();
        out.put_u8(7);
        out.put_str("héllo");
        out.put_opt_u64(None);
        out.put_opt_f64(Some(-2.5));
        out.put_u32(9);
        let mut r = Reader::new(&out);
        assert_eq!(r.u8(), Ok(7));
        assert_eq!(r.str().as_deref(), Ok("héllo"));
        assert_eq!(r.opt_u64(), Ok(None));
        assert_eq!(r.opt_f64(), Ok(Some(-2.5)));
        assert_eq!(
            r.index_of(&['a', 'b'], "letter"),
            Err("byte 21: no letter with index 9".into())
        );
        assert_eq!(r.at(), 22);

        let mut cut = Reader::new(&out[..5]);
        cut.u8().unwrap();
        assert_eq!(
            cut.str(),
            Err("record ends at byte 5, inside a 6-byte field at byte 5".into())
        );
        let mut flag = Reader::new(&[2]);
        assert_eq!(
            flag.opt_u64(),
            Err("byte 0: optional-value flag 2, expected 0 or 1".into())
        );
        let mut extra = Reader::new(&[1, 2]);
        extra.u8().unwrap();
        assert_eq!(
            extra.finish(),
            Err("1 bytes after the record's end at byte 1".into())
        );
        let mut layout = Reader::new(&[3]);
        assert_eq!(
            layout.layout("task record", 1),
            Err("task record layout 3, expected 1".into())
        );
    }
}
