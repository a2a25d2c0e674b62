//! Human-readable names carried in control messages: the worker name of a worker address
//! (`UCP_WORKER_PARAM_FIELD_NAME`) and the endpoint name of a connection request
//! (`UCP_EP_PARAM_FIELD_NAME`).
//!
//! UCP keeps these as NUL-terminated C strings of bounded size, so a name here is UTF-8 of at
//! most [`MAX_NAME_LEN`] bytes with no NUL in it: a NUL would silently cut the name short once it
//! reaches a C string.

use crate::error::WireError;

/// The longest worker or endpoint name, in bytes of UTF-8.
pub const MAX_NAME_LEN: usize = 64;

/// Checks the length cap and that the name has no NUL character.
pub(crate) fn validate_name(name: &str) -> Result<(), WireError> {
    if name.len() > MAX_NAME_LEN {
        return Err(WireError::TooLong { len: name.len(), max: MAX_NAME_LEN });
    }
    if name.contains('\0') {
        return Err(WireError::Invalid("name contains a NUL character"));
    }
    Ok(())
}

/// Decodes and checks a name field's value; the cap is checked before anything is copied.
pub(crate) fn decode_name(value: &[u8]) -> Result<String, WireError> {
    if value.len() > MAX_NAME_LEN {
        return Err(WireError::TooLong { len: value.len(), max: MAX_NAME_LEN });
    }
    let name = std::str::from_utf8(value).map_err(|_| WireError::Invalid("name is not UTF-8"))?;
    validate_name(name)?;
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_names_up_to_the_cap() {
        assert_eq!(decode_name(b""), Ok(String::new()));
        let longest = "é".repeat(MAX_NAME_LEN / 2);
        assert_eq!(longest.len(), MAX_NAME_LEN);
        assert_eq!(decode_name(longest.as_bytes()), Ok(longest));
    }

    #[test]
    fn rejects_long_names() {
        let long = "n".repeat(MAX_NAME_LEN + 1);
        let expected = WireError::TooLong { len: MAX_NAME_LEN + 1, max: MAX_NAME_LEN };
        assert_eq!(validate_name(&long), Err(expected.clone()));
        assert_eq!(decode_name(long.as_bytes()), Err(expected));
    }

    #[test]
    fn rejects_bad_utf8_and_nul() {
        for bad in [&b"\xFF"[..], b"ab\xC3", b"\xED\xA0\x80", b"a\0b"] {
            assert!(matches!(decode_name(bad), Err(WireError::Invalid(_))), "{bad:?}");
        }
        assert!(matches!(validate_name("a\0"), Err(WireError::Invalid(_))));
    }
}
