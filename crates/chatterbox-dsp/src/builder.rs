//! `with_*` builder methods for the public fields of option and configuration structs, so a
//! caller can write `Config::default().with_x(1).with_y(2)` instead of mutating a default.

/// `with_setters!(Type { with_x => x: T, ... })`: one `with_x(self, T) -> Self` per field.
/// Exported for the crates above this one (the vocoder's and the watermarker's configs), not
/// part of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! with_setters {
    ($ty:ty { $($setter:ident => $field:ident: $fty:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("Sets [`", stringify!($field), "`](Self::", stringify!($field), ").")]
                #[must_use]
                pub fn $setter(mut self, value: $fty) -> Self {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}
