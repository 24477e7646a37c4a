//! One definition for every "enum carried as a byte" of the three families.
//!
//! Kind bytes, status codes, refusal reasons, protocol ids, shape codes:
//! each is a fieldless enum whose discriminant is its byte on the wire, and
//! each needs the same four things: the byte of a value, the value of a
//! byte (or the error *that field* reports for an undefined byte), the
//! standard conversions, and a name for humans. [`wire_enum!`] writes them
//! from the enum's definition alone, so the byte table exists exactly once
//! and an inverse can never drift from its forward mapping.

/// Defines a fieldless `#[repr(u8)]` enum whose discriminants are its wire
/// bytes, with:
///
/// - `ALL`: every value in declaration order;
/// - `to_u8(self)` (and `From<Enum> for u8`): the byte;
/// - `from_u8(byte)` (and `TryFrom<u8>`): the value, or the error the
///   second argument (a function of the undefined byte) builds;
/// - `name(self)` and `Display`: the variant's name.
///
/// ```ignore
/// wire_enum! {
///     /// Doc.
///     pub enum Colour (DecodeError, |_| DecodeError::BadField("colour")) {
///         /// Doc.
///         Red = 1,
///     }
/// }
/// ```
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($err:ty, $mk_err:expr) {
            $(
                $(#[$vmeta:meta])*
                $variant:ident = $value:literal,
            )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        $vis enum $name {
            $(
                $(#[$vmeta])*
                $variant = $value,
            )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The byte that stands for this value on the wire.
            #[must_use]
            pub const fn to_u8(self) -> u8 {
                self as u8
            }

            /// The value byte `v` stands for, or this field's error when it
            /// stands for none.
            pub fn from_u8(v: u8) -> Result<Self, $err> {
                match v {
                    $($value => Ok(Self::$variant),)+
                    #[allow(clippy::redundant_closure_call)]
                    other => Err(($mk_err)(other)),
                }
            }

            /// The value's name, as written in the code and the docs.
            #[must_use]
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => stringify!($variant),)+
                }
            }
        }

        impl ::core::convert::TryFrom<u8> for $name {
            type Error = $err;

            fn try_from(v: u8) -> Result<Self, $err> {
                Self::from_u8(v)
            }
        }

        impl ::core::convert::From<$name> for u8 {
            fn from(v: $name) -> u8 {
                v.to_u8()
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

pub(crate) use wire_enum;

#[cfg(test)]
mod tests {
    use crate::DecodeError;

    wire_enum! {
        /// A test enum with a gap and a high value.
        enum Sample (DecodeError, DecodeError::UnknownKind) {
            /// One.
            One = 1,
            /// Three.
            Three = 3,
            /// High.
            High = 0xF0,
        }
    }

    #[test]
    fn every_byte_decodes_to_its_value_or_the_fields_error() {
        for b in 0..=u8::MAX {
            match Sample::from_u8(b) {
                Ok(v) => {
                    assert_eq!(v.to_u8(), b);
                    assert_eq!(u8::from(v), b);
                    assert!(Sample::ALL.contains(&v));
                }
                Err(e) => {
                    assert_eq!(e, DecodeError::UnknownKind(b));
                    assert!(!Sample::ALL.iter().any(|v| v.to_u8() == b));
                }
            }
            assert_eq!(Sample::try_from(b), Sample::from_u8(b));
        }
    }

    #[test]
    fn display_is_the_variant_name() {
        assert_eq!(Sample::Three.to_string(), "Three");
        assert_eq!(Sample::High.name(), "High");
        assert_eq!(Sample::ALL, &[Sample::One, Sample::Three, Sample::High]);
    }
}
