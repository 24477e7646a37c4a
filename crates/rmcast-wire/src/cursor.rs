//! Bounds-checked big-endian readers and writers over byte slices.

use crate::{DecodeError, EncodeError};

/// Reads fields from a received datagram; every read checks the length first.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Truncated)?;
        let out = self.buf.get(self.pos..end).ok_or(DecodeError::Truncated)?;
        self.pos = end;
        Ok(out)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// A UTF-8 string preceded by a one-byte length.
    pub(crate) fn text(&mut self) -> Result<&'a str, DecodeError> {
        let len = usize::from(self.u8()?);
        core::str::from_utf8(self.bytes(len)?).map_err(|_| DecodeError::BadText)
    }

    /// A UTF-8 string preceded by a two-byte length (the overlay's strings).
    pub(crate) fn text16(&mut self) -> Result<&'a str, DecodeError> {
        let len = usize::from(self.u16()?);
        core::str::from_utf8(self.bytes(len)?).map_err(|_| DecodeError::BadText)
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }

    /// Fails unless every byte was consumed: trailing garbage is an error,
    /// so that every accepted datagram re-encodes to the same bytes.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes)
        }
    }
}

/// Writes fields into a send buffer; every write checks the room first.
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn bytes(&mut self, data: &[u8]) -> Result<(), EncodeError> {
        let end = self
            .pos
            .checked_add(data.len())
            .ok_or(EncodeError::BufferTooSmall)?;
        let dst = self
            .buf
            .get_mut(self.pos..end)
            .ok_or(EncodeError::BufferTooSmall)?;
        dst.copy_from_slice(data);
        self.pos = end;
        Ok(())
    }

    pub(crate) fn u8(&mut self, v: u8) -> Result<(), EncodeError> {
        self.bytes(&[v])
    }

    pub(crate) fn u16(&mut self, v: u16) -> Result<(), EncodeError> {
        self.bytes(&v.to_be_bytes())
    }

    pub(crate) fn u32(&mut self, v: u32) -> Result<(), EncodeError> {
        self.bytes(&v.to_be_bytes())
    }

    pub(crate) fn u64(&mut self, v: u64) -> Result<(), EncodeError> {
        self.bytes(&v.to_be_bytes())
    }

    pub(crate) fn text(&mut self, s: &str) -> Result<(), EncodeError> {
        let len = u8::try_from(s.len()).map_err(|_| EncodeError::TextTooLong)?;
        self.u8(len)?;
        self.bytes(s.as_bytes())
    }

    /// A UTF-8 string preceded by a two-byte length (the overlay's strings).
    pub(crate) fn text16(&mut self, s: &str) -> Result<(), EncodeError> {
        let len = u16::try_from(s.len()).map_err(|_| EncodeError::TextTooLong)?;
        self.u16(len)?;
        self.bytes(s.as_bytes())
    }

    pub(crate) fn len(&self) -> usize {
        self.pos
    }
}
