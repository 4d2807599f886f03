//! The bench commands' JSON: `serde_json` over `Serialize` structs, with the decimals each
//! number is reported with (`serialize_with` helpers below).

use serde::Serializer;

/// `x` with `places` decimals, as the number the JSON carries; `None` (JSON `null`) when `x`
/// is not finite.
fn rounded(x: f64, places: usize) -> Option<f64> {
    if x.is_finite() {
        format!("{x:.places$}").parse().ok()
    } else {
        None
    }
}

/// An `f64` with 3 decimals (`null` when not finite).
pub(crate) fn places3<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_some(&rounded(*x, 3))
}

/// An `f64` with 4 decimals (`null` when not finite).
pub(crate) fn places4<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_some(&rounded(*x, 4))
}

/// An `f64` with 6 decimals (`null` when not finite).
pub(crate) fn places6<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_some(&rounded(*x, 6))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct T {
        #[serde(serialize_with = "places3")]
        a: f64,
        #[serde(serialize_with = "places4")]
        b: f64,
        #[serde(serialize_with = "places6")]
        c: f64,
    }

    #[test]
    fn numbers_are_rounded_and_non_finite_ones_are_null() {
        let t = T {
            a: 1.23456,
            b: f64::NAN,
            c: 2.0,
        };
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "{\"a\":1.235,\"b\":null,\"c\":2.0}"
        );
    }
}
