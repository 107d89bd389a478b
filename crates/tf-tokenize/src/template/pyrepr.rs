//! How `{{ value }}` prints, as Python's `str()` would: `None`, `True`, `1e+16`,
//! `['a', None]`, `{'k': 'v'}` (minijinja's own printing says `none`, `true`, `["a", none]`).

use minijinja::value::ValueKind;
use minijinja::{Error, Output, State, Value};

use super::pyjson::py_float_repr;

/// Whether Python's `repr` would escape this character (an approximation of
/// `str.isprintable`: ASCII and Latin-1 controls, non-breaking and zero-width spaces,
/// line/paragraph separators, the byte-order mark).
fn needs_escape(c: char) -> bool {
    let u = c as u32;
    u < 0x20
        || (0x7F..=0xA0).contains(&u)
        || matches!(u, 0xAD | 0x200B..=0x200F | 0x2028 | 0x2029 | 0xFEFF)
}

/// Python's `repr` of a string.
fn repr_str(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if needs_escape(c) => {
                let u = c as u32;
                if u <= 0xFF {
                    out.push_str(&format!("\\x{u:02x}"));
                } else {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Python's `str(value)` (strings bare) or, inside containers, `repr(value)`.
pub fn py_str(v: &Value, nested: bool, out: &mut String) -> Result<(), Error> {
    match v.kind() {
        ValueKind::Undefined if !nested => {}
        ValueKind::None | ValueKind::Undefined => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => {
            let f = f64::try_from(v.clone())?;
            out.push_str(&match py_float_repr(f).as_str() {
                "Infinity" => "inf".to_string(),
                "-Infinity" => "-inf".to_string(),
                "NaN" => "nan".to_string(),
                other => other.to_string(),
            });
        }
        ValueKind::String if nested => repr_str(v.as_str().unwrap_or_default(), out),
        ValueKind::Seq => {
            out.push('[');
            for (i, item) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_str(&item, true, out)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, k) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_str(&k, true, out)?;
                out.push_str(": ");
                py_str(&v.get_item(&k)?, true, out)?;
            }
            out.push('}');
        }
        _ => out.push_str(&v.to_string()),
    }
    Ok(())
}

/// The environment's formatter: strings as they are, everything else as Python prints it.
pub fn formatter(out: &mut Output, _state: &State, value: &Value) -> Result<(), Error> {
    let mut s = String::new();
    if let (ValueKind::String, Some(text)) = (value.kind(), value.as_str()) {
        s.push_str(text);
    } else {
        py_str(value, false, &mut s)?;
    }
    out.write_str(&s).map_err(Error::from)
}
