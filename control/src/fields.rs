//! The TLV fields of a decoded frame body, handed out one tag at a time.

use crate::cursor::Reader;
use crate::error::WireError;
use crate::tag_set::TagSet;

/// The fields of a frame whose envelope and TLV structure have been checked.
///
/// A message decoder takes each tag it knows (at most once), then calls [`Fields::finish`], which
/// rejects the frame if a critical tag was left untaken — a field this decoder does not
/// understand and must not ignore. Untaken non-critical fields are skipped. Forgetting `finish`
/// would silently accept unknown critical fields, hence `must_use`.
#[derive(Debug, Clone)]
#[must_use = "call `finish` to reject unknown critical fields"]
pub struct Fields<'a> {
    body: &'a [u8],
    present: TagSet,
    taken: TagSet,
}

impl<'a> Fields<'a> {
    /// Checks that `body` is a sequence of complete fields with distinct tags.
    pub(crate) fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        let mut present = TagSet::default();
        let mut reader = Reader::new(body);
        while !reader.is_empty() {
            let (tag, _) = read_field(&mut reader)?;
            if !present.insert(tag) {
                return Err(WireError::DuplicateField(tag));
            }
        }
        Ok(Fields { body, present, taken: TagSet::default() })
    }

    /// The value of field `tag`, unless it is absent or was already taken.
    pub fn take(&mut self, tag: u8) -> Option<&'a [u8]> {
        if !self.present.contains(tag) || !self.taken.insert(tag) {
            return None;
        }
        let mut reader = Reader::new(self.body);
        // `parse` already walked this body, so the walk cannot fail; stopping on an error anyway
        // keeps this panic-free without relying on that argument.
        while let Ok((found, value)) = read_field(&mut reader) {
            if found == tag {
                return Some(value);
            }
        }
        None
    }

    /// The value of field `tag`, or [`WireError::MissingField`] naming it `name`.
    pub fn require(&mut self, tag: u8, name: &'static str) -> Result<&'a [u8], WireError> {
        self.take(tag).ok_or(WireError::MissingField(name))
    }

    /// The value of a fixed-size field, if present; any other length is
    /// [`WireError::BadFieldLength`].
    pub fn take_array<const N: usize>(&mut self, tag: u8) -> Result<Option<[u8; N]>, WireError> {
        self.take(tag).map(|value| exact::<N>(tag, value)).transpose()
    }

    /// The value of a required fixed-size field.
    pub fn require_array<const N: usize>(
        &mut self,
        tag: u8,
        name: &'static str,
    ) -> Result<[u8; N], WireError> {
        exact::<N>(tag, self.require(tag, name)?)
    }

    /// Ends decoding: fails with [`WireError::UnknownCriticalField`] (naming the smallest such
    /// tag) if a critical field was not taken.
    pub fn finish(self) -> Result<(), WireError> {
        match self.present.first_critical_not_in(&self.taken) {
            Some(tag) => Err(WireError::UnknownCriticalField(tag)),
            None => Ok(()),
        }
    }
}

/// Reads one `tag, len, value` field.
fn read_field<'a>(reader: &mut Reader<'a>) -> Result<(u8, &'a [u8]), WireError> {
    let tag = reader.u8()?;
    let len = reader.u16()?;
    let value = reader.bytes(usize::from(len))?;
    Ok((tag, value))
}

/// `value` as an array of exactly `N` bytes.
fn exact<const N: usize>(tag: u8, value: &[u8]) -> Result<[u8; N], WireError> {
    <[u8; N]>::try_from(value).map_err(|_| WireError::BadFieldLength { field: tag, len: value.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_access_checks_lengths() {
        let body = [0x81, 2, 0, 1, 2, 0x82, 3, 0, 1, 2, 3];
        let mut fields = Fields::parse(&body).unwrap();
        assert_eq!(fields.require_array::<2>(0x81, "a"), Ok([1, 2]));
        assert_eq!(fields.take_array::<2>(0x82), Err(WireError::BadFieldLength { field: 0x82, len: 3 }));
        assert_eq!(fields.take_array::<2>(0x83), Ok(None));
        assert_eq!(fields.require_array::<2>(0x84, "d"), Err(WireError::MissingField("d")));
        assert_eq!(fields.finish(), Ok(()));
    }

    #[test]
    fn a_field_can_be_taken_once() {
        let body = [0x81, 0, 0];
        let mut fields = Fields::parse(&body).unwrap();
        assert!(fields.take(0x81).is_some());
        assert_eq!(fields.require(0x81, "x"), Err(WireError::MissingField("x")));
    }
}
