//! Enums carried on the wire as fixed-width integers: one declaration, one
//! decoder.
//!
//! `wire_enum!` defines a `#[repr(uN)]` fieldless enum with fixed
//! discriminants together with everything that decodes and encodes it, so
//! that no decoder is written by hand (a forgotten arm would silently reject
//! a legal value):
//!
//! - `const fn from_raw(raw: uN) -> Option<Self>`: `None` for a value that
//!   names no variant;
//! - `const fn as_raw(self) -> uN`;
//! - `const ALL: &[Self]`: every variant, in declaration order;
//! - `TryFrom<uN>` with the typed error [`Unknown<Self>`], and
//!   `From<Self> for uN`;
//! - the [`WireEnum`] trait, so tests can check every enum generically.
//!
//! Which error an unknown value becomes (`UnknownOpcode`, `BadPacket`,
//! `BadConfig`, ...) is the caller's decision: it depends on where the value
//! came from, not on the enum.

/// An enum carried on the wire as a fixed-width integer, defined with
/// `wire_enum!`.
pub trait WireEnum: Copy + Eq + core::fmt::Debug + 'static {
    /// The integer type it is carried as.
    type Raw: Copy + Eq + core::fmt::Debug + core::fmt::Display;
    /// Every variant, in declaration order.
    const ALL: &'static [Self];
    /// Decode; `None` for a value that names no variant.
    fn from_raw(raw: Self::Raw) -> Option<Self>;
    /// Encode.
    fn as_raw(self) -> Self::Raw;
}

/// A raw value that names no variant of `E` (the error of `E::try_from`).
pub struct Unknown<E: WireEnum>(pub E::Raw);

impl<E: WireEnum> Clone for Unknown<E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E: WireEnum> Copy for Unknown<E> {}

impl<E: WireEnum> PartialEq for Unknown<E> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<E: WireEnum> Eq for Unknown<E> {}

impl<E: WireEnum> core::fmt::Debug for Unknown<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("Unknown").field(&self.0).finish()
    }
}

impl<E: WireEnum> core::fmt::Display for Unknown<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} names no {}", self.0, core::any::type_name::<E>())
    }
}

/// Define a `#[repr(uN)]` wire enum and its decoder (see the module
/// documentation). Syntax: an ordinary enum declaration with the repr after
/// the name, and a literal discriminant on every variant:
///
/// ```text
/// wire_enum! {
///     /// Docs.
///     #[derive(Clone, Copy, Debug, PartialEq, Eq)]
///     pub enum Colour: u8 {
///         /// Docs.
///         Red = 1,
///         /// Docs.
///         Green = 2,
///     }
/// }
/// ```
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $repr:ident {
            $(
                $(#[$vmeta:meta])*
                $variant:ident = $value:literal
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr($repr)]
        $vis enum $name {
            $(
                $(#[$vmeta])*
                $variant = $value,
            )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// Decode a raw value; `None` if it names no variant.
            pub const fn from_raw(raw: $repr) -> Option<Self> {
                match raw {
                    $($value => Some(Self::$variant),)+
                    _ => None,
                }
            }

            /// The raw value (the discriminant).
            pub const fn as_raw(self) -> $repr {
                self as $repr
            }
        }

        impl $crate::abi::WireEnum for $name {
            type Raw = $repr;
            const ALL: &'static [Self] = $name::ALL;
            fn from_raw(raw: $repr) -> Option<Self> {
                $name::from_raw(raw)
            }
            fn as_raw(self) -> $repr {
                $name::as_raw(self)
            }
        }

        impl ::core::convert::TryFrom<$repr> for $name {
            type Error = $crate::abi::Unknown<$name>;
            fn try_from(raw: $repr) -> Result<Self, Self::Error> {
                match $name::from_raw(raw) {
                    Some(v) => Ok(v),
                    None => Err($crate::abi::Unknown(raw)),
                }
            }
        }

        impl ::core::convert::From<$name> for $repr {
            fn from(v: $name) -> $repr {
                v.as_raw()
            }
        }
    };
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::{Unknown, WireEnum};
    use crate::abi::command::Opcode;
    use crate::abi::error::{ErrorCode, ErrorKind};
    use crate::abi::packet::PacketType;
    use crate::abi::regs::{MailboxOp, Param};

    /// Every raw value in `raws`: decodes to a variant that encodes back to
    /// it, or is refused by both decoders; every variant is reached exactly
    /// once. Returns the accepted raw values in order.
    fn exhaustive<E>(raws: impl Iterator<Item = E::Raw>) -> Vec<E::Raw>
    where
        E: WireEnum + TryFrom<E::Raw, Error = Unknown<E>>,
        E::Raw: Into<u32>,
    {
        let mut accepted = Vec::new();
        for raw in raws {
            let decoded = E::from_raw(raw);
            assert_eq!(E::try_from(raw), decoded.ok_or(Unknown(raw)), "{raw}");
            if let Some(v) = decoded {
                assert_eq!(v.as_raw(), raw);
                accepted.push(raw);
            }
        }
        assert_eq!(accepted.len(), E::ALL.len());
        for (v, raw) in E::ALL.iter().zip(&accepted) {
            assert_eq!(v.as_raw(), *raw, "ALL is in discriminant order");
            assert_eq!(E::from_raw(v.as_raw()), Some(*v));
        }
        accepted
    }

    fn range_u32(lo: u32, hi: u32) -> Vec<u32> {
        (lo..=hi).collect()
    }

    fn widen<R: Into<u32> + Copy>(v: Vec<R>) -> Vec<u32> {
        v.into_iter().map(Into::into).collect()
    }

    #[test]
    fn opcodes_are_exactly_1_to_8() {
        assert_eq!(widen(exhaustive::<Opcode>(0..=u8::MAX)), range_u32(1, 8));
        assert_eq!(u8::from(Opcode::QueueInit), 0x08);
    }

    #[test]
    fn packet_types_are_exactly_1_to_12() {
        assert_eq!(
            widen(exhaustive::<PacketType>(0..=u8::MAX)),
            range_u32(1, 12)
        );
    }

    #[test]
    fn mailbox_ops_are_exactly_1_to_6() {
        assert_eq!(widen(exhaustive::<MailboxOp>(0..=u8::MAX)), range_u32(1, 6));
    }

    #[test]
    fn params_are_exactly_1_to_6() {
        assert_eq!(widen(exhaustive::<Param>(0..=u8::MAX)), range_u32(1, 6));
    }

    #[test]
    fn error_kinds_are_exactly_0_to_4() {
        assert_eq!(widen(exhaustive::<ErrorKind>(0..=u8::MAX)), range_u32(0, 4));
    }

    #[test]
    fn error_codes_are_exactly_1_to_23_and_never_0() {
        assert_eq!(
            widen(exhaustive::<ErrorCode>(0..=u16::MAX)),
            range_u32(1, 23)
        );
        assert_eq!(ErrorCode::try_from(0), Err(Unknown(0)));
    }
}
